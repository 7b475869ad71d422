//! The OpenAPI rows that several routes share, written once (the routes name them in their
//! `#[utoipa::path]` annotations):
//! - the two start routes, `POST /catalog/{kind}` and `POST /catalog/pipeline`, answer through
//!   `catalog::launch` and `catalog::launch_pipeline`, so they share every answer but the
//!   waited 200 (each route's own report) and the job start's 404 (an unknown kind), each in
//!   its route's annotation; what differs in the words is what was started;
//! - a create (a start's or a retry's) is refused alike by the tenant's rate and the instance;
//! - a job named by its path (`{job_id}`, and an optional `tenant_id` it must belong to) is
//!   found or refused alike by every route that reads one (`jobs::visible`);
//! - both event streams take a place in the same budget (`streams`), refused alike.

use std::collections::BTreeMap;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, Response, ResponseBuilder};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

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
    [
        ("202", RefOr::T(created)),
        ("400", refusal("`malformed_body`.")),
        ("403", refusal("`forbidden`: the token is for another tenant than the one named, or may only read (`read:…`).")),
        ("408", refusal("`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; the connection is closed and nothing was created.")),
        ("409", refusal(&format!("`already_running`: {conflict} is active for the tenant (its `job_id`); with `on_conflict=join`, one whose parameters differ."))),
        ("413", refusal("`payload_too_large` (beyond `MAX_START_BODY_BYTES`).")),
        ("415", refusal("`unsupported_media_type`.")),
        ("422", refusal(&format!("{fields} (with `field`)."))),
        ("502", refusal(&format!("`job_failed`: with `wait=true`, the {noun} failed or was cancelled (it is in `job`, with any partial report in its `result`)."))),
    ]
    .into_iter()
    .map(|(status, answer)| (status.to_owned(), answer))
    .chain(CreateRefusals::responses())
    .collect()
}

/// How a create is refused before anything is made (a start's, or a retry's): the tenant's
/// rate, or this instance's queue, shutdown or store.
pub struct CreateRefusals;

impl IntoResponses for CreateRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refused_for_now(
            "`rate_limited`: the tenant started `TENANT_CREATES_PER_MINUTE` jobs this minute (a pipeline counts one); nothing was created.",
            "Seconds until the tenant's minute ends.",
            "`overloaded`, `shutting_down` or `store_unavailable`; nothing was created.",
        )
    }
}

/// A job named by its path: `{job_id}`, and the `tenant_id` it must belong to.
pub struct JobPath;

impl IntoParams for JobPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let param = |name: &str, place, required, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(place)
                .required(required)
                .description(Some(description))
                .schema(Some(String::schema()))
                .build()
        };
        vec![
            param("job_id", ParameterIn::Path, Required::True, "The job's id, as its start answered it."),
            param("tenant_id", ParameterIn::Query, Required::False, "The tenant the job must belong to: a job of another tenant answers 404 exactly as an unknown id."),
        ]
    }
}

/// How a route that reads a job by its path refuses: no such job (or not the caller's to
/// see), or a bad query.
pub struct JobNotVisible;

impl IntoResponses for JobNotVisible {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        BTreeMap::from([
            ("404".to_owned(), refusal("`not_found`: no job has this id (or it expired after `JOB_TTL_SECONDS`), or it is another tenant's (the `tenant_id` named, or the token's).")),
            ("422".to_owned(), refusal("`invalid_field` (a bad `tenant_id`) or `unknown_field` (any other query field), with `field`.")),
        ])
    }
}

/// How an event stream is refused a place (`streams`): per tenant, then per instance.
pub struct StreamRefusals;

impl IntoResponses for StreamRefusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refused_for_now(
            "`too_many_streams` (asked for a stream): the tenant holds `MAX_EVENT_STREAMS_PER_TENANT` event streams on this instance; close one, or retry after `Retry-After` (a job's timeline can also be read as JSON, a tenant's changes by polling the listing).",
            "Seconds before asking again.",
            "`store_unavailable`, or `overloaded` (asked for a stream): `MAX_EVENT_STREAMS` event streams are open on this instance.",
        )
    }
}

/// A refusal that may pass: 429 (the tenant's share, with `Retry-After`) and 503 (the instance).
fn refused_for_now(
    too_many: &str,
    retry_after: &str,
    unavailable: &str,
) -> BTreeMap<String, RefOr<Response>> {
    let too_many = ResponseBuilder::new()
        .description(too_many)
        .content("application/json", json_of(ErrorBody::name()))
        .header("Retry-After", integer_header(retry_after))
        .build();
    BTreeMap::from([
        ("429".to_owned(), RefOr::T(too_many)),
        ("503".to_owned(), refusal(unavailable)),
    ])
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

/// A whole number of seconds header, described.
fn integer_header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(Some(u64::schema()))
        .description(Some(description))
        .build()
}
