//! "Sync, enrich and pair" on the admin page in a real browser: a tenant's refresh started
//! from its form, its card's three steps followed live to done with full bars; a refresh
//! cancelled from the job view shows its later steps skipped.

use catalog_jobs::config::Config;
use catalog_jobs::jobs::pipeline::SKIPPED_CANCELLED;
use serde_json::{json, Value};

use super::{
    cancel_the_open_job_through_the_confirmation, click_in_place, open_with_cancel,
    screenshot_path, use_identity, DESKTOP,
};
use crate::helpers::webdriver::Browser;
use crate::helpers::{spawn_catalog_app, test_config, unique, Backend, HeldFeeds};

/// A refresh's steps, in the order its card lists them.
const STEPS: [&str; 3] = ["sync", "enrich", "pair"];

/// Starts a refresh of `source` from the page's form; answers the new card's pipeline id.
async fn start_refresh(b: &Browser, source: &str, before: &[String]) -> String {
    b.fill("[data-testid=pipeline-source]", source).await;
    click_in_place(b, "[data-testid=start-pipeline]").await;
    b.wait_for(
        "a new refresh card with its three steps",
        "const c = document.querySelector('#live [data-testid=pipeline-card]');
         return c && !arguments[0].includes(c.dataset.jobId)
           && c.querySelectorAll('[data-testid=pipeline-step]').length === 3 && c.dataset.jobId;",
        json!([before]),
    )
    .await
    .as_str()
    .expect("a pipeline id")
    .to_owned()
}

/// The card's steps as `[kind, status, percent, words]`, once the card reads `status`.
async fn card_steps_once(b: &Browser, id: &str, status: &str) -> Vec<Value> {
    b.wait_for(
        &format!("refresh {id} reading {status}"),
        "const c = document.querySelector(`[data-testid=pipeline-card][data-job-id=\"${arguments[0]}\"]`);
         if (!c || c.dataset.status !== arguments[1]) return null;
         return [...c.querySelectorAll('[data-testid=pipeline-step]')].map((s) => [
           s.dataset.kind, s.dataset.status,
           Number(s.querySelector('[data-testid=step-progress]').getAttribute('aria-valuenow')),
           s.querySelector('[data-testid=step-words]').textContent]);",
        json!([id, status]),
    )
    .await
    .as_array()
    .expect("the steps")
    .clone()
}

async fn a_refresh_of_the_demo_feed_shows_its_three_steps_done_with_full_bars(
    b: &Browser,
) -> String {
    // Every value each step's bar takes, as the page sets it.
    b.exec(
        "window.stepBars = [];
         new MutationObserver((changes) => {
           for (const c of changes) if (c.attributeName === 'aria-valuenow' && c.target.dataset.testid === 'step-progress')
             window.stepBars.push([c.target.closest('[data-testid=pipeline-step]').dataset.kind, Number(c.target.getAttribute('aria-valuenow'))]);
         }).observe(document.getElementById('live'), { attributes: true, subtree: true });",
        json!([]),
    )
    .await;
    let id = start_refresh(b, "demo.jsonl", &[]).await;
    let steps = card_steps_once(b, &id, "done").await;
    let seen: Vec<(String, String, u64)> = steps
        .iter()
        .map(|s| {
            (
                s[0].as_str().unwrap().to_owned(),
                s[1].as_str().unwrap().to_owned(),
                s[2].as_u64().unwrap(),
            )
        })
        .collect();
    let wanted: Vec<(String, String, u64)> = STEPS
        .iter()
        .map(|k| ((*k).to_owned(), "done".to_owned(), 100))
        .collect();
    assert_eq!(seen, wanted, "each step done, its bar full");
    let bars: Vec<(String, u64)> =
        serde_json::from_value(b.exec("return window.stepBars;", json!([])).await)
            .expect("pairs of kind and value");
    for kind in STEPS {
        let values: Vec<u64> = bars
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, v)| *v)
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] <= w[1]) && values.last() == Some(&100),
            "{kind}'s bar only goes forward, to 100: {values:?}"
        );
    }
    let percent = b
        .text(&format!(
            "[data-testid=pipeline-card][data-job-id=\"{id}\"] [data-testid=pipeline-percent]"
        ))
        .await;
    assert!(
        percent.starts_with("100%"),
        "the refresh reads 100%: {percent}"
    );
    id
}

async fn a_refresh_cancelled_from_its_job_view_shows_its_later_steps_skipped(
    b: &Browser,
    feed: &str,
    done: &str,
) {
    let id = start_refresh(b, feed, &[done.to_owned()]).await;
    b.wait_for(
        "the refresh's sync running",
        "const s = document.querySelector(`[data-testid=pipeline-card][data-job-id=\"${arguments[0]}\"] [data-testid=pipeline-step][data-kind=sync]`);
         return s && s.dataset.status === 'running';",
        json!([id]),
    )
    .await;
    click_in_place(
        b,
        &format!("[data-testid=pipeline-card][data-job-id=\"{id}\"] .head button"),
    )
    .await;
    // The view opens once its read answers: its facts are the refresh's from then on.
    open_with_cancel(b, &id).await;
    // A pipeline never runs itself (its steps do): its view states no attempt.
    let facts = b.text("#job-snapshot").await;
    assert!(
        facts.contains("Tenant") && !facts.contains("Attempt"),
        "{facts}"
    );
    cancel_the_open_job_through_the_confirmation(b, &id).await;
    let steps = card_steps_once(b, &id, "cancelled").await;
    let seen: Vec<(&str, &str, bool)> = steps
        .iter()
        .map(|s| {
            let words = s[3].as_str().unwrap();
            (
                s[0].as_str().unwrap(),
                s[1].as_str().unwrap(),
                words == SKIPPED_CANCELLED,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("sync", "cancelled", false),
            ("enrich", "cancelled", true),
            ("pair", "cancelled", true),
        ],
        "the running step cancelled, the later ones skipped: {steps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_started_from_the_admin_page_shows_each_step_live_to_done_or_skipped() {
    let feeds = HeldFeeds::start().await;
    let config = Config {
        sync_allowed_hosts: vec![feeds.allowed()],
        ..test_config()
    };
    let app = spawn_catalog_app(Backend::Redis, config).await;
    let tenant = unique("refresh");
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;

    let done = a_refresh_of_the_demo_feed_shows_its_three_steps_done_with_full_bars(&b).await;
    b.screenshot(&screenshot_path("admin-refresh-done")).await;
    let feed = format!("refresh-{tenant}");
    a_refresh_cancelled_from_its_job_view_shows_its_later_steps_skipped(
        &b,
        &feeds.url(&feed),
        &done,
    )
    .await;
    b.screenshot(&screenshot_path("admin-refresh-cancelled"))
        .await;
    feeds.release(&feed);
}
