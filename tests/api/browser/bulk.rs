//! Bulk actions on the admin page: jobs selected with their boxes in the jobs table (every
//! tenant's), retried or cancelled together after a confirmation that states how many, the
//! answer said on the page; the service's record shows what was done (`retry_of`,
//! `retried_by`, `cancelled_by`).

use serde_json::json;

use super::{row_reads, screenshot_path, use_identity, DESKTOP};
use crate::helpers::{spawn_app, tenant, Backend, Gate, TestApp};
use crate::webdriver::Browser;

/// Failed jobs (one tenant each) retried together, and running ones cancelled together.
const FAILED: usize = 3;
const RUNNING: usize = 2;

/// Ticks each row's box; answers when the bulk bar counts them all.
async fn select(b: &Browser, ids: &[String]) {
    for id in ids {
        b.click(&format!("[data-testid=job-select][data-job-id=\"{id}\"]"))
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
/// and answers what the page then says the action (`verb`) did.
async fn confirm(b: &Browser, button: &str, asks: &str, verb: &str) -> String {
    b.click(&format!("[data-testid={button}]")).await;
    let text = b
        .wait_for(
            "the confirmation",
            "const d = document.querySelector('[data-testid=bulk-confirm]');
             return d.open && document.getElementById('bulk-confirm-text').textContent;",
            json!([]),
        )
        .await;
    assert!(
        text.as_str().is_some_and(|t| t.starts_with(asks)),
        "the confirmation states how many jobs: {text}"
    );
    b.click("[data-testid=bulk-yes]").await;
    b.wait_for(
        "the page says what was done",
        "const r = document.querySelector('[data-testid=bulk-result]');
         return !r.hidden && r.textContent.startsWith(arguments[0]) && r.textContent;",
        json!([format!("{verb}:")]),
    )
    .await
    .as_str()
    .unwrap_or_default()
    .to_owned()
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
    let said = confirm(&b, "bulk-retry", "Retry 3 jobs?", "Retry").await;
    assert!(said.starts_with("Retry: 3 jobs done, 0 skipped."), "{said}");
    for old in &failed {
        let was = app.get_json(&format!("/catalog/jobs/{old}")).await;
        assert_eq!(was["status"], "failed", "an ended job stays ended");
        assert_eq!(was["retried_by"], "anonymous", "who retried it: {was}");
        let new_id = was["retried_as"].as_str().expect("the job that retries it");
        let new = app.get_json(&format!("/catalog/jobs/{new_id}")).await;
        assert_eq!(
            new["retry_of"],
            old.as_str(),
            "the new job names the old one"
        );
        // The new jobs ran (and failed again, as `fail` does), listed in the table.
        row_reads(&b, new_id, "failed").await;
    }

    select(&b, &running).await;
    b.exec(
        "document.getElementById('jobs-card').scrollIntoView();",
        json!([]),
    )
    .await;
    b.screenshot(&screenshot_path("admin-bulk")).await;
    let said = confirm(&b, "bulk-cancel", "Cancel 2 jobs?", "Cancel").await;
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
