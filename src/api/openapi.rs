//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations
//! (the router is built from them by `utoipa-axum`, so a route cannot exist undocumented)
//! and from the types the handlers return, each deriving `ToSchema` where it is defined
//! (`jobs`, `catalog`, `api`): a body's schema is its serialised type. The test suite
//! validates real responses against this document, so the two cannot drift apart.
//!
//! Decisions made once for every operation, here: the `x-request-id` request and response
//! header, `Retry-After` on every 503, and the bearer-token guard of every `/catalog/...`
//! operation (its security requirement and its 401 with `WWW-Authenticate`), the 405 a
//! path answers a method none of its operations has (`MethodNotAllowed`), and the 408 of a
//! body that stalls on a `/catalog/...` route that reads none (`RequestTimeout`).

use std::sync::OnceLock;

use serde::Deserialize;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, Response, ResponseBuilder, Type,
};
use utoipa::{Modify, ToSchema};

use super::answers::{json_of, refusal, string_header};
use super::auth::GUARDED_PREFIX;
use super::bulk::BulkAnswer;
use super::error::ErrorBody;
use crate::catalog::report::{JobReport, PipelineReport};

/// The document's front matter; paths come from the router.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "catalog-jobs",
        description = "Runs a product catalogue's long jobs (sync, enrich, pair) per tenant. A start answers at once with a job id (or, with `wait=true`, the report); anyone can poll the job. Every error is `{\"error\": \"<code>\", \"message\": \"…\", …context}`; any unknown path answers 404 `not_found` and a known path with another method 405 `method_not_allowed`. Every `GET` also answers `HEAD` (the same status and headers, no body), which the document does not list as operations. Every response carries `x-request-id` (the client's, when it sent a sane one).",
        license(name = "MIT")
    ),
    tags(
        (name = "jobs", description = "Start, poll, list and cancel jobs"),
        (name = "products", description = "The catalogue a tenant's jobs work on"),
        (name = "tenants", description = "Removing a tenant's data"),
        (name = "console", description = "The operator's console: who the caller is, the overview of the whole service, the tenant picker and bulk actions"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
        (name = "admin", description = "The admin page, served by the binary")
    ),
    // The bodies only hand-built answers name (`answers`, `bulk`): a `#[utoipa::path]`
    // registers the schema of a `body = …` it lists, an `IntoResponses` written by hand
    // does not.
    components(schemas(JobReport, PipelineReport, BulkAnswer))
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
        let schemas = &mut doc.components.get_or_insert_with(Default::default).schemas;
        for (name, schema) in front.components.into_iter().flat_map(|c| c.schemas) {
            schemas.entry(name).or_insert(schema);
        }
        BearerTokens.modify(&mut doc);
        add_common_headers(&mut doc);
        every_wrong_method(&mut doc);
        every_slow_body(&mut doc);
        doc
    })
}

/// The header every request may carry and every response carries.
const REQUEST_ID: &str = "x-request-id";
/// What that header is on a response.
const REQUEST_ID_HEADER: &str = "The request's id, as logged.";

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
                    .schema(Some(Ref::from_schema_name(ErrorBody::name())))
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
                let answers = &mut op.responses.responses;
                answers.insert("401".into(), RefOr::T(unauthorized.clone()));
                every_guarded_refusal(answers);
            }
        }
    }
}

/// What the guard refuses on any `/catalog/...` route before the route reads its request:
/// an `Authorization` or `Idempotency-Key` header given twice (400), a body the route does not
/// read or one sent compressed (415). A route that documents its own 400 or 415 keeps it, and
/// its 400 names `duplicate_header` too.
fn every_guarded_refusal(answers: &mut std::collections::BTreeMap<String, RefOr<Response>>) {
    const DUPLICATE: &str =
        "`duplicate_header`: an `Authorization` or `Idempotency-Key` header given more than once.";
    match answers.get_mut("400") {
        Some(RefOr::T(known)) if !known.description.contains("duplicate_header") => {
            known.description = format!("{} Or {DUPLICATE}", known.description);
        }
        Some(_) => {}
        None => {
            answers.insert("400".into(), refusal(DUPLICATE));
        }
    }
    answers.entry("415".into()).or_insert_with(|| {
        refusal("`unsupported_media_type`: a body sent to a route that reads none (other than a form or JSON object, which is refused by field), or a compressed one (a `Content-Encoding` other than `identity`); a body past `MAX_START_BODY_BYTES` or a compressed one is answered with `Connection: close` and the connection ends with it.")
    });
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
                    RefOr::T(string_header(REQUEST_ID_HEADER)),
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

/// The shared response every operation lists as its `405`.
const WRONG_METHOD: &str = "MethodNotAllowed";

/// A request to a known path with a method none of its operations has is answered 405
/// `method_not_allowed`, with `Allow` naming the methods the path takes (the router's
/// fallback, before any operation). OpenAPI has no place for an answer of no operation, so
/// each operation of the path lists it, all one shared response (`components.responses`):
/// a client reading any operation of a path learns what its other methods answer.
fn every_wrong_method(doc: &mut OpenApi) {
    let answer = error_answer(
        "`method_not_allowed`: this path takes no request of that method (answered for any method none of the path's operations has, `OPTIONS` included).",
        &[(
            "Allow",
            "The methods this path takes, comma-separated (`HEAD` beside `GET`), e.g. `GET,HEAD`.",
        )],
    );
    let listed = share(doc, WRONG_METHOD, answer);
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            op.responses.responses.insert("405".into(), listed.clone());
        }
    }
}

/// The shared response a `/catalog/...` operation lists as its `408` when it has none of
/// its own.
const SLOW_BODY: &str = "RequestTimeout";

/// A `/catalog/...` route that reads no body still reads one sent to it, within
/// `REQUEST_TIMEOUT_SECONDS`, to refuse what it names (`call::refuse_body`): a body that
/// stalls is answered 408 there too, before anything is done. One shared response
/// (`components.responses`); an operation that reads a body keeps its own words.
fn every_slow_body(doc: &mut OpenApi) {
    let answer = error_answer(
        "`request_timeout`: a body was sent (this route reads none, but reads one sent to refuse what it names) and did not arrive whole within `REQUEST_TIMEOUT_SECONDS`; nothing was done. The answer carries `Connection: close` and the connection ends with it.",
        &[],
    );
    let listed = share(doc, SLOW_BODY, answer);
    for (path, item) in doc.paths.paths.iter_mut() {
        if !path.starts_with(GUARDED_PREFIX) {
            continue;
        }
        for op in operations(item) {
            op.responses
                .responses
                .entry("408".into())
                .or_insert_with(|| listed.clone());
        }
    }
}

/// An error envelope answer with `x-request-id` and these `headers` (name, description).
fn error_answer(description: &str, headers: &[(&str, &str)]) -> Response {
    let mut answer = ResponseBuilder::new()
        .description(description)
        .content("application/json", json_of(ErrorBody::name()))
        .build();
    for (name, description) in headers.iter().chain([&(REQUEST_ID, REQUEST_ID_HEADER)]) {
        answer
            .headers
            .insert((*name).into(), RefOr::T(string_header(description)));
    }
    answer
}

/// Puts `answer` among the document's shared responses as `name`; answers the reference an
/// operation lists it by.
fn share(doc: &mut OpenApi, name: &str, answer: Response) -> RefOr<Response> {
    let components = doc.components.get_or_insert_with(Default::default);
    components.responses.insert(name.into(), RefOr::T(answer));
    RefOr::Ref(Ref::from_response_name(name))
}

/// A start's fields, from the query string and the body in any accepted content type. The
/// handler reads them as a free-form field map that the kind's own parameters then take
/// from (a kind's unknown field is refused there), so this request schema is written out:
/// the union of every kind's fields.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct StartFields {
    /// 1–128 of `A-Z a-z 0-9 _ . -`, not `.` or `..`.
    pub tenant_id: String,
    /// Hold the request until the job ends (at most `WAIT_MAX_SECONDS`): `true/false/1/0/yes/no/on/off`.
    pub wait: Option<String>,
    /// enrich: re-extract products unchanged since their last enrichment.
    pub force: Option<String>,
    /// pair: pair every product with word weights counted afresh, even when an incremental
    /// pair could.
    pub full: Option<String>,
    /// sync: a feed (a path inside `FEEDS_DIR`, or an http(s) URL on an allowed host);
    /// repeat the field, or send a JSON array.
    pub source: Option<Vec<String>>,
    /// `reject` (default) or `join`: see the `on_conflict` query parameter.
    pub on_conflict: Option<String>,
}
