//! The document itself: valid OpenAPI 3.1 (the official schema, vendored), unique
//! `operationId`s, every `$ref` resolving, every component a JSON Schema; every operation
//! described, guarded where it should be, and registered only through its annotation.

use std::collections::BTreeSet;
use std::sync::Arc;

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{spawn_catalog_app, test_config, Backend};
use catalog_jobs::catalog::products::MemoryCatalog;
use catalog_jobs::catalog::Catalog;
use catalog_jobs::startup::catalog_settings;

#[test]
fn the_router_is_built_only_from_documented_handlers() {
    // utoipa-axum's `routes!` will not compile a handler without `#[utoipa::path]`; a plain
    // `.route(…)` would bypass it, so none may exist in the HTTP layer.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).unwrap();
            for bypass in [
                ".route(",
                ".route_service(",
                ".nest(",
                ".nest_service(",
                ".merge(",
            ] {
                assert!(
                    !source.contains(bypass),
                    "{} calls {bypass}: register routes with routes!(…) and #[utoipa::path]",
                    path.display()
                );
            }
        }
    }
}

/// A refusal that leaves the body unread - every 413, and a 415 for a compressed body - ends
/// the connection with `Connection: close` (`ApiError::into_response`); the document says so.
#[test]
fn every_refusal_that_ends_the_connection_says_so() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    let mut silent = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for status in ["413", "415"] {
                let Some(text) = op["responses"][status]["description"].as_str() else {
                    continue;
                };
                let closes = status == "413" || text.contains("compressed");
                if closes && !text.contains("`Connection: close`") {
                    silent.push(format!("{method} {path} {status}"));
                }
            }
        }
    }
    assert!(
        silent.is_empty(),
        "no word of `Connection: close`: {silent:#?}"
    );
}

#[test]
fn every_operation_has_a_description_and_a_tag_the_document_describes() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    let tags: BTreeSet<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["description"].as_str().is_some_and(|d| !d.is_empty()))
        .filter_map(|t| t["name"].as_str())
        .collect();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(
                op["description"].as_str().is_some_and(|d| !d.is_empty())
                    || op["summary"].is_string(),
                "{method} {path} has no description"
            );
            assert!(Method::from_bytes(method.to_uppercase().as_bytes()).is_ok());
            let tagged = op["tags"].as_array().into_iter().flatten();
            let tagged: Vec<&str> = tagged.filter_map(Value::as_str).collect();
            assert!(
                !tagged.is_empty() && tagged.iter().all(|t| tags.contains(t)),
                "{method} {path} is tagged {tagged:?}; the document describes {tags:?}"
            );
        }
    }
}

#[test]
fn every_catalog_operation_requires_the_bearer_scheme_and_the_operations_routes_stay_open() {
    let doc = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if path.starts_with("/catalog") {
                assert_eq!(
                    op["security"],
                    json!([{"bearer": []}]),
                    "{method} {path} does not require the bearer scheme"
                );
                let unauthorized = &op["responses"]["401"];
                assert!(
                    unauthorized["headers"]["WWW-Authenticate"].is_object(),
                    "{method} {path} does not document 401 with WWW-Authenticate"
                );
            } else {
                assert!(op.get("security").is_none(), "{method} {path} is open");
                assert!(
                    op["responses"].get("401").is_none(),
                    "{method} {path} is open"
                );
            }
        }
    }
}

/// The official JSON Schema of OpenAPI 3.1 documents (source and licence in tests/data/README.md).
const OPENAPI_3_1_SCHEMA: &str = include_str!("../../data/openapi-3.1-schema.json");

/// What is wrong with `doc` as an OpenAPI 3.1 document: where it breaks the official schema,
/// each `operationId` used twice (generators name a client's methods by them), each `$ref`
/// that leads nowhere, and each component schema that is not valid JSON Schema 2020-12.
fn document_problems(doc: &Value) -> Vec<String> {
    let official: Value =
        serde_json::from_str(OPENAPI_3_1_SCHEMA).expect("the vendored schema is JSON");
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&official)
        .expect("the official schema compiles");
    let mut problems: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("OpenAPI 3.1 schema: {e} at {}", e.instance_path()))
        .collect();
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            if let Some(id) = op["operationId"].as_str() {
                if !ids.insert(id) {
                    problems.push(format!(
                        "operationId `{id}` is used twice ({method} {path})"
                    ));
                }
            }
        }
    }
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    for target in refs {
        let resolves = target
            .strip_prefix('#')
            .is_some_and(|pointer| doc.pointer(pointer).is_some());
        if !resolves {
            problems.push(format!("$ref `{target}` leads nowhere"));
        }
    }
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
            problems.push(format!("schema {name} is not JSON Schema 2020-12: {e}"));
        }
    }
    problems
}

/// Every `$ref` in `value`, in document order.
fn collect_refs(value: &Value, refs: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                refs.push(target.clone());
            }
            map.values().for_each(|v| collect_refs(v, refs));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1_with_unique_operation_ids() {
    let app = spawn_catalog_app(Backend::Memory, test_config()).await;
    let doc = app.get_json("/openapi.json").await;
    let problems = document_problems(&doc);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_document_check_finds_a_twice_used_operation_id_a_dangling_ref_and_a_schema_breach() {
    type Plant = fn(&mut Value);
    let cases: [(&str, Plant, &str); 4] = [
        (
            "a second `readyz`",
            |d| d["paths"]["/healthz"]["get"]["operationId"] = json!("readyz"),
            "operationId `readyz` is used twice",
        ),
        (
            "a ref to no schema",
            |d| {
                d["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]
                    ["schema"] = json!({"$ref": "#/components/schemas/Nowhere"})
            },
            "`#/components/schemas/Nowhere` leads nowhere",
        ),
        (
            "no info",
            |d| {
                d.as_object_mut().unwrap().remove("info");
            },
            "OpenAPI 3.1 schema: \"info\" is a required property",
        ),
        (
            "a schema of a made-up type",
            |d| d["components"]["schemas"]["ErrorBody"]["type"] = json!("record"),
            "schema ErrorBody is not JSON Schema 2020-12",
        ),
    ];
    let served = serde_json::to_value(catalog_jobs::api::openapi::document()).unwrap();
    assert!(document_problems(&served).is_empty());
    for (what, plant, expected) in cases {
        let mut doc = served.clone();
        plant(&mut doc);
        let problems = document_problems(&doc);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{what}: expected `{expected}` among {problems:#?}"
        );
    }
}

/// Every field a job kind takes is documented on its own start route and on the pipeline's,
/// both as a query parameter and in each request body's schema: the pipeline took pair's
/// `full` but documented it nowhere (a hostile probe's finding).
#[tokio::test]
async fn every_field_a_kind_takes_is_documented_on_its_start_route_and_the_pipelines() {
    let app = spawn_catalog_app(Backend::Memory, test_config()).await;
    let doc = app.get_json("/openapi.json").await;
    let config = test_config();
    let catalog = Arc::new(Catalog {
        store: Arc::new(MemoryCatalog::new()),
        settings: catalog_settings(&config).expect("the allow-list parses"),
    });
    let registry = catalog_jobs::catalog::registry(catalog);
    let mut missing = Vec::new();
    for kind in registry.kinds() {
        let taken = registry
            .get(kind)
            .and_then(|spec| spec.fields)
            .unwrap_or(&[]);
        for route in ["/catalog/{kind}", "/catalog/pipeline"] {
            let operation = &doc["paths"][route]["post"];
            let documented = documented_fields(&doc, operation);
            for field in taken {
                for (place, names) in &documented {
                    if !names.contains(*field) {
                        missing.push(format!("{route}: {kind}'s `{field}` in {place}"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "undocumented: {missing:#?}");
}

/// The field names an operation documents: its query parameters, and each request body's
/// schema properties (by content type).
fn documented_fields(doc: &Value, operation: &Value) -> Vec<(String, BTreeSet<String>)> {
    let names = |items: Option<&serde_json::Map<String, Value>>| -> BTreeSet<String> {
        items.into_iter().flat_map(|m| m.keys().cloned()).collect()
    };
    let query: BTreeSet<String> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let mut documented = vec![("the query parameters".to_owned(), query)];
    let bodies = operation["requestBody"]["content"].as_object();
    for (content_type, body) in bodies.into_iter().flatten() {
        let schema = match body["schema"]["$ref"].as_str() {
            Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
            None => &body["schema"],
        };
        documented.push((
            format!("the {content_type} body"),
            names(schema["properties"].as_object()),
        ));
    }
    assert!(documented.len() > 1, "the start has a request body");
    documented
}

/// Every GET also answers HEAD, as the document's description says: for each GET of the
/// document that needs no path parameter (event streams aside: their GET never ends), the
/// same status and content type as the GET, and no body.
#[tokio::test]
async fn every_get_answers_head_with_its_status_and_no_body_as_the_document_says() {
    let app = spawn_catalog_app(Backend::Memory, test_config()).await;
    let doc = app.get_json("/openapi.json").await;
    let description = doc["info"]["description"].as_str().expect("a description");
    assert!(
        description.contains("Every `GET` also answers `HEAD`"),
        "the description does not say that a GET answers HEAD: {description}"
    );
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let Some(get) = item.get("get") else { continue };
        if path.contains('{') || get.to_string().contains("text/event-stream") {
            continue;
        }
        let got = app.get(path).await;
        let header = |r: &reqwest::Response| r.headers().get("content-type").cloned();
        let (status, content_type) = (got.status(), header(&got));
        let head = app
            .client
            .head(app.url(path))
            .send()
            .await
            .expect("an answer");
        assert_eq!(head.status(), status, "HEAD {path}");
        assert_eq!(header(&head), content_type, "HEAD {path}");
        assert!(
            head.bytes().await.expect("a body").is_empty(),
            "HEAD {path}: a body"
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} GET routes checked");
}
