//! The documented answers of the two start routes, `POST /catalog/{kind}` and
//! `POST /catalog/pipeline`, written once: both answer through `catalog::launch` and
//! `catalog::launch_pipeline`, so they share every answer but the waited 200 (each route's
//! own report) and the job start's 404 (an unknown kind), each in its route's annotation. What
//! differs in the words is what was started.

use std::collections::BTreeMap;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema, ToSchema};

use super::error::ErrorBody;
use crate::jobs::Snapshot;

/// The header that marks the answer to a retry of an `Idempotency-Key`.
const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// What a start route starts, in the words of its answers.
struct Started {
    /// `job` or `pipeline`.
    noun: &'static str,
    /// The 202's body, after "Started, joined or replayed …:".
    accepted: &'static str,
    /// What an active one of refuses the start with 409.
    conflict: &'static str,
    /// The 422's codes, as this route reads its fields.
    fields: &'static str,
}

/// `POST /catalog/{kind}`'s answers beside its waited 200.
pub struct JobStartAnswers;

/// `POST /catalog/pipeline`'s answers beside its waited 200.
pub struct PipelineStartAnswers;

impl IntoResponses for JobStartAnswers {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        start_answers(&Started {
            noun: "job",
            accepted: "the job",
            conflict: "a job of this kind",
            fields: "`missing_field`, `invalid_field`, `unknown_field`, `source_not_allowed`, `source_not_found`, `idempotency_key_reused` or `duplicate_key` (a JSON body giving a key twice)",
        })
    }
}

impl IntoResponses for PipelineStartAnswers {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        start_answers(&Started {
            noun: "pipeline",
            accepted: "the pipeline, its `steps` each with its own job's id, status and percent",
            conflict: "a pipeline, or a job of one of its steps' kinds,",
            fields: "`invalid_field` (a bad `steps`), `unknown_field` (a field of no step, or of a step not in `steps`), `missing_field`, `source_not_allowed`, `source_not_found`, `idempotency_key_reused` or `duplicate_key`",
        })
    }
}

/// The answers both start routes give, 202 and every refusal.
fn start_answers(started: &Started) -> BTreeMap<String, RefOr<Response>> {
    let Started {
        noun,
        accepted,
        conflict,
        fields,
    } = started;
    let created = ResponseBuilder::new()
        .description(format!("Started, joined or replayed (or still running after `WAIT_MAX_SECONDS` with `wait=true`): {accepted}; poll `Location`. A replay of an `Idempotency-Key` carries `{REPLAYED_HEADER}: true`."))
        .content("application/json", json_of(Snapshot::name()))
        .header("Location", string_header(&format!("Where to poll the {noun}: `/catalog/jobs/{{job_id}}`.")))
        .header(REPLAYED_HEADER, string_header("`true`, only on the answer to a retry of an `Idempotency-Key` (absent otherwise)."))
        .build();
    let rate_limited = ResponseBuilder::new()
        .description("`rate_limited`: the tenant started `TENANT_CREATES_PER_MINUTE` jobs this minute (a pipeline counts one); nothing was created.")
        .content("application/json", json_of(ErrorBody::name()))
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(u64::schema()))
                .description(Some("Seconds until the tenant's minute ends."))
                .build(),
        )
        .build();
    [
        ("202", RefOr::T(created)),
        ("400", refusal("`malformed_body`.")),
        ("403", refusal("`forbidden`: the token is for another tenant than the one named, or may only read (`read:…`).")),
        ("408", refusal("`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; the connection is closed and nothing was created.")),
        ("409", refusal(&format!("`already_running`: {conflict} is active for the tenant (its `job_id`); with `on_conflict=join`, one whose parameters differ."))),
        ("413", refusal("`payload_too_large` (beyond `MAX_START_BODY_BYTES`).")),
        ("415", refusal("`unsupported_media_type`.")),
        ("422", refusal(&format!("{fields} (with `field`)."))),
        ("429", RefOr::T(rate_limited)),
        ("502", refusal(&format!("`job_failed`: with `wait=true`, the {noun} failed or was cancelled (it is in `job`, with any partial report in its `result`)."))),
        ("503", refusal("`overloaded`, `shutting_down` or `store_unavailable`; nothing was created.")),
    ]
    .into_iter()
    .map(|(status, answer)| (status.to_owned(), answer))
    .collect()
}

/// An error answer: the envelope, described.
fn refusal(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", json_of(ErrorBody::name()))
            .build(),
    )
}

/// A JSON body of the named schema.
fn json_of(schema: impl Into<String>) -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(schema)))
        .build()
}

/// A string header, described.
fn string_header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(Some(String::schema()))
        .description(Some(description))
        .build()
}
