//! An open job stays where it is while the page's live parts grow: at a laptop's width and
//! at a phone's, its Cancel button does not move, and the point it was at still hits it,
//! while the jobs table gains rows (jobs started through the API, listed by the table's
//! poll) and the overview's processes list them running; nor does the jobs card move. The
//! failed CI this answers: the job view sat below the jobs table, new rows pushed it down,
//! and a click on Cancel landed on the table's last row, which had slid under the pointer.

use serde_json::{json, Value};

use super::{click_in_place, open_with_cancel, press_cancel, row_reads, DESKTOP, PHONE_WIDTH};
use crate::helpers::webdriver::Browser;
use crate::helpers::{spawn_app, tenant, Backend, Gate, TestApp};
use catalog_jobs::jobs::TenantId;

/// Jobs started while the job is open (each held running at its gate): rows the table adds
/// above where the job view was, and lines the overview's process row gains. With the held
/// job, as many as the test app runs at once.
const ADDED: usize = 3;

/// Cancel's box (left, top, width, height, to the half pixel) and whether a pointer at its
/// centre hits it; and where the jobs card starts in the page (below the overview, the
/// starts and the products).
const CANCEL_AT: &str = "
  const c = document.querySelector('[data-testid=cancel]');
  const r = c.getBoundingClientRect();
  const at = [r.left, r.top, r.width, r.height].map((v) => Math.round(v * 2) / 2);
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  const jobs = document.getElementById('jobs-card').getBoundingClientRect().top + window.scrollY;
  return [at, Boolean(hit && (hit === c || c.contains(hit))), Math.round(jobs * 2) / 2];";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_jobs_cancel_stays_under_the_pointer_while_the_jobs_table_gains_rows_on_a_laptop_and_a_phone(
) {
    let app = spawn_app(Backend::Redis).await;
    let held = tenant();
    let id = app.start_id("gated", &[("tenant_id", held.as_str())]).await;
    Gate::of(&held).reached().await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    // No tenant picked: an operator's view of every tenant, its table read by a poll.
    b.goto(&app.url("/admin")).await;
    row_reads(&b, &id, "running").await;
    click_in_place(
        &b,
        &format!("[data-testid=job-row][data-job-id=\"{id}\"] td.id button"),
    )
    .await;
    let laptop = cancel_stays_put_while_rows_arrive(&app, &b, &id, "a laptop").await;
    // Their runs end, and leave room for the next ones.
    for t in &laptop {
        Gate::of(t).release();
    }

    b.set_size(PHONE_WIDTH, 800).await;
    b.wait_for(
        "a phone-wide viewport",
        "return window.innerWidth <= arguments[0] + 20;",
        json!([PHONE_WIDTH]),
    )
    .await;
    let phone = cancel_stays_put_while_rows_arrive(&app, &b, &id, "a phone").await;
    for t in phone.iter().chain([&held]) {
        Gate::of(t).release();
    }
}

/// With job `id` open, notes where its Cancel is, starts `ADDED` gated jobs through the API,
/// waits until the table lists them and the overview lists them under their process, and
/// asserts Cancel did not move and is still hit at its point, and the jobs card did not
/// move either; then clicks Cancel as WebDriver does and answers the confirmation with
/// "keep it running". Answers the new jobs' tenants (their gates, to release).
async fn cancel_stays_put_while_rows_arrive(
    app: &TestApp,
    b: &Browser,
    id: &str,
    on: &str,
) -> Vec<TenantId> {
    open_with_cancel(b, id).await;
    let before = b.exec(CANCEL_AT, json!([])).await;
    assert_eq!(
        before[1], true,
        "on {on}, Cancel is hit at its point: {before}"
    );
    let (mut added, mut tenants) = (Vec::new(), Vec::new());
    for _ in 0..ADDED {
        let t = tenant();
        added.push(app.start_id("gated", &[("tenant_id", t.as_str())]).await);
        tenants.push(t);
    }
    b.wait_for(
        "the new jobs' rows in the table",
        "return arguments[0].every((id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`));",
        json!([added]),
    )
    .await;
    b.wait_for(
        "the overview listing the new jobs under their process",
        "return arguments[0].every((id) => document.querySelector(`[data-testid=process-row] li[data-job-id=\"${id}\"]`));",
        json!([added]),
    )
    .await;
    let after: Value = b.exec(CANCEL_AT, json!([])).await;
    assert_eq!(
        after, before,
        "on {on}, Cancel stays where it was, hit at its point, and the jobs card where it was, \
         while {ADDED} rows arrive and the overview lists them running"
    );
    press_cancel(b).await;
    b.click("[data-testid=confirm-no]").await;
    b.wait_for(
        "the confirmation closed, the job still open",
        "return !document.getElementById('confirm').open
           && document.querySelector('[data-testid=job-view]').dataset.jobId === arguments[0];",
        json!([id]),
    )
    .await;
    tenants
}
