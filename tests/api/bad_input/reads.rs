//! The reads agree on their fields: an empty `cursor` is the first page of jobs and of
//! products alike, and a route named by a path segment (a product, a job) checks its query
//! (a missing or bad `tenant_id`, an unknown field) before it answers for the segment.

use serde_json::Value;

use crate::both_stores;
use crate::helpers::{create, new_job, spawn_app, tenant, Backend, TestApp};

both_stores!(
    an_empty_cursor_is_the_first_page_of_jobs_and_of_products_alike,
    a_product_view_without_a_tenant_is_422_whatever_its_key,
    a_job_route_with_a_bad_query_is_422_whatever_its_id,
);

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    let r = app
        .client
        .get(app.url(path))
        .send()
        .await
        .expect("the app answers");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn an_empty_cursor_is_the_first_page_of_jobs_and_of_products_alike(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    let job = create(&*app.store, &new_job(&t, "bulk0")).await.job_id;
    let r = app
        .client
        .post(app.url(&format!("/catalog/products?tenant_id={t}")))
        .header("content-type", "text/csv")
        .body("product_key,name\nk1,A Mug\n")
        .send()
        .await
        .expect("the app answers");
    assert_eq!(r.status(), 200);
    let (status, jobs) = get(&app, &format!("/catalog/jobs?tenant_id={t}&cursor=")).await;
    assert_eq!(status, 200, "{jobs}");
    assert_eq!(jobs["jobs"][0]["job_id"], job.to_string(), "{jobs}");
    let (status, products) = get(&app, &format!("/catalog/products?tenant_id={t}&cursor=")).await;
    assert_eq!(status, 200, "{products}");
    assert_eq!(products["products"][0]["product_key"], "k1", "{products}");
    // A cursor neither handed out is refused alike.
    for listing in ["jobs", "products"] {
        let (status, body) =
            get(&app, &format!("/catalog/{listing}?tenant_id={t}&cursor=zz")).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (422, Some("cursor")),
            "{listing}: {body}"
        );
    }
}

async fn a_product_view_without_a_tenant_is_422_whatever_its_key(b: Backend) {
    let app = spawn_app(b).await;
    let t = tenant();
    // A key that cannot be one, and one no tenant has: the missing tenant is said first.
    for key in ["bad%20key%21", "k1"] {
        let (status, body) = get(&app, &format!("/catalog/products/{key}")).await;
        assert_eq!(
            (status, body["error"].as_str(), body["field"].as_str()),
            (422, Some("missing_field"), Some("tenant_id")),
            "{key}: {body}"
        );
        let (status, body) = get(&app, &format!("/catalog/products/{key}?tenant_id={t}")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (404, Some("not_found")),
            "{key}: {body}"
        );
    }
}

/// A job route with a bad query: method, path (`{id}`: a job id or a segment that is none),
/// and the field the 422 names.
#[rustfmt::skip]
const BAD_QUERIES: &[(&str, &str, &str)] = &[
    ("GET", "/catalog/jobs/{id}?colour=red", "colour"),
    ("GET", "/catalog/jobs/{id}?tenant_id=a:b", "tenant_id"),
    ("POST", "/catalog/jobs/{id}/retry?colour=red", "colour"),
    ("POST", "/catalog/jobs/{id}/cancel?tenant_id=", "tenant_id"),
    ("GET", "/catalog/jobs/{id}/events?after=soon", "after"),
];

async fn a_job_route_with_a_bad_query_is_422_whatever_its_id(b: Backend) {
    let app = spawn_app(b).await;
    let job = create(&*app.store, &new_job(&tenant(), "bulk0"))
        .await
        .job_id;
    let unknown = "6f0c1d2e-0000-4000-8000-000000000000";
    for id in ["nope", unknown, &job.to_string()] {
        for &(method, path, field) in BAD_QUERIES {
            let path = path.replace("{id}", id);
            let r = app
                .client
                .request(method.parse().unwrap(), app.url(&path))
                .send()
                .await
                .expect("the app answers");
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            assert_eq!(
                (status, body["field"].as_str()),
                (422, Some(field)),
                "{method} {path}: {body}"
            );
        }
    }
    let still = app.store.get(&job).await.unwrap().expect("the job");
    assert_eq!(
        still.status.as_str(),
        "queued",
        "no refused call touched it"
    );
    for id in ["nope", unknown] {
        let (status, body) = get(&app, &format!("/catalog/jobs/{id}")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (404, Some("not_found")),
            "{id}: {body}"
        );
    }
}
