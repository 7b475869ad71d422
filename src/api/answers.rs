//! The OpenAPI rows that several routes share, written once (the routes name them in their
//! `#[utoipa::path]` annotations):
//! - the two start routes, `POST /catalog/{kind}` and `POST /catalog/pipeline`, answer through
//!   `catalog::launch` and `catalog::launch_pipeline`, so they share their fields and every
//!   answer but the job start's 404 (an unknown kind, in its annotation); what differs in
//!   the words is what was started, and the waited 200's report;
//! - a create (a start's or a retry's) is refused alike by the tenant's rate and the instance;
//! - a job named by its path (`{job_id}`, and an optional `tenant_id` it must belong to) is
//!   found or refused alike by every route that reads one (`jobs::visible`);
//! - both event streams take a place in the same budget (`streams`), refused alike;
//! - both bulk actions answer through `bulk::walk`, alike but for what each selects;
//! - the refusals many routes give in the same words (`refusals!`: the store away, another
//!   tenant's token, a read-only one, a field).

use std::collections::BTreeMap;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, Response, ResponseBuilder};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

use super::error::ErrorBody;
use crate::catalog::report::{JobReport, PipelineReport};
use crate::jobs::Snapshot;

/// Answers a route names in its `responses(...)`: a type each, a line each here, the type
/// and the expression that builds its answers from the words that differ.
macro_rules! answers_from {
    ($($(#[$doc:meta])* $name:ident = $build:expr;)*) => {$(
        $(#[$doc])*
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::Response>,
            > {
                $build
            }
        }
    )*};
}
pub(super) use answers_from;

/// The header that marks the answer to a retry of an `Idempotency-Key`.
const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// What a start route starts, in the words of its parameters and answers.
struct Started {
    /// `job` or `pipeline`.
    noun: &'static str,
    /// The 202's body, after "Started, joined or replayed …:".
    accepted: &'static str,
    /// What an active one of refuses the start with 409.
    conflict: &'static str,
    /// The 422's codes, as this route reads its fields.
    fields: &'static str,
    /// What a `source` is needed for, beyond a sync's feed ("" for nothing more).
    source: &'static str,
    /// Where an `Idempotency-Key` is unique beside its tenant ("" for nowhere else).
    key_scope: &'static str,
    /// What a waited start's 200 says was done, and what its report is.
    done: &'static str,
    /// What made the report, as its `Location` names it.
    reporter: &'static str,
}

const JOB_START: Started = Started {
    noun: "job",
    accepted: "the job",
    conflict: "a job of this kind",
    fields: "`missing_field`, `invalid_field`, `unknown_field`, `source_not_allowed`, `source_not_found`, `idempotency_key_reused` or `duplicate_key` (a JSON body giving a key twice)",
    source: "",
    key_scope: " and kind",
    done: "the job is done: its report",
    reporter: "The job that made the report",
};

const PIPELINE_START: Started = Started {
    noun: "pipeline",
    accepted: "the pipeline, its `steps` each with its own job's id, status and percent",
    conflict: "a pipeline, or a job of one of its steps' kinds,",
    fields: "`invalid_field` (a bad `steps`), `unknown_field` (a field of no step, or of a step not in `steps`), `missing_field`, `source_not_allowed`, `source_not_found`, `idempotency_key_reused` or `duplicate_key`",
    source: " Required when `steps` has sync.",
    key_scope: "",
    done: "every step is done: each step's report, by kind",
    reporter: "The pipeline",
};

answers_from! {
    /// `POST /catalog/{kind}`'s answers beside its 404 (an unknown kind).
    JobStartAnswers = start_answers::<JobReport>(&JOB_START);
    /// `POST /catalog/pipeline`'s answers.
    PipelineStartAnswers = start_answers::<PipelineReport>(&PIPELINE_START);
}

/// The fields `POST /catalog/{kind}` takes whatever the kind, and its header.
pub struct JobStartParams;

/// The fields `POST /catalog/pipeline` takes beside `steps`, and its header.
pub struct PipelineStartParams;

impl IntoParams for JobStartParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        start_params(&JOB_START)
    }
}

impl IntoParams for PipelineStartParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        start_params(&PIPELINE_START)
    }
}

/// The query fields and the header both start routes take, in their words.
fn start_params(started: &Started) -> Vec<Parameter> {
    let Started {
        noun,
        conflict,
        source,
        key_scope,
        ..
    } = started;
    vec![
        param(ParameterIn::Query, Required::False, "tenant_id", String::schema(), "The tenant (here or in the body)."),
        param(ParameterIn::Query, Required::False, "wait", String::schema(), &format!("Hold the request until the {noun} ends: `true/false/1/0/yes/no/on/off`.")),
        param(ParameterIn::Query, Required::False, "source", Vec::<String>::schema(), &format!("sync: a feed; repeatable.{source}")),
        param(ParameterIn::Query, Required::False, "force", String::schema(), "enrich: re-extract unchanged products."),
        param(ParameterIn::Query, Required::False, "full", String::schema(), "pair: pair every product with word weights counted afresh, even when an incremental pair could."),
        param(ParameterIn::Query, Required::False, "on_conflict", String::schema(), &format!("`reject` (default: 409 while {conflict} is active) or `join` (answer with the active {noun} when its parameters are these).")),
        param(ParameterIn::Header, Required::False, "Idempotency-Key", String::schema(), &format!("1–255 characters: a retry with the same key (same tenant{key_scope}) answers with the first request's {noun}, marked `{REPLAYED_HEADER}: true`, for `JOB_TTL_SECONDS`.")),
    ]
}

/// A parameter, described.
fn param(
    place: ParameterIn,
    required: Required,
    name: &str,
    schema: impl Into<RefOr<Schema>>,
    description: &str,
) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(place)
        .required(required)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// The answers both start routes give: the waited 200 with its `Report`, the 202, and every
/// refusal.
fn start_answers<Report: ToSchema>(started: &Started) -> BTreeMap<String, RefOr<Response>> {
    let Started {
        noun,
        accepted,
        conflict,
        fields,
        done,
        reporter,
        ..
    } = started;
    let replayed = || {
        string_header(
            "`true`, only on the answer to a retry of an `Idempotency-Key` (absent otherwise).",
        )
    };
    let waited = ResponseBuilder::new()
        .description(format!("`wait=true` and {done}."))
        .content("application/json", json_of(Report::name()))
        .header(
            "Location",
            string_header(&format!("{reporter}: `/catalog/jobs/{{job_id}}`.")),
        )
        .header(REPLAYED_HEADER, replayed())
        .build();
    let created = ResponseBuilder::new()
        .description(format!("Started, joined or replayed (or still running after `WAIT_MAX_SECONDS` with `wait=true`): {accepted}; poll `Location`. A replay of an `Idempotency-Key` carries `{REPLAYED_HEADER}: true`."))
        .content("application/json", json_of(Snapshot::name()))
        .header("Location", string_header(&format!("Where to poll the {noun}: `/catalog/jobs/{{job_id}}`.")))
        .header(REPLAYED_HEADER, replayed())
        .build();
    [
        ("200", RefOr::T(waited)),
        ("202", RefOr::T(created)),
        ("400", refusal("`malformed_body`.")),
        ("403", refusal("`forbidden`: the token is for another tenant than the one named, or may only read (`read:…`).")),
        ("408", refusal("`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; the connection is closed and nothing was created.")),
        ("409", refusal(&format!("`already_running`: {conflict} is active for the tenant (its `job_id`); with `on_conflict=join`, one whose parameters differ."))),
        ("413", refusal("`payload_too_large` (beyond `MAX_START_BODY_BYTES`, by its `Content-Length` or as it comes); the answer carries `Connection: close` and the connection ends with it (the body is left unread).")),
        ("415", refusal("`unsupported_media_type`: a content type not listed, or a compressed body (a `Content-Encoding` other than `identity`; that answer carries `Accept-Encoding: identity` and `Connection: close`, and the connection ends with it).")),
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
            "`overloaded`, `shutting_down` or `store_unavailable` (Redis does not answer, refuses this service's settings, or has fewer replicas connected than `REDIS_MIN_REPLICAS_ACK` asks for); nothing was created — except by a `store_unavailable` that names a `job_id`: created, but fewer replicas than `REDIS_MIN_REPLICAS_ACK` confirmed it in time, or a `wait=true` start whose job goes on but whose state the store did not give when the wait ended (poll it); and by a `shutting_down` that names one: a `wait=true` start on the embedded store whose instance stopped while it waited, the job ending with the process.",
        )
    }
}

/// A job named by its path: `{job_id}`, and the `tenant_id` it must belong to.
pub struct JobPath;

impl IntoParams for JobPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            param(ParameterIn::Path, Required::True, "job_id", String::schema(), "The job's id, as its start answered it."),
            param(ParameterIn::Query, Required::False, "tenant_id", String::schema(), "The tenant the job must belong to: a job of another tenant answers 404 exactly as an unknown id."),
        ]
    }
}

/// How a route that reads a job by its path refuses: no such job (or not the caller's to
/// see), or a bad query.
pub struct JobNotVisible;

impl IntoResponses for JobNotVisible {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        BTreeMap::from([
            ("422".to_owned(), refusal("`invalid_field` (a bad `tenant_id`) or `unknown_field` (any other query field, or a field of a JSON or form body: the route reads no body), with `field`.")),
        ])
        .into_iter()
        .chain(JobNotFound::responses())
        .collect()
    }
}

/// What a bulk action does, in the words of its answers.
pub struct BulkAction {
    /// What `more` says, after "`more` when".
    pub more: &'static str,
    /// Whom the 403 refuses beside a read-only token.
    pub forbidden: &'static str,
    /// The fields a 422 names, and how a reused key reads.
    pub fields: &'static str,
    /// The 503's codes, and why sending the call again is safe.
    pub unavailable: &'static str,
}

/// The answers of both bulk actions: what was done to each job (`Answer`), and every refusal.
pub fn bulk_answers<Answer: ToSchema>(action: &BulkAction) -> BTreeMap<String, RefOr<Response>> {
    let BulkAction {
        more,
        forbidden,
        fields,
        unavailable,
    } = action;
    let done = ResponseBuilder::new()
        .description(format!("What was done to each job (at most 100; `more` when {more}; `matched` counts them all)."))
        .content("application/json", json_of(Answer::name()))
        .header(REPLAYED_HEADER, string_header("`true`, only on the answer to a call sent again with its `Idempotency-Key`."))
        .build();
    BTreeMap::from([
        ("200".to_owned(), RefOr::T(done)),
        ("400".to_owned(), refusal("`malformed_body`: not a JSON object.")),
        ("408".to_owned(), refusal("`request_timeout`: the body did not arrive within `REQUEST_TIMEOUT_SECONDS`; nothing was done.")),
        ("413".to_owned(), refusal("`payload_too_large`: the body is beyond `MAX_START_BODY_BYTES`; nothing was done. The answer carries `Connection: close` and the connection ends with it (the body is left unread).")),
        ("415".to_owned(), refusal("`unsupported_media_type`: the body is not sent as `application/json`, or comes compressed (a `Content-Encoding` other than `identity`; that answer carries `Accept-Encoding: identity` and `Connection: close`, and the connection ends with it); nothing was done.")),
        ("403".to_owned(), refusal(&format!("`forbidden`: a read-only token (`read:…`), or {forbidden}."))),
        ("422".to_owned(), refusal(&format!("`invalid_field`, `missing_field` or `unknown_field` (with `field`: {fields}; nothing was done."))),
        ("503".to_owned(), refusal(unavailable)),
    ])
}

/// A bulk call's `Idempotency-Key` header.
pub struct BulkKey;

impl IntoParams for BulkKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![param(ParameterIn::Header, Required::False, "Idempotency-Key", String::schema(), "1–255 visible ASCII characters or spaces: the same key with the same body answers the first call's answer again (`Idempotent-Replayed: true`) for `JOB_TTL_SECONDS`, and does nothing again.")]
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

// The refusals several routes answer in the same words.
answers_from! {
    /// The store did not answer (every route that reads or writes it).
    StoreUnavailable = refused("503", "`store_unavailable`.");
    /// A tenant token naming another tenant.
    OtherTenant = refused("403", "`forbidden`: the token is for another tenant than the one named.");
    /// A read-only token asking for a change.
    ReadOnly = refused("403", "`forbidden`: the token may only read (`read:…`).");
    /// A route that takes no query field, sent one.
    NoQueryField = refused("422", "`unknown_field`: this route takes no query field.");
    /// No job has the id of the path, or not one the caller may see.
    JobNotFound = refused("404", "`not_found`: no job has this id (or it expired after `JOB_TTL_SECONDS`), or it is another tenant's (the `tenant_id` named, or the token's).");
    /// A route that reads no body, sent one that is not a JSON object or a form (a field
    /// of one is 422 `unknown_field`).
    NoBody = BTreeMap::from([
        ("400".to_owned(), refusal("`malformed_body`: a body sent as JSON that is not JSON (the route reads no body; none, or `{}`, is accepted).")),
        ("415".to_owned(), refusal("`unsupported_media_type`: a body that is not a JSON object or a form (the route reads no body; none, or `{}`, is accepted).")),
    ]);
    /// A field missing, malformed or not the route's.
    BadField = refused("422", "`missing_field`, `invalid_field` or `unknown_field` (with `field`).");
}

/// One refusal, as a route's answers.
fn refused(status: &str, description: &str) -> BTreeMap<String, RefOr<Response>> {
    BTreeMap::from([(status.to_owned(), refusal(description))])
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
pub(super) fn refusal(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", json_of(ErrorBody::name()))
            .build(),
    )
}

/// A JSON body of the named schema.
pub(super) fn json_of(schema: impl Into<String>) -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(schema)))
        .build()
}

/// A string header, described.
pub(super) fn string_header(description: &str) -> utoipa::openapi::header::Header {
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
