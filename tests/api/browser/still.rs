//! The page holds still under an operator's pointer. The overview's first read, an error
//! message and a pair's report arrive without moving anything below where they show (the
//! browser's own layout-shift record, and the boxes of controls below them, before and
//! after); "Load more" stays where it is while the live table gains rows; and at a laptop's
//! 1280 x 800 with the job panel open the jobs table fits its box (no sideways scroll).

use serde_json::{json, Value};

use super::listing::{ended_jobs, the_first_page_with_load_more, PER_TENANT};
use super::{click_in_place, screenshot_path, the_pair_report, use_identity, DESKTOP, PHONE_WIDTH};
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    settings, spawn_app_with, spawn_catalog_app, store, test_config, unique, Backend,
};
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::TenantId;

/// Records every layout shift of the page since it loaded that no input caused (the
/// Layout Instability API, the browser's own measure), each with the nodes it moved and
/// their boxes before and after; `window.shifts()` answers them. Lines moving inside a
/// live list's box of fixed size (the overview's tables, the processes, the jobs table)
/// move nothing outside it: those are left out.
const RECORD_SHIFTS: &str = "
  const inBox = '.overview-grid > .scroll, .processes-box, #jobs-box';
  const seen = [];
  const note = (list) => { for (const e of list) if (!e.hadRecentInput) seen.push(e); };
  const o = new PerformanceObserver((l) => note(l.getEntries()));
  o.observe({ type: 'layout-shift', buffered: true });
  const box = (r) => [r.x, r.y, r.width, r.height].map(Math.round);
  const name = (n) => !n ? '?' : n.id ? `#${n.id}` : `${n.nodeName} ${n.className || ''}`.trim();
  const boxed = (n) => n && n.parentElement && n.parentElement.closest(inBox);
  window.shifts = () => { note(o.takeRecords());
    return seen.map((e) => ({ value: e.value, at: Math.round(e.startTime),
      moved: e.sources.filter((s) => !boxed(s.node))
        .map((s) => [name(s.node), box(s.previousRect), box(s.currentRect)]) }))
      .filter((e) => e.moved.length > 0); };";

/// Where each control of `arguments[0]` is (its box, to the half pixel) and whether a
/// pointer at its centre hits it.
const WHERE: &str = "
  return arguments[0].map((css) => {
    const e = document.querySelector(css);
    const r = e.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return [css, [r.left, r.top, r.width, r.height].map((v) => Math.round(v * 2) / 2),
      Boolean(hit && (hit === e || e.contains(hit)))];
  });";

/// Controls below where the error message, the overview and the report used to push in:
/// the starts' own, the products' search, the jobs table's first filter.
const BELOW: [&str; 3] = [
    "[data-testid=start-enrich]",
    "[data-testid=product-search]",
    "[data-testid=filter-status]",
];

async fn where_they_are(b: &Browser, controls: &[&str]) -> Value {
    b.exec(WHERE, json!([controls])).await
}

/// Scrolls `css` to the middle of the window, where `click_in_place` clicks it without
/// scrolling again: the boxes measured before the click are the page as clicked.
async fn in_view(b: &Browser, css: &str) {
    b.exec(
        "document.querySelector(arguments[0]).scrollIntoView({ block: 'center', inline: 'nearest' });",
        json!([css]),
    )
    .await;
}

/// The whole page is in the window: nothing a click or a scroll anchor could scroll.
async fn nothing_to_scroll(b: &Browser) {
    let sizes = b
        .exec(
            "const p = document.documentElement; return [p.scrollHeight, p.clientHeight, window.scrollY];",
            json!([]),
        )
        .await;
    assert!(
        sizes[0].as_u64() <= sizes[1].as_u64() && sizes[2] == 0,
        "the page fits its window: {sizes}"
    );
}

/// Waits until the browser has painted twice since now: the layout shifts of what came
/// before are recorded by then.
async fn painted(b: &Browser) {
    b.exec(
        "window.painted = false;
         requestAnimationFrame(() => requestAnimationFrame(() => { window.painted = true; }));",
        json!([]),
    )
    .await;
    b.wait_for("two frames painted", "return window.painted;", json!([]))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overviews_first_read_an_error_and_a_pairs_report_move_nothing_below_them() {
    let app = spawn_catalog_app(Backend::Redis, test_config()).await;
    let tenant = unique("still");
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    b.exec(RECORD_SHIFTS, json!([])).await;
    b.wait_for(
        "the overview's first read and the jobs table's",
        "const o = document.getElementById('overview');
         return !o.hidden && Boolean(o.dataset.readAt)
           && document.getElementById('jobs-live').textContent !== 'Loading…';",
        json!([]),
    )
    .await;
    painted(&b).await;
    let shifts = b.exec("return window.shifts();", json!([])).await;
    assert_eq!(
        shifts,
        json!([]),
        "the page's first reads (the overview's, the jobs table's) shift nothing"
    );
    b.screenshot(&screenshot_path("admin-still-overview")).await;

    use_identity(&b, &tenant, "").await;
    // Windows tall enough to hold the whole page: no scroll, so no scroll anchoring (Chromium
    // scrolls a scrolled page by what grows above what it shows; Safari does not) hides a move.
    for (width, on) in [
        (DESKTOP.0, "a wide window"),
        (PHONE_WIDTH, "a phone-wide window"),
    ] {
        window_is(&b, (width, WHOLE_PAGE)).await;
        an_error_moves_nothing_below_it(&b, on).await;
        a_pairs_report_moves_nothing_below_it(&b, on).await;
        a_starts_live_card_moves_nothing_below_it(&b, on).await;
    }
}

/// A start the service refuses (a sync of a source outside the allowed ones): its message
/// shows, and no control below it moved.
async fn an_error_moves_nothing_below_it(b: &Browser, on: &str) {
    b.fill("[data-testid=sync-source]", "../outside.jsonl")
        .await;
    nothing_to_scroll(b).await;
    let before = where_they_are(b, &BELOW).await;
    click_in_place(b, "[data-testid=start-sync]").await;
    b.wait_for(
        "the refusal's message",
        "const e = document.querySelector('[data-testid=error]');
         return !e.hidden && e.textContent.includes('Could not start sync');",
        json!([]),
    )
    .await;
    painted(b).await;
    let after = where_they_are(b, &BELOW).await;
    b.screenshot(&screenshot_path(&format!(
        "admin-still-error-{}",
        on.replace(' ', "-")
    )))
    .await;
    assert_eq!(
        after, before,
        "on {on}, the error message moves no control below it"
    );
    click_in_place(b, "[data-testid=error] .dismiss").await;
    b.wait_for(
        "the message dismissed",
        "return document.querySelector('[data-testid=error]').hidden;",
        json!([]),
    )
    .await;
}

/// Pair and wait on an empty catalogue: its report shows, and no control below it moved.
async fn a_pairs_report_moves_nothing_below_it(b: &Browser, on: &str) {
    nothing_to_scroll(b).await;
    let before = where_they_are(b, &BELOW).await;
    click_in_place(b, "[data-testid=pair-wait]").await;
    let report = the_pair_report(b).await;
    painted(b).await;
    let after = where_they_are(b, &BELOW).await;
    assert_eq!(
        after, before,
        "on {on}, the pair's report ({report}) moves no control below it"
    );
}

/// An enrich started from the page (of an empty catalogue: it ends at once): its live card
/// shows, and no control below the starts moved.
async fn a_starts_live_card_moves_nothing_below_it(b: &Browser, on: &str) {
    const BELOW_STARTS: [&str; 2] = [
        "[data-testid=product-search]",
        "[data-testid=filter-status]",
    ];
    nothing_to_scroll(b).await;
    let cards = b
        .exec(
            "return document.querySelectorAll('#live .job-card').length;",
            json!([]),
        )
        .await;
    let before = where_they_are(b, &BELOW_STARTS).await;
    click_in_place(b, "[data-testid=start-enrich]").await;
    b.wait_for(
        "the enrich's card",
        "return document.querySelectorAll('#live .job-card').length > arguments[0];",
        json!([cards]),
    )
    .await;
    painted(b).await;
    let after = where_they_are(b, &BELOW_STARTS).await;
    assert_eq!(
        after, before,
        "on {on}, a start's live card moves no control below the starts"
    );
}

/// A window tall enough to show the jobs table's first page and "Load more" with the page at
/// its top (a tall screen, or a laptop's zoomed out): no scroll anchoring there (a browser
/// anchors a scrolled page only, and Safari not at all) keeps what is below new rows still.
const TALL: (u32, u32) = (1280, 3400);
/// A window's height that holds the whole page (its jobs table short), at a phone's width too.
const WHOLE_PAGE: u32 = 4400;
/// A laptop's screen, where the table must fit beside the job panel.
const LAPTOP: (u32, u32) = (1280, 800);

async fn window_is(b: &Browser, (width, height): (u32, u32)) {
    b.set_size(width, height).await;
    b.wait_for(
        "the window's size",
        "return Math.abs(window.innerWidth - arguments[0]) <= 20
           && Math.abs(window.outerHeight - arguments[1]) <= 20;",
        json!([width, height]),
    )
    .await;
}

/// With "Load more" shown in the window, the page at its top, rows arrive: it stays where it
/// was and is still hit at its point.
async fn load_more_stays_put_while_rows_arrive(
    b: &Browser,
    s: &dyn JobStore,
    tenant: &TenantId,
    on: &str,
) {
    const LOAD_MORE: [&str; 1] = ["[data-testid=jobs-load-more]"];
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    let before = where_they_are(b, &LOAD_MORE).await;
    assert_eq!(
        before[0][2], true,
        "{on}: Load more is in the window and hit at its point: {before}"
    );
    // Newer than every row shown: the table's next poll adds them at its top.
    let added = ended_jobs(s, std::slice::from_ref(tenant), 3).await;
    b.wait_for(
        "the new rows in the table",
        "return arguments[0].every((id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`));",
        json!([added]),
    )
    .await;
    painted(b).await;
    let after = where_they_are(b, &LOAD_MORE).await;
    assert_eq!(
        after,
        before,
        "{on}: Load more stays where it was while {} rows arrive",
        added.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_more_stays_put_while_rows_arrive_and_the_table_fits_beside_the_job_panel() {
    let s = store(Backend::Redis, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    // Long tenant names: the widest a tenant cell is asked to be.
    let base = unique("a-tenant-with-a-long-name");
    let tenants: Vec<TenantId> = ["a", "b", "c"]
        .iter()
        .map(|n| TenantId::parse(&format!("{base}-{n}")).expect("a valid tenant"))
        .collect();
    ended_jobs(&*s, &tenants, PER_TENANT).await;
    let b = Browser::start(TALL.0, TALL.1).await;
    b.goto(&app.url("/admin")).await;
    the_first_page_with_load_more(&b).await;
    load_more_stays_put_while_rows_arrive(&b, &*s, &tenants[0], "the job panel closed").await;
    a_bulk_results_line_leaves_load_more_where_it_was(&b).await;

    click_in_place(&b, "[data-testid=job-row] td.id button").await;
    b.wait_for(
        "the job panel open",
        "const v = document.querySelector('[data-testid=job-view]');
         return !v.hidden && Boolean(v.dataset.jobId);",
        json!([]),
    )
    .await;
    load_more_stays_put_while_rows_arrive(&b, &*s, &tenants[1], "the job panel open").await;

    window_is(&b, LAPTOP).await;
    the_jobs_table_fits(&b, "at 1280 x 800 with the job panel open").await;
    in_view(&b, "[data-testid=jobs-table]").await;
    b.screenshot(&screenshot_path("admin-still-panel-1280"))
        .await;
    b.click("#close-job").await;
    window_is(&b, (PHONE_WIDTH, LAPTOP.1)).await;
    the_jobs_table_fits(&b, "on a phone").await;
    in_view(&b, "[data-testid=jobs-table]").await;
    b.screenshot(&screenshot_path("admin-still-jobs-phone"))
        .await;
}

/// One row ticked and retried in bulk: the result line shows, and "Load more" did not move.
async fn a_bulk_results_line_leaves_load_more_where_it_was(b: &Browser) {
    const LOAD_MORE: [&str; 1] = ["[data-testid=jobs-load-more]"];
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    click_in_place(b, "[data-testid=job-row] [data-testid=job-select]").await;
    let before = where_they_are(b, &LOAD_MORE).await;
    click_in_place(b, "[data-testid=bulk-retry]").await;
    b.click("[data-testid=bulk-yes]").await;
    b.wait_for(
        "the bulk action's result",
        "const r = document.querySelector('[data-testid=bulk-result]');
         return !r.hidden && r.textContent.startsWith('Retry');",
        json!([]),
    )
    .await;
    painted(b).await;
    let after = where_they_are(b, &LOAD_MORE).await;
    assert_eq!(
        after, before,
        "a bulk action's result line leaves Load more where it was"
    );
}

/// The jobs table, its box and the page do not scroll sideways.
async fn the_jobs_table_fits(b: &Browser, on: &str) {
    painted(b).await;
    let widths = b
        .exec(
            "const t = document.querySelector('[data-testid=jobs-table]');
             const box = t.parentElement;
             const page = document.documentElement;
             return { box: [box.scrollWidth, box.clientWidth], table: [t.scrollWidth, t.clientWidth],
                      page: [page.scrollWidth, page.clientWidth] };",
            json!([]),
        )
        .await;
    for part in ["box", "table", "page"] {
        assert!(
            widths[part][0].as_u64() <= widths[part][1].as_u64(),
            "{on}, the jobs {part} does not scroll sideways: {widths}"
        );
    }
}
