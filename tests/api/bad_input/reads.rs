//! The reads agree on their fields: an empty `cursor` is the first page of jobs and of
//! products alike, and a product view checks its query (a missing `tenant_id`) before it
//! answers for its key, as every route checks fields before it looks anything up.

use serde_json::Value;

use crate::both_stores;
use crate::helpers::{create, new_job, spawn_app, tenant, Backend, TestApp};

both_stores!(
    an_empty_cursor_is_the_first_page_of_jobs_and_of_products_alike,
    a_product_view_without_a_tenant_is_422_whatever_its_key,
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
