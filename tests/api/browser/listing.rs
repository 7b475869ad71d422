//! Every tenant's jobs on the admin page: "Load more" pages past the first 50 with the
//! listing's cursor, the tenant picker offers the tenants with recent jobs by the start typed
//! and filters the table to the one picked, and a job id's start finds its job; a row off
//! the first page never rests on a status its job has left, is read again with the others
//! in one call a poll (the listing's `ids`), and leaves the table once its job is gone.

use serde_json::{json, Value};

use super::{click_in_place, DESKTOP};
use crate::both_stores;
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    create, new_job, settings, spawn_app_with, store, test_config, unique, Backend,
};
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::{JobId, TenantId};

both_stores!(every_tenants_jobs_page_with_load_more_and_filter_by_picked_tenant_and_id_prefix);
both_stores!(rows_off_the_first_page_follow_their_jobs_to_their_end_without_a_stream);
both_stores!(an_ended_row_off_the_first_page_leaves_once_its_job_is_gone);

/// Jobs made per tenant: three tenants' worth is more than the table's first page of 50.
pub const PER_TENANT: usize = 20;

/// The visible rows' job ids and tenants, as a script expression.
const VISIBLE: &str = "[...document.querySelectorAll('[data-testid=job-row]')]
  .filter((r) => !r.hidden).map((r) => [r.dataset.jobId, r.children[2].textContent])";

async fn visible(b: &Browser) -> Vec<(String, String)> {
    let rows: Value = b.exec(&format!("return {VISIBLE};"), json!([])).await;
    rows.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `per_tenant` jobs of each tenant, of a kind this app does not run, each ended by a cancel
/// while queued (many ended jobs, fast); their ids.
pub async fn ended_jobs(s: &dyn JobStore, tenants: &[TenantId], per_tenant: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for t in tenants {
        for _ in 0..per_tenant {
            let job = new_job(t, "k1");
            create(s, &job).await;
            s.cancel(&job.id, "test").await.unwrap();
            ids.push(job.id.to_string());
        }
    }
    ids
}

/// A queued job for each of `tenants` (one a tenant and kind: single flight), of a kind this
/// app does not run; their ids, oldest first.
async fn queued_jobs(s: &dyn JobStore, tenants: &[TenantId]) -> Vec<String> {
    let mut ids = Vec::new();
    for t in tenants {
        let job = new_job(t, "k1");
        create(s, &job).await;
        ids.push(job.id.to_string());
    }
    ids
}

/// Waits for the table's first page of 50 rows and "Load more" under it.
pub async fn the_first_page_with_load_more(b: &Browser) {
    b.wait_for(
        "the first page and Load more",
        "return document.querySelectorAll('[data-testid=job-row]').length === 50
           && !document.querySelector('[data-testid=jobs-load-more]').hidden;",
        json!([]),
    )
    .await;
}

/// The first page of 50 with "Load more", then every job of `ids` once after it.
async fn every_job_once_across_two_pages(b: &Browser, ids: &[String]) {
    the_first_page_with_load_more(b).await;
    click_in_place(b, "[data-testid=jobs-load-more]").await;
    b.wait_for(
        "every job after Load more",
        "return document.querySelectorAll('[data-testid=job-row]').length === arguments[0]
           && document.querySelector('[data-testid=jobs-load-more]').hidden;",
        json!([ids.len()]),
    )
    .await;
    let mut shown: Vec<String> = visible(b).await.into_iter().map(|(id, _)| id).collect();
    shown.sort();
    let mut made = ids.to_vec();
    made.sort();
    assert_eq!(shown, made, "each job once, across the two pages");
}

async fn every_tenants_jobs_page_with_load_more_and_filter_by_picked_tenant_and_id_prefix(
    backend: Backend,
) {
    let s = store(backend, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let base = unique("pick");
    let tenants: Vec<TenantId> = ["a", "b", "c"]
        .iter()
        .map(|n| TenantId::parse(&format!("{base}-{n}")).unwrap())
        .collect();
    let ids = ended_jobs(&*s, &tenants, PER_TENANT).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    every_job_once_across_two_pages(&b, &ids).await;

    b.fill("[data-testid=tenant-picker]", &base).await;
    let offered = b
        .wait_for(
            "the tenants starting as typed offered",
            "const o = [...document.querySelectorAll('#tenant-choices option')].map((o) => o.value);
             return o.length === 3 ? o : null;",
            json!([]),
        )
        .await;
    let newest_first: Vec<String> = tenants.iter().rev().map(|t| t.to_string()).collect();
    assert_eq!(offered, json!(newest_first), "the most recent tenant first");
    let picked = tenants[1].to_string();
    b.exec(
        "const p = document.querySelector('[data-testid=tenant-picker]');
         p.value = arguments[0]; p.dispatchEvent(new Event('change'));",
        json!([picked]),
    )
    .await;
    b.wait_for(
        "only the picked tenant's jobs",
        &format!(
            "const rows = {VISIBLE}; return rows.length === arguments[1]
               && rows.every(([, t]) => t === arguments[0]);"
        ),
        json!([picked, PER_TENANT]),
    )
    .await;

    let wanted = &ids[PER_TENANT + 3];
    b.fill("[data-testid=filter-id-prefix]", &wanted[..8]).await;
    b.wait_for(
        "the job found by its id's start",
        &format!(
            "const rows = {VISIBLE}; return rows.length === 1 && rows[0][0] === arguments[0];"
        ),
        json!([wanted]),
    )
    .await;
    let listed = app
        .get_json(&format!("/catalog/jobs?id_prefix={}", &wanted[..8]))
        .await;
    assert_eq!(
        listed["jobs"][0]["job_id"],
        json!(wanted),
        "the API finds the same"
    );
}

/// Every tenant's table has no stream: its poll reads the first page. Jobs that ended while
/// their rows sat off that page (behind "Load more") read their end too, as do ended rows on
/// it, and the rows still queued stay queued.
async fn rows_off_the_first_page_follow_their_jobs_to_their_end_without_a_stream(backend: Backend) {
    let s = store(backend, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let base = unique("stale");
    let tenants: Vec<TenantId> = (0..3 * PER_TENANT)
        .map(|n| TenantId::parse(&format!("{base}-{n}")).unwrap())
        .collect();
    let ids = queued_jobs(&*s, &tenants).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    every_job_once_across_two_pages(&b, &ids).await;
    b.exec("performance.clearResourceTimings();", json!([]))
        .await;
    // The oldest ten sit behind "Load more"; two more are on the first page.
    let ended: Vec<&String> = ids[..10].iter().chain(&ids[40..42]).collect();
    for id in &ended {
        s.cancel(&JobId::parse(id).unwrap(), "test").await.unwrap();
    }
    let statuses = b
        .wait_for(
            "every row reading its job's status",
            "const want = new Set(arguments[0]);
             const rows = [...document.querySelectorAll('[data-testid=job-row]')];
             const wrong = rows.filter((r) => (r.dataset.status === 'cancelled') !== want.has(r.dataset.jobId));
             return rows.length === arguments[1] && wrong.length === 0
               && rows.map((r) => r.dataset.status);",
            json!([ended, ids.len()]),
        )
        .await;
    let queued = statuses
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| *s == "queued")
        .count();
    assert_eq!(queued, ids.len() - ended.len(), "{statuses}");
    one_call_a_poll_for_the_rows_off_the_first_page(&b).await;
}

/// The page's reads since the resource timings were cleared: none of a single job (it read
/// each row off the first page on its own, ten calls a poll here, 50 with more rows), and
/// the rows off the first page in calls of the listing's `ids`.
async fn one_call_a_poll_for_the_rows_off_the_first_page(b: &Browser) {
    let reads: Value = b
        .exec(
            "return performance.getEntriesByType('resource').map((e) => new URL(e.name))
               .filter((u) => u.pathname.startsWith('/catalog/jobs'))
               .map((u) => u.pathname + u.search);",
            json!([]),
        )
        .await;
    let reads: Vec<&str> = reads
        .as_array()
        .expect("the page's reads")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let one_job = |r: &&&str| {
        r.strip_prefix("/catalog/jobs/")
            .is_some_and(|rest| !rest.contains('/'))
    };
    assert_eq!(
        reads.iter().filter(one_job).count(),
        0,
        "no job read on its own: {reads:?}"
    );
    assert!(
        reads.iter().any(|r| r.contains("ids=")),
        "the rows off the first page read by ids: {reads:?}"
    );
}

/// An ended job's row behind "Load more" whose job is then gone (its tenant removed, as its
/// record expiring does) leaves the table at the next poll: a row that cannot be opened is
/// not listed. (The page read again only the rows shown as active: it stayed for ever.)
async fn an_ended_row_off_the_first_page_leaves_once_its_job_is_gone(backend: Backend) {
    let s = store(backend, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let base = unique("expired");
    let tenants: Vec<TenantId> = (0..3 * PER_TENANT)
        .map(|n| TenantId::parse(&format!("{base}-{n}")).unwrap())
        .collect();
    let ids = ended_jobs(&*s, &tenants, 1).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    every_job_once_across_two_pages(&b, &ids).await;
    // The oldest job sits behind "Load more".
    let removed = app.delete_tenant(tenants[0].as_str()).await;
    assert_eq!(
        removed.status(),
        200,
        "the tenant and its ended job are removed"
    );
    assert_eq!(app.job(&ids[0]).await.status(), 404, "the job is gone");
    b.wait_for(
        "the gone job's row out of the table, every other one kept",
        "const rows = [...document.querySelectorAll('[data-testid=job-row]')];
         return rows.length === arguments[1] && !rows.some((r) => r.dataset.jobId === arguments[0]);",
        json!([ids[0], ids.len() - 1]),
    )
    .await;
}
