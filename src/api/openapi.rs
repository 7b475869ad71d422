//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations
//! (the router is built from them by `utoipa-axum`, so a route cannot exist undocumented)
//! and the schema types below, which describe the JSON the handlers write. The test suite
//! validates real responses against this document, so the two cannot drift apart.
//!
//! Decisions made once for every operation, here: the `x-request-id` request and response
//! header, `Retry-After` on every 503, and the bearer-token guard of every `/catalog/...`
//! operation (its security requirement and its 401 with `WWW-Authenticate`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder, Type,
};
use utoipa::{Modify, ToSchema};

use super::auth::GUARDED_PREFIX;

/// The document's front matter; paths come from the router.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "catalog-jobs",
        description = "Runs a product catalogue's long jobs (sync, enrich, pair) per tenant. A start answers at once with a job id (or, with `wait=true`, the report); anyone can poll the job. Every error is `{\"error\": \"<code>\", \"message\": \"…\", …context}`; any unknown path answers 404 `not_found` and a known path with another method 405 `method_not_allowed`. Every response carries `x-request-id` (the client's, when it sent a sane one).",
        license(name = "MIT")
    ),
    tags(
        (name = "jobs", description = "Start, poll, list and cancel jobs"),
        (name = "products", description = "The catalogue a tenant's jobs work on"),
        (name = "tenants", description = "Removing a tenant's data"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
        (name = "admin", description = "The admin page, served by the binary")
    )
)]
struct Front;

/// The document, built once from the router's routes.
pub fn document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = super::routes().into_openapi();
        let front = <Front as utoipa::OpenApi>::openapi();
        doc.info = front.info;
        doc.tags = front.tags;
        BearerTokens.modify(&mut doc);
        add_common_headers(&mut doc);
        doc
    })
}

/// The header every request may carry and every response carries.
const REQUEST_ID: &str = "x-request-id";

/// The security scheme's name in `components.securitySchemes`.
const BEARER: &str = "bearer";

/// The bearer-token guard (`API_TOKENS_FILE` / `API_TOKENS`): a `bearer` HTTP security
/// scheme, required by every `/catalog/...` operation, each of which may answer 401
/// `unauthorized` with `WWW-Authenticate: Bearer`. The 403 `forbidden` of the operations that
/// name a tenant is in their own annotations. Health, readiness, metrics and this document
/// stay open.
struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, doc: &mut OpenApi) {
        doc.components.get_or_insert_with(Default::default).add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from `API_TOKENS_FILE` or `API_TOKENS`, scoped to one tenant or to all (`*`). Without tokens configured the service runs open and never answers 401 or 403.",
                    ))
                    .build(),
            ),
        );
        let unauthorized = ResponseBuilder::new()
            .description("`unauthorized`: no `Authorization: Bearer <token>`, or a token this service does not know (only with tokens configured).")
            .header(
                "WWW-Authenticate",
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String).build()))
                    .description(Some("`Bearer`."))
                    .build(),
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build();
        for (path, item) in doc.paths.paths.iter_mut() {
            if !path.starts_with(GUARDED_PREFIX) {
                continue;
            }
            for op in operations(item) {
                op.security = Some(vec![SecurityRequirement::new::<_, [&str; 0], &str>(
                    BEARER,
                    [],
                )]);
                op.responses
                    .responses
                    .insert("401".into(), RefOr::T(unauthorized.clone()));
            }
        }
    }
}

/// Every operation of a path.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.put,
        &mut item.delete,
        &mut item.patch,
    ]
    .into_iter()
    .flatten()
}

fn add_common_headers(doc: &mut OpenApi) {
    let string = || ObjectBuilder::new().schema_type(Type::String).build();
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            op.parameters.get_or_insert_with(Vec::new).push(RefOr::T(
                ParameterBuilder::new()
                    .name(REQUEST_ID)
                    .parameter_in(ParameterIn::Header)
                    .required(Required::False)
                    .description(Some(
                        "Your id for this request (1–128 visible ASCII characters), echoed and logged; one is made up when absent.",
                    ))
                    .schema(Some(string()))
                    .build(),
            ));
            for (status, response) in op.responses.responses.iter_mut() {
                let RefOr::T(response) = response else {
                    continue;
                };
                response.headers.insert(
                    REQUEST_ID.into(),
                    RefOr::T(
                        HeaderBuilder::new()
                            .schema(Some(string()))
                            .description(Some("The request's id, as logged."))
                            .build(),
                    ),
                );
                if status == "503" {
                    response.headers.insert(
                        "Retry-After".into(),
                        RefOr::T(
                            HeaderBuilder::new()
                                .schema(Some(
                                    ObjectBuilder::new().schema_type(Type::Integer).build(),
                                ))
                                .description(Some("Seconds to wait before retrying."))
                                .build(),
                        ),
                    );
                }
            }
        }
    }
}

/// Every error: a code, a sentence for a person, and context fields by code.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ErrorBody {
    pub error: ErrorCode,
    /// What happened and what to do, in one sentence.
    pub message: String,
    /// The request field at fault (4xx field errors).
    pub field: Option<String>,
    /// The active job (`already_running`).
    pub job_id: Option<String>,
    /// The kinds this service runs (`unknown_kind`).
    pub known_kinds: Option<Vec<String>>,
    /// The job as it ended (`job_failed`) or as it is (`not_active`).
    pub job: Option<JobSnapshot>,
    /// What an import saved before it stopped part-way (`payload_too_large`,
    /// `malformed_body` on `POST /catalog/products`).
    pub report: Option<ImportReport>,
}

/// Every error code of the envelope.
#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ErrorCode {
    MalformedBody,
    MissingField,
    InvalidField,
    UnknownField,
    SourceNotAllowed,
    SourceNotFound,
    UnsupportedMediaType,
    PayloadTooLarge,
    UnknownKind,
    NotFound,
    MethodNotAllowed,
    AlreadyRunning,
    NotActive,
    JobFailed,
    StoreUnavailable,
    ShuttingDown,
    Overloaded,
    IdempotencyKeyReused,
    RateLimited,
    StillActive,
    DuplicateKey,
    Unauthorized,
    Forbidden,
    RequestTimeout,
    InternalError,
}

/// What `DELETE /catalog/tenants/{tenant_id}` removed.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct TenantRemoval {
    pub tenant_id: String,
    /// Job records removed (all had ended).
    pub jobs: u64,
    pub products: u64,
    /// Products that had extracted attributes.
    pub extracted_attributes: u64,
    /// Products that had a neighbour list.
    pub neighbours: u64,
}

/// A job as any client reads it. Times are RFC 3339 on the store's clock.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobSnapshot {
    /// A UUID.
    pub job_id: String,
    pub tenant_id: String,
    /// `sync`, `enrich` or `pair`.
    pub kind: String,
    pub status: JobStatus,
    /// Never goes backwards.
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    /// What the job is doing, for a person.
    pub step: String,
    /// The parameters the job runs with.
    pub params: BTreeMap<String, Value>,
    /// The report once `done` (null before): see `SyncReport`, `EnrichReport`, `PairReport`.
    /// A failed or cancelled job keeps what it did: a sync per source (status, error class,
    /// HTTP status, rows read and saved), an enrich its counts and batches saved, a pair the
    /// phase it reached (`PairStopped`) — classes and counts only, never messages.
    pub result: Option<JobReport>,
    /// The error class when `failed` (`SourceUnreachable`, `Panic`, `Interrupted`, …).
    pub error: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub updated_at: String,
    pub heartbeat_at: String,
    pub finished_at: Option<String>,
    /// When someone asked the job to stop.
    pub cancel_requested_at: Option<String>,
    /// Which run this is: 1, then 2, 3, … when a lost run was re-queued.
    pub attempt: u32,
    /// How many runs the job may have before it ends `failed`/`Lost` (`MAX_ATTEMPTS`).
    pub max_attempts: u32,
    /// The process running (or that last ran) the job, as `host/pid`.
    pub worker: Option<String>,
    /// When a lost run was re-queued.
    pub recovered_at: Option<String>,
    /// Who started the job: the token's name, or `anonymous` without tokens.
    pub created_by: Option<String>,
    /// Who asked the job to stop (the first to ask), once someone did.
    pub cancelled_by: Option<String>,
    /// The `x-request-id` of the request that started the job.
    pub request_id: Option<String>,
    /// The ended job this one retries (`POST /catalog/jobs/{job_id}/retry`), else null.
    pub retry_of: Option<String>,
    /// Seconds until the job should end at the rate it has progressed since `started_at`;
    /// null before any progress, while queued and once it ended.
    pub eta_seconds: Option<u64>,
}

/// `lost` is never stored: it is an active job whose heartbeat is older than
/// `STALE_AFTER_SECONDS`.
#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum JobStatus {
    Queued,
    Running,
    Cancelling,
    Done,
    Failed,
    Cancelled,
    Lost,
}

/// A finished job's report, by kind.
#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum JobReport {
    Sync(SyncReport),
    Enrich(EnrichReport),
    Pair(PairReport),
    PairStopped(PairStopped),
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SyncReport {
    pub sources: Vec<SourceReport>,
    pub totals: RowCounts,
    pub sources_failed: u64,
}

/// One source of a sync: `status` is `ok`, `failed` (with its error class) or `cancelled`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct SourceReport {
    pub source: String,
    pub status: String,
    pub error: Option<String>,
    /// The status a failed http(s) source answered with.
    pub http_status: Option<u16>,
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
    pub errors: Option<Vec<RowError>>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RowCounts {
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RowError {
    pub line: u64,
    pub error: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct EnrichReport {
    pub products: u64,
    pub extracted: u64,
    pub unextractable: u64,
    pub skipped: u64,
    pub batches: u64,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PairReport {
    pub products: u64,
    pub paired: u64,
    pub pairs: u64,
}

/// What a pair that was cancelled or failed kept as its `result`: the phase it had reached
/// (the old neighbour table is left whole).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PairStopped {
    pub phase: PairPhase,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum PairPhase {
    Loading,
    Embedding,
    Indexing,
    Scoring,
    Writing,
}

/// A start's fields, from the query string and the body in any accepted content type.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StartFields {
    /// 1–128 of `A-Z a-z 0-9 _ . -`.
    pub tenant_id: String,
    /// Hold the request until the job ends (at most `WAIT_MAX_SECONDS`): `true/false/1/0/yes/no/on/off`.
    pub wait: Option<String>,
    /// enrich: re-extract products unchanged since their last enrichment.
    pub force: Option<String>,
    /// sync: a feed (a path inside `FEEDS_DIR`, or an http(s) URL on an allowed host);
    /// repeat the field, or send a JSON array.
    pub source: Option<Vec<String>>,
    /// `reject` (default) or `join`: see the `on_conflict` query parameter.
    pub on_conflict: Option<String>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobListing {
    /// Newest first.
    pub jobs: Vec<JobSnapshot>,
    /// The `cursor` of the next page; null on the last one.
    pub next_cursor: Option<String>,
}

/// A job's timeline, oldest first.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobTimeline {
    pub events: Vec<TimelineEvent>,
}

/// One event of a job's timeline: these fields, and those its type adds (`request_id` on
/// `created`; `attempt` and `worker` on `started` and `restored`; `by` on
/// `cancel_requested`; `attempt` on `requeued`; `superseded_by` on `superseded`; `error`, the
/// error class, on a `finished` that failed).
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct TimelineEvent {
    /// `<ms>-<seq>`: ids grow; send one back as `after` or `Last-Event-ID` to resume.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: TimelineEventType,
    /// When, in ms since the epoch.
    pub at: u64,
    /// What the job read right after it.
    pub status: String,
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    pub step: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum TimelineEventType {
    Created,
    Started,
    Progress,
    CancelRequested,
    Released,
    Requeued,
    Lost,
    Restored,
    Superseded,
    Finished,
}

/// A product as imported (fields beyond these are refused per row).
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct ProductInput {
    pub product_key: String,
    pub name: String,
    pub description: Option<String>,
    pub brand: Option<String>,
    pub price_cents: Option<i64>,
    /// Category path from the root; in CSV, `A > B > C`.
    pub taxonomy_path: Option<Vec<String>>,
    pub attributes: Option<BTreeMap<String, Value>>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ImportReport {
    pub read: u64,
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub invalid: u64,
    /// The first 20 invalid rows.
    pub errors: Vec<RowError>,
}

/// A stored product: the imported fields and the hash of its content.
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct StoredProduct {
    pub product_key: String,
    pub name: String,
    pub description: Option<String>,
    pub brand: Option<String>,
    pub price_cents: Option<i64>,
    pub taxonomy_path: Option<Vec<String>>,
    pub attributes: Option<BTreeMap<String, Value>>,
    pub content_hash: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ProductPage {
    pub products: Vec<StoredProduct>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// A product with what enrich and pair found for it.
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct ProductView {
    pub product_key: String,
    pub name: String,
    pub content_hash: String,
    pub enrichment: EnrichmentView,
    pub neighbours: Vec<Neighbour>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct EnrichmentView {
    /// `enriched`, `stale`, `unextractable` or `not_enriched`.
    pub state: String,
    pub attributes: BTreeMap<String, Value>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Neighbour {
    pub product_key: String,
    pub name: String,
    pub score: f64,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Health {
    pub status: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct Readiness {
    pub status: String,
    /// `redis` or `memory`.
    pub store: String,
    /// Job state survives a restart of the store itself (Redis with AOF or RDB save
    /// points); null when Redis will not say (CONFIG disabled).
    pub durable: Option<bool>,
    pub active_jobs: u64,
    /// Product imports running in this process (at most `MAX_CONCURRENT_IMPORTS`).
    pub active_imports: u64,
    /// `tokens` when bearer tokens guard `/catalog/...`, `open` when any client may act
    /// for any tenant (then also a warning).
    pub auth: String,
    /// How the Redis primary is reached (`url` or `sentinels`), its address, how many
    /// replicas it has and how far the slowest lags, and `min_replicas_ack`; null for the
    /// embedded store.
    #[schema(value_type = Option<Object>)]
    pub topology: Option<Value>,
    /// Things an operator should fix that do not stop the service (an evicting Redis).
    pub warnings: Vec<String>,
}
