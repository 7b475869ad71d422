//! `CORS_ALLOWED_ORIGINS`: an allowed origin's page may call the API from a browser; any
//! other origin, and every origin when none is configured, gets no CORS header at all.

use std::sync::Arc;

use catalog_jobs::catalog::products::MemoryCatalog;
use catalog_jobs::catalog::Catalog;
use catalog_jobs::config::Config;
use catalog_jobs::startup::{catalog_settings, App};
use reqwest::{Method, Response};

use crate::helpers::{
    settings, spawn_app_with, store, tenant, test_config, test_registry, Backend, TestApp,
};

const ADMIN: &str = "http://admin.example.test:8080";

async fn app_allowing(origins: &str) -> TestApp {
    let mut config = test_config();
    config.cors_allowed_origins = origins.split(',').map(str::to_owned).collect();
    spawn_app_with(config, store(Backend::Memory, settings())).await
}

async fn preflight(app: &TestApp, origin: &str) -> Response {
    app.client
        .request(Method::OPTIONS, app.url("/catalog/sync"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type, idempotency-key",
        )
        .send()
        .await
        .unwrap()
}

fn cors_headers(r: &Response) -> Vec<String> {
    r.headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_with_what_a_page_may_send_and_read() {
    let app = app_allowing(&format!("https://other.example.test,{ADMIN}")).await;
    let r = preflight(&app, ADMIN).await;
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], ADMIN);
    let methods = h["access-control-allow-methods"].to_str().unwrap();
    assert!(
        methods.contains("POST") && methods.contains("GET"),
        "{methods}"
    );
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    for name in [
        "authorization",
        "content-type",
        "idempotency-key",
        "last-event-id",
        "x-request-id",
    ] {
        assert!(allowed.contains(name), "{name} in {allowed}");
    }
    // The actual request: readable, with the headers a page needs exposed.
    let t = tenant();
    let r = app
        .client
        .post(app.url("/catalog/ticker"))
        .header("origin", ADMIN)
        .form(&[("tenant_id", t.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.headers()["access-control-allow-origin"], ADMIN);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    for name in [
        "location",
        "retry-after",
        "x-request-id",
        "idempotent-replayed",
    ] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }
}

#[tokio::test]
async fn another_origin_gets_no_cors_header_at_all() {
    let app = app_allowing(ADMIN).await;
    let r = preflight(&app, "https://evil.example.test").await;
    assert_eq!(cors_headers(&r), Vec::<String>::new());
    assert_eq!(r.status(), 405, "OPTIONS from elsewhere is no route");
    let r = app
        .get_with("/healthz", &[("origin", "http://admin.example.test:8081")])
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(cors_headers(&r), Vec::<String>::new());
}

#[tokio::test]
async fn without_configured_origins_no_answer_carries_cors_headers() {
    let app = spawn_app_with(test_config(), store(Backend::Memory, settings())).await;
    let r = preflight(&app, ADMIN).await;
    assert_eq!(cors_headers(&r), Vec::<String>::new());
    let r = app.get_with("/healthz", &[("origin", ADMIN)]).await;
    assert_eq!(cors_headers(&r), Vec::<String>::new());
}

#[tokio::test]
async fn a_malformed_origin_stops_start_up_naming_the_variable() {
    for bad in ["admin.example.test", "https://admin.example.test/", "*"] {
        let config = Config {
            cors_allowed_origins: vec![ADMIN.to_owned(), bad.to_owned()],
            ..test_config()
        };
        let catalog = Arc::new(Catalog {
            store: Arc::new(MemoryCatalog::new()),
            settings: catalog_settings(&config).expect("the allow-list parses"),
        });
        let Err(e) = App::build_with(
            config,
            store(Backend::Memory, settings()),
            catalog,
            test_registry(),
        )
        .await
        else {
            panic!("{bad} was accepted");
        };
        let message = e.to_string();
        assert!(
            message.contains("CORS_ALLOWED_ORIGINS") && message.contains(bad),
            "{message}"
        );
    }
}
