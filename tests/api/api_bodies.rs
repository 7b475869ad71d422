//! Bodies the API does not read, through the built binary: a big body of blanks sent to a
//! route that reads none is refused saying so (it used to blame its content type, which a
//! small body of blanks of the same type passes with), and a start's JSON body that is not
//! an object is 400 `malformed_body` whatever JSON it is (an array like a string or null).

use serde_json::Value;

use crate::helpers::{status_and_json, Service};

/// Over the default `MAX_START_BODY_BYTES` (64 KiB).
const BIG: usize = 70_000;

#[tokio::test]
async fn a_big_blank_body_to_a_route_that_reads_none_is_refused_as_too_big_not_for_its_type() {
    let svc = Service::embedded().start().await;
    let cancel = "/catalog/jobs/00000000-0000-4000-8000-000000000000/cancel";
    let send = async |blanks: usize| {
        let r = svc
            .client
            .post(svc.url(cancel))
            .header("content-type", "application/json")
            .body(" ".repeat(blanks))
            .send()
            .await
            .expect("the service answers");
        status_and_json(r).await
    };
    let (status, body) = send(100).await;
    assert_eq!(status, 404, "a small blank body is accepted: {body}");
    let (status, body) = send(BIG).await;
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"], "unsupported_media_type", "{body}");
    let message = body["message"].as_str().expect("a message");
    assert!(
        message.contains("this route reads no request body")
            && message.contains("MAX_START_BODY_BYTES")
            && !message.contains("content type"),
        "{message}"
    );
}

#[tokio::test]
async fn a_start_body_of_json_that_is_not_an_object_is_400_whatever_it_is() {
    let svc = Service::embedded().start().await;
    for json in [
        "[]",
        r#"[{"tenant_id":"acme"}]"#,
        r#""acme""#,
        "3",
        "null",
        "true",
    ] {
        for route in ["/catalog/sync", "/catalog/pipeline"] {
            let r = svc
                .client
                .post(svc.url(route))
                .header("content-type", "application/json")
                .body(json)
                .send()
                .await
                .expect("the service answers");
            let (status, body): (u16, Value) = status_and_json(r).await;
            assert_eq!(status, 400, "{route} {json}: {body}");
            assert_eq!(body["error"], "malformed_body", "{route} {json}: {body}");
        }
    }
}
