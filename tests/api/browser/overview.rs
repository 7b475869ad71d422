//! The overview in a real browser: after a scripted mix of done, failed and cancelled jobs,
//! with one job held running, every figure the page shows is what the jobs API says, the
//! chart holds every end, the process list shows the process running the held job, and a job
//! queued behind its tenant's earlier one counts as waiting for it, not as ready for a worker;
//! a count in the thousands reads grouped (`1,200`), the JSON keeping the number.

use catalog_jobs::jobs::TenantId;
use serde_json::json;

use super::{screenshot_path, DESKTOP};
use crate::both_stores;
use crate::helpers::webdriver::Browser;
use crate::helpers::{create, ordered, spawn_app, started_id, tenant, Backend, Gate, TestApp};
use crate::helpers::{settings, spawn_app_with, store, test_config};

/// The ends the script makes, by outcome.
const DONE: usize = 3;
const FAILED: usize = 2;
const CANCELLED: usize = 1;

/// Starts a job of `kind` for `tenant` and answers its id.
async fn start(app: &TestApp, kind: &str, tenant: &str) -> String {
    started_id(app.start(kind, &[("tenant_id", tenant)]).await).await
}

/// Runs the mix to its ends, and leaves one gated job running at its gate; answers every
/// job's id and the held job's tenant.
async fn a_mix_of_ends(app: &TestApp) -> (Vec<String>, TenantId) {
    let mut ids = Vec::new();
    for _ in 0..DONE {
        ids.push(start(app, "ticker", tenant().as_str()).await);
        app.wait_for_status(ids.last().unwrap(), "done").await;
    }
    for _ in 0..FAILED {
        ids.push(start(app, "fail", tenant().as_str()).await);
        app.wait_for_status(ids.last().unwrap(), "failed").await;
    }
    for _ in 0..CANCELLED {
        let t = tenant();
        ids.push(start(app, "gated", t.as_str()).await);
        Gate::of(&t).reached().await;
        assert_eq!(app.cancel(ids.last().unwrap()).await.status(), 202);
        app.wait_for_status(ids.last().unwrap(), "cancelled").await;
    }
    let held = tenant();
    ids.push(start(app, "gated", held.as_str()).await);
    Gate::of(&held).reached().await;
    app.wait_for_status(ids.last().unwrap(), "running").await;
    (ids, held)
}

/// The figure the page shows for a window and, optionally, a status.
async fn shown(b: &Browser, window: &str, status: Option<&str>) -> u64 {
    let css = match status {
        Some(s) => format!("[data-testid=overview-count][data-window=\"{window}\"][data-status=\"{s}\"]:not([data-kind])"),
        None => format!("[data-testid=overview-count][data-window=\"{window}\"]:not([data-status]):not([data-kind])"),
    };
    b.text(&css)
        .await
        .parse()
        .unwrap_or_else(|_| panic!("{css} is a number"))
}

/// The figure the page shows for one kind in a window and status.
async fn shown_for_kind(b: &Browser, window: &str, kind: &str, status: &str) -> u64 {
    let css = format!(
        "[data-testid=overview-count][data-window=\"{window}\"][data-kind=\"{kind}\"][data-status=\"{status}\"]"
    );
    b.text(&css)
        .await
        .parse()
        .unwrap_or_else(|_| panic!("{css} is a number"))
}

/// How many of `ids` the jobs API reads in `status`.
async fn read_in(app: &TestApp, ids: &[String], status: &str) -> u64 {
    let mut n = 0;
    for id in ids {
        if app.get_job(id).await["status"] == status {
            n += 1;
        }
    }
    n
}

both_stores!(the_overviews_figures_chart_and_processes_agree_with_the_jobs_api);

async fn the_overviews_figures_chart_and_processes_agree_with_the_jobs_api(backend: Backend) {
    let app = spawn_app(backend).await;
    let (ids, held_tenant) = a_mix_of_ends(&app).await;
    let held = ids.last().expect("the held job").clone();
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    b.wait_for(
        "the overview with the held job running",
        "const o = document.querySelector('[data-testid=overview]');
         const r = o && document.querySelector('[data-testid=overview-count][data-window=active][data-status=running]:not([data-kind])');
         return !o.hidden && r && r.textContent === '1';",
        json!([]),
    )
    .await;
    for (status, count) in [("done", DONE), ("failed", FAILED), ("cancelled", CANCELLED)] {
        assert_eq!(
            shown(&b, "1h", Some(status)).await,
            count as u64,
            "{status} in the last hour"
        );
        assert_eq!(
            shown(&b, "24h", Some(status)).await,
            count as u64,
            "{status} in the day"
        );
        assert_eq!(
            read_in(&app, &ids, status).await,
            count as u64,
            "the jobs API reads as many {status}"
        );
    }
    for (window, kind, status, count) in [
        ("1h", "ticker", "done", DONE),
        ("24h", "fail", "failed", FAILED),
        ("1h", "gated", "cancelled", CANCELLED),
        ("active", "gated", "running", 1),
        ("active", "ticker", "running", 0),
    ] {
        assert_eq!(
            shown_for_kind(&b, window, kind, status).await,
            count as u64,
            "{kind} {status} ({window})"
        );
    }
    let ended = (DONE + FAILED + CANCELLED) as u64;
    assert_eq!(shown(&b, "1h", None).await, ended);
    assert_eq!(
        shown(&b, "active", Some("running")).await,
        read_in(&app, &ids, "running").await
    );
    assert_eq!(
        shown(&b, "active", None).await,
        1,
        "the held job is the one active"
    );
    let charted = b
        .exec(
            "return document.querySelector('[data-testid=throughput]').dataset.total;",
            json!([]),
        )
        .await;
    assert_eq!(
        charted,
        ended.to_string(),
        "the chart holds every end of the hour"
    );
    let scale = b.text("[data-testid=throughput-words]").await;
    assert!(
        scale.starts_with(&format!("{ended} in the hour; the tallest bar ")),
        "the chart's scale in words: {scale}"
    );
    the_held_job_shows_under_its_process(&app, &b, &held).await;
    a_job_behind_its_tenants_earlier_one_shows_as_waiting_not_ready(&app, &b).await;
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    b.screenshot(&screenshot_path("admin-overview")).await;
    Gate::of(&held_tenant).release();
}

/// Waits until the processes list shows `held` under the worker the jobs API names.
async fn the_held_job_shows_under_its_process(app: &TestApp, b: &Browser, held: &str) {
    let worker = app.get_job(held).await["worker"]
        .as_str()
        .expect("a running job names its worker")
        .to_owned();
    b.wait_for(
        "the held job under its process",
        "const row = document.querySelector(`[data-testid=process-row][data-worker=\"${arguments[0]}\"]`);
         return row && row.textContent.includes(arguments[1].slice(0, 8));",
        json!([worker, held]),
    )
    .await;
}

/// Queues two jobs of a tenant's order, of kinds no runner runs: the first waits in the ready
/// queue, the second for the first. The queue shows one ready and one waiting, as the overview
/// API counts them; both are cancelled after.
async fn a_job_behind_its_tenants_earlier_one_shows_as_waiting_not_ready(
    app: &TestApp,
    b: &Browser,
) {
    let t = tenant();
    let ahead = create(&*app.store, &ordered(&t, "wait0"))
        .await
        .job_id
        .to_string();
    let behind = create(&*app.store, &ordered(&t, "wait1"))
        .await
        .job_id
        .to_string();
    assert_eq!(
        app.get_job(&behind).await["waiting_for"],
        ahead.as_str(),
        "the second waits for the first"
    );
    b.wait_for(
        "the queue with one job ready and one waiting for its tenant",
        "const w = document.querySelector('[data-testid=queue-waiting]');
         const d = document.querySelector('[data-testid=queue-depth]');
         return w && d && w.textContent === '1' && d.textContent === '1';",
        json!([]),
    )
    .await;
    let queue = app.get_json("/catalog/stats").await["queue"].clone();
    assert_eq!(
        (queue["depth"].as_u64(), queue["waiting"].as_u64()),
        (Some(1), Some(1)),
        "{queue}"
    );
    for id in [behind, ahead] {
        assert_eq!(app.cancel(&id).await.status(), 202);
    }
}

/// Jobs ended for the grouping test: a count in the thousands.
const MANY: u64 = 1_200;

/// 1,200 cancelled jobs read "1,200" in the figures, the kinds' table and the chart's words,
/// and `data-value` and the JSON keep 1200. (Before, "1200": a figure of the order of
/// 12500 read as 1250 at a glance.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_in_the_thousands_reads_grouped_and_the_json_keeps_the_number() {
    let s = store(Backend::Memory, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    // Spread over tenants: one tenant's creates are rate-limited.
    let per_tenant = super::listing::PER_TENANT;
    let tenants: Vec<TenantId> = (0..MANY as usize / per_tenant).map(|_| tenant()).collect();
    super::listing::ended_jobs(&*s, &tenants, per_tenant).await;
    let stats = app.get_json("/catalog/stats").await;
    assert_eq!(
        stats["finished"]["last_hour"]["by_outcome"]["cancelled"],
        json!(MANY),
        "the JSON's number is a number"
    );
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    let read = b
        .wait_for(
            "the overview's cancelled figures",
            "const f = document.querySelector('[data-testid=overview-count][data-window=\"1h\"][data-status=cancelled]:not([data-kind])');
             const k = document.querySelector('[data-testid=overview-count][data-window=\"1h\"][data-kind=k1][data-status=cancelled]');
             return f && k && f.dataset.value === arguments[0]
               && [f.textContent, k.textContent, k.dataset.value, document.getElementById('throughput-words').textContent];",
            json!([MANY.to_string()]),
        )
        .await;
    assert_eq!(read[0], "1,200", "the figure: {read}");
    assert_eq!(read[1], "1,200", "the kinds' table: {read}");
    assert_eq!(read[2], "1200", "data-value keeps the number: {read}");
    let words = read[3].as_str().expect("the chart's words");
    assert!(words.starts_with("1,200 in the hour"), "{words}");
}
