//! Rows that leave the jobs table above the rows a person looks at move none of them: an
//! operator watching the queued jobs, the pointer on the table and its box scrolled, sees
//! jobs above leave the filter (cancelled): a row above the view goes and the box scrolls by
//! its height, a row in the view stays where it is, struck out, and once nobody looks at the
//! rows (the pointer away, the box at its top) the struck-out rows go.

use serde_json::{json, Value};

use super::still::{moves_nothing, painted};
use super::{screenshot_path, DESKTOP};
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    create, new_job, settings, spawn_app_with, store, test_config, unique, Backend,
};
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::{JobId, TenantId};

/// Queued jobs made: more than the box shows at once.
const QUEUED: usize = 40;
/// Rows the box is scrolled past before the jobs leave (a row is 2 rem: 32 px).
const SCROLLED: usize = 4;
const ROW_PX: u64 = 32;

/// The ids of the rows wholly in the jobs box's view (below its sticky header), in order.
const IN_VIEW: &str = "
  const box = document.getElementById('jobs-box').getBoundingClientRect();
  const top = box.top + document.getElementById('jobs-table').tHead.offsetHeight;
  return [...document.querySelectorAll('[data-testid=job-row]')].filter((r) => {
    const b = r.getBoundingClientRect();
    return !r.hidden && b.top >= top && b.bottom <= box.bottom;
  }).map((r) => r.dataset.jobId);";

/// `n` queued jobs of `tenant`, each of its own kind that no runner here runs (they wait).
async fn queued(s: &dyn JobStore, tenant: &TenantId, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let job = new_job(tenant, &format!("wait{i}"));
        create(s, &job).await;
        ids.push(job.id.to_string());
    }
    ids
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// The status filter set to queued (as a person picks it): every queued job's row, in order.
async fn the_queued_rows(b: &Browser) -> Vec<String> {
    b.exec(
        "const s = document.getElementById('filter-status'); s.value = 'queued';
         s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    let order = b
        .wait_for(
            "every queued job's row",
            "const rows = [...document.querySelectorAll('[data-testid=job-row]')].filter((r) => !r.hidden);
             return rows.length === arguments[0] && rows.map((r) => r.dataset.jobId);",
            json!([QUEUED]),
        )
        .await;
    strings(&order)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_leaving_above_the_rows_looked_at_move_none_of_them() {
    let s = store(Backend::Redis, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let tenant = TenantId::parse(&unique("leaving")).expect("a valid tenant");
    queued(&*s, &tenant, QUEUED).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    let order = the_queued_rows(&b).await;
    b.exec(
        "document.getElementById('jobs-table').scrollIntoView({ block: 'start' });
         document.getElementById('jobs-box').scrollTop = arguments[0];",
        json!([SCROLLED as u64 * ROW_PX]),
    )
    .await;
    // A WebDriver click leaves the pointer resting on a row's plain cell, in the view.
    let rest = format!(
        "[data-testid=job-row][data-job-id=\"{}\"] td:nth-child(2)",
        order[SCROLLED + 6]
    );
    b.click(&rest).await;
    let view = strings(&b.exec(IN_VIEW, json!([])).await);
    assert!(view.len() > 8, "the box shows rows enough: {view:?}");
    // Two rows above the view, and three in it above the rows looked at, leave.
    let above = [&order[1], &order[2]];
    let among = [&view[0], &view[2], &view[4]];
    let watched: Vec<String> = view
        .iter()
        .filter(|id| !among.contains(id))
        .map(|id| format!("[data-testid=job-row][data-job-id=\"{id}\"] td.id button"))
        .collect();
    let watched: Vec<&str> = watched.iter().map(String::as_str).collect();
    let leaving: Vec<&String> = above.iter().chain(&among).copied().collect();
    let scrolled = moves_nothing(&b, &watched, "rows leaving above the rows looked at", async {
        for id in &leaving {
            s.cancel(&JobId::parse(id).expect("a job id"), "test")
                .await
                .expect("cancelled");
        }
        b.wait_for(
            "the leaving rows cancelled, out of the filter",
            "const row = (id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`);
             return arguments[0].every((id) => row(id).dataset.status === 'cancelled'
               && (row(id).hidden || row(id).dataset.gone));",
            json!([leaving]),
        )
        .await;
        painted(&b).await;
        b.exec(
            "const row = (id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`);
             return [arguments[0].map((id) => row(id).hidden), arguments[1].map((id) => row(id).dataset.gone || null),
                     document.getElementById('jobs-box').scrollTop];",
            json!([above, among]),
        )
        .await
    })
    .await;
    assert_eq!(
        scrolled,
        json!([[true, true], ["filtered", "filtered", "filtered"], (SCROLLED as u64 - 2) * ROW_PX]),
        "the rows above the view gone (the box scrolled up by their height), those in it struck out"
    );
    b.screenshot(&screenshot_path("admin-gone-struck-out"))
        .await;
    once_nobody_looks_the_struck_out_rows_go(&b, &among).await;
}

/// The pointer away from the table and the box at its top: the rows struck out (`among`) go.
async fn once_nobody_looks_the_struck_out_rows_go(b: &Browser, among: &[&String]) {
    b.click("#jobs-title").await;
    b.exec(
        "document.getElementById('jobs-box').scrollTop = 0;",
        json!([]),
    )
    .await;
    b.wait_for(
        "the struck-out rows gone",
        "return !document.querySelector('[data-testid=job-row][data-gone]')
           && arguments[0].every((id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`).hidden);",
        json!([among]),
    )
    .await;
}
