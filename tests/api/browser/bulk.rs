//! Bulk actions on the admin page: jobs selected with their boxes in the jobs table (every
//! tenant's), retried or cancelled together after a confirmation that states how many, the
//! answer said on the page; and, beyond the rows shown, every failed job the filters match
//! retried, every active job of a tenant cancelled, in as many calls as it takes. The
//! service's record shows what was done (`retry_of`, `retried_by`, `cancelled_by`).

use catalog_jobs::api::bulk::BULK_MAX;
use catalog_jobs::jobs::TenantId;
use serde_json::json;

use super::{click_in_place, row_reads, screenshot_path, use_identity, DESKTOP};
use crate::both_stores;
use crate::helpers::webdriver::Browser;
use crate::helpers::{create, failed_job, new_job, spawn_app, tenant, Backend, Gate, TestApp};

both_stores!(
    every_failed_job_the_filters_match_is_retried_beyond_the_rows_shown_in_calls_of_100,
    every_active_job_of_the_picked_tenant_is_cancelled_while_another_tenants_keep_running,
);

/// More jobs than one page of the table shows (50) and than one call acts on.
const BEYOND: usize = BULK_MAX + 20;

/// Failed jobs (one tenant each) retried together, and running ones cancelled together.
const FAILED: usize = 3;
const RUNNING: usize = 2;

/// Ticks each row's box; answers when the bulk bar counts them all.
async fn select(b: &Browser, ids: &[String]) {
    for id in ids {
        click_in_place(
            b,
            &format!("[data-testid=job-select][data-job-id=\"{id}\"]"),
        )
        .await;
    }
    b.wait_for(
        "the selection counted",
        "return document.getElementById('bulk-count').textContent === `${arguments[0]} jobs selected`;",
        json!([ids.len()]),
    )
    .await;
}

/// Clicks a bulk button, checks the confirmation states how many jobs it touches, confirms,
/// and answers what the confirmation asked and what the page then says the action (`verb`)
/// did.
async fn confirm(b: &Browser, button: &str, asks: &str, verb: &str) -> (String, String) {
    click_in_place(b, &format!("[data-testid={button}]")).await;
    let text_of_confirmation = b
        .wait_for(
            "the confirmation",
            "const d = document.querySelector('[data-testid=bulk-confirm]');
             return d.open && document.getElementById('bulk-confirm-text').textContent;",
            json!([]),
        )
        .await;
    assert!(
        text_of_confirmation
            .as_str()
            .is_some_and(|t| t.starts_with(asks)),
        "the confirmation states how many jobs: {text_of_confirmation}"
    );
    b.click("[data-testid=bulk-yes]").await;
    let said = b
        .wait_for(
            "the page says what was done",
            "const r = document.querySelector('[data-testid=bulk-result]');
         return !r.hidden && r.textContent.startsWith(arguments[0]) && r.textContent;",
            json!([format!("{verb}:")]),
        )
        .await;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    (text(&text_of_confirmation), text(&said))
}

async fn started(app: &TestApp, kind: &str, status: &str) -> String {
    let t = tenant();
    let id = app.start_id(kind, &[("tenant_id", t.as_str())]).await;
    if kind == "gated" {
        Gate::of(&t).reached().await;
    }
    app.wait_for_status(&id, status).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_jobs_are_retried_and_cancelled_in_bulk_after_a_confirmation_that_counts_them() {
    let app = spawn_app(Backend::Redis).await;
    let mut failed = Vec::new();
    for _ in 0..FAILED {
        failed.push(started(&app, "fail", "failed").await);
    }
    let mut running = Vec::new();
    for _ in 0..RUNNING {
        running.push(started(&app, "gated", "running").await);
    }
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, "", "").await;
    for id in &failed {
        row_reads(&b, id, "failed").await;
    }
    for id in &running {
        row_reads(&b, id, "running").await;
    }
    let mut all = failed.clone();
    all.extend(running.iter().cloned());
    select(&b, &all).await;
    let labels = b
        .exec(
            "return [document.querySelector('[data-testid=bulk-retry]').textContent,
                     document.querySelector('[data-testid=bulk-cancel]').textContent];",
            json!([]),
        )
        .await;
    assert_eq!(
        labels,
        json!(["Retry 3 ended jobs…", "Cancel 2 active jobs…"]),
        "each action counts the selected jobs it applies to"
    );
    let (_, said) = confirm(&b, "bulk-retry", "Retry 3 jobs?", "Retry").await;
    assert!(said.starts_with("Retry: 3 jobs done, 0 skipped."), "{said}");
    for old in &failed {
        let new_id = retried(&app, old).await;
        // The new jobs ran (and failed again, as `fail` does), listed in the table.
        row_reads(&b, &new_id, "failed").await;
    }

    select(&b, &running).await;
    b.exec(
        "document.getElementById('jobs-card').scrollIntoView();",
        json!([]),
    )
    .await;
    b.screenshot(&screenshot_path("admin-bulk")).await;
    let (_, said) = confirm(&b, "bulk-cancel", "Cancel 2 jobs?", "Cancel").await;
    assert!(
        said.starts_with("Cancel: 2 jobs done, 0 skipped."),
        "{said}"
    );
    for id in &running {
        row_reads(&b, id, "cancelled").await;
        let job = app.get_json(&format!("/catalog/jobs/{id}")).await;
        assert_eq!(job["cancelled_by"], "anonymous", "who cancelled it: {job}");
    }
}

/// Says the confirmation counted more than one call's worth and the page did them all.
/// Confirms the bulk action behind `button` (asking `asks`) over `n` jobs, more than one call
/// takes, and asserts that the confirmation says so and that every call was made.
async fn confirm_in_calls(b: &Browser, button: &str, asks: &str, verb: &str, n: usize) {
    let (asked, said) = confirm(b, button, asks, verb).await;
    assert!(
        asked.contains("more than one call's worth (100 jobs a call)"),
        "the confirmation says it takes more than one call: {asked}"
    );
    let done = format!("{verb}: {n} jobs done, 0 skipped.");
    assert!(said.starts_with(&done), "every job done, none left: {said}");
    assert!(!said.contains("left"), "{said}");
}

/// Tells the page that the control at `css` changed, as leaving it after an edit does.
async fn changed(b: &Browser, css: &str) {
    let script = "document.querySelector(arguments[0]).dispatchEvent(new Event('change'));";
    b.exec(script, json!([css])).await;
}

/// Asserts that the anonymous caller retried the failed job `old`, which stays failed, and
/// that the job retrying it names it; answers that job's id.
async fn retried(app: &TestApp, old: &str) -> String {
    let was = app.get_json(&format!("/catalog/jobs/{old}")).await;
    assert_eq!(was["status"], "failed", "an ended job stays ended");
    assert_eq!(was["retried_by"], "anonymous", "who retried it: {was}");
    let new_id = was["retried_as"].as_str().expect("the job that retries it");
    let new = app.get_json(&format!("/catalog/jobs/{new_id}")).await;
    assert_eq!(new["retry_of"], old, "the new job names the old one");
    new_id.to_owned()
}

/// How many job rows the table shows now.
async fn rows_shown(b: &Browser) -> u64 {
    let n = b
        .exec(
            "return document.querySelectorAll('[data-testid=job-row]:not([hidden])').length;",
            json!([]),
        )
        .await;
    n.as_u64().unwrap_or_default()
}

async fn every_failed_job_the_filters_match_is_retried_beyond_the_rows_shown_in_calls_of_100(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let tenants = [tenant(), tenant(), tenant(), tenant()];
    let mut old = Vec::new();
    for i in 0..BEYOND {
        old.push(failed_job(&*app.store, &tenants[i % 4], &format!("many{i}")).await);
    }
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, "", "").await;
    row_reads(&b, &old[BEYOND - 1].to_string(), "failed").await;
    let shown = rows_shown(&b).await;
    assert!(
        shown < BEYOND as u64,
        "the table shows {shown}, fewer than all"
    );
    let status = "document.getElementById('filter-status').value = 'failed';";
    b.exec(status, json!([])).await;
    changed(&b, "#filter-status").await;
    let asks = format!("Retry {BEYOND} failed jobs matching the filter (every tenant");
    confirm_in_calls(&b, "bulk-retry-all", &asks, "Retry", BEYOND).await;
    for id in &old {
        retried(&app, &id.to_string()).await;
    }
}

/// `n` queued jobs of `t`, of kinds no runner runs (so they wait), and one running at its gate.
async fn active_jobs(app: &TestApp, t: &TenantId, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let job = new_job(t, &format!("wait{i}"));
        ids.push(create(&*app.store, &job).await.job_id.to_string());
    }
    ids.push(app.start_id("gated", &[("tenant_id", t.as_str())]).await);
    Gate::of(t).reached().await;
    ids
}

async fn every_active_job_of_the_picked_tenant_is_cancelled_while_another_tenants_keep_running(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    let (t, other) = (tenant(), tenant());
    let picked = active_jobs(&app, &t, BEYOND - 1).await;
    let spared = active_jobs(&app, &other, 3).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, "", "").await;
    b.fill("[data-testid=tenant-picker]", t.as_str()).await;
    changed(&b, "[data-testid=tenant-picker]").await;
    let asks = format!("Cancel {BEYOND} active jobs of tenant {t}?");
    confirm_in_calls(&b, "bulk-cancel-tenant", &asks, "Cancel", BEYOND).await;
    for id in &picked {
        app.wait_for_status(id, "cancelled").await;
        let job = app.get_json(&format!("/catalog/jobs/{id}")).await;
        assert_eq!(job["cancelled_by"], "anonymous", "who cancelled it: {job}");
    }
    let running = spared.last().expect("the other tenant's running job");
    for id in &spared {
        let status = if id == running { "running" } else { "queued" };
        assert_eq!(
            app.get_json(&format!("/catalog/jobs/{id}")).await["status"],
            status
        );
    }
    Gate::of(&other).release();
}
