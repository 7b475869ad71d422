//! The page holds still under an operator's pointer. The overview's first read, an error
//! message and a pair's report arrive without moving anything below where they show (the
//! browser's own layout-shift record, and the boxes of controls below them, before and
//! after: `moves_nothing`); "Load more" stays where it is while the live table gains rows,
//! and so do the rows a person points at; a product search on a phone leaves the jobs card
//! where it was; a token's page shows only what the token may use, from its first paint; and
//! at a laptop's 1280 x 800 with the job panel open the jobs table fits its box.

use std::future::Future;

use serde_json::{json, Value};

use super::listing::{ended_jobs, the_first_page_with_load_more, PER_TENANT};
use super::{click_in_place, screenshot_path, the_pair_report, use_identity, DESKTOP, PHONE_WIDTH};
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    settings, spawn_app_with, spawn_catalog_app, started_id, store, test_config, unique, Backend,
};
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::store::JobStore;
use catalog_jobs::jobs::TenantId;

/// Records every layout shift of the page since it loaded that no input caused (the
/// Layout Instability API, the browser's own measure), each with the nodes it moved and
/// their boxes before and after; `window.shifts()` answers them. `window.paintedIds()`
/// answers which of the page's marked elements (`elementtiming`: the overview's title) the
/// browser has painted since the page loaded (the Element Timing API). Lines moving inside a
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
  const painted = new Set();
  const paint = (list) => { for (const e of list) painted.add(e.identifier); };
  const p = new PerformanceObserver((l) => paint(l.getEntries()));
  p.observe({ type: 'element', buffered: true });
  window.paintedIds = () => { paint(p.takeRecords()); return [...painted].sort(); };
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

/// Records where each of `controls` is (its box, and whether a pointer at its centre hits
/// it), runs `act` (it acts, and waits for its effect to show), waits for two frames painted
/// since, and asserts no control moved; answers what `act` answered. `act` must not scroll:
/// its controls are put in view before.
pub async fn moves_nothing<T>(
    b: &Browser,
    controls: &[&str],
    what: &str,
    act: impl Future<Output = T>,
) -> T {
    let before = where_they_are(b, controls).await;
    let answer = act.await;
    painted(b).await;
    let after = where_they_are(b, controls).await;
    assert_eq!(after, before, "{what} moves no control of {controls:?}");
    answer
}

/// Clicks `css` where it stands, then waits until `shown` (a script) answers what the click
/// shows.
async fn click_until(b: &Browser, css: &str, what: &str, shown: &str, args: Value) -> Value {
    click_in_place(b, css).await;
    b.wait_for(what, shown, args).await
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
pub async fn painted(b: &Browser) {
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
    let painted = b.exec("return window.paintedIds();", json!([])).await;
    assert_eq!(
        painted,
        json!(["overview"]),
        "an operator's page paints the overview"
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
    let act = click_until(
        b,
        "[data-testid=start-sync]",
        "the refusal's message",
        "const e = document.querySelector('[data-testid=error]');
         return !e.hidden && e.textContent.includes('Could not start sync');",
        json!([]),
    );
    moves_nothing(b, &BELOW, &format!("on {on}, the error message"), act).await;
    b.screenshot(&screenshot_path(&format!(
        "admin-still-error-{}",
        on.replace(' ', "-")
    )))
    .await;
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
    moves_nothing(b, &BELOW, &format!("on {on}, the pair's report"), async {
        click_in_place(b, "[data-testid=pair-wait]").await;
        the_pair_report(b).await
    })
    .await;
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
    let act = click_until(
        b,
        "[data-testid=start-enrich]",
        "the enrich's card",
        "return document.querySelectorAll('#live .job-card').length > arguments[0];",
        json!([cards]),
    );
    moves_nothing(
        b,
        &BELOW_STARTS,
        &format!("on {on}, a start's live card"),
        act,
    )
    .await;
}

/// A window tall enough to show the jobs table's first page and "Load more" with the page at
/// its top (a tall screen, or a laptop's zoomed out): no scroll anchoring there (a browser
/// anchors a scrolled page only, and Safari not at all) keeps what is below new rows still.
const TALL: (u32, u32) = (1280, 3800);
/// A window's height that holds the whole page (its jobs table short), at a phone's width too.
const WHOLE_PAGE: u32 = 4400;
/// A laptop's screen, where the table must fit beside the job panel.
const LAPTOP: (u32, u32) = (1280, 800);
/// A phone's screen (an iPhone 12 to 15 in CSS pixels).
const PHONE: (u32, u32) = (390, 844);
/// The jobs table's "Load more".
const LOAD_MORE: [&str; 1] = ["[data-testid=jobs-load-more]"];

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
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    let shown = where_they_are(b, &LOAD_MORE).await;
    assert_eq!(
        shown[0][2], true,
        "{on}: Load more is in the window and hit at its point: {shown}"
    );
    moves_nothing(
        b,
        &LOAD_MORE,
        &format!("{on}: rows arriving"),
        new_rows_shown(b, s, tenant),
    )
    .await;
}

/// Jobs of `tenant` made newer than every row shown, once the table's next poll shows them;
/// their ids.
async fn new_rows_shown(b: &Browser, s: &dyn JobStore, tenant: &TenantId) -> Vec<String> {
    let added = ended_jobs(s, std::slice::from_ref(tenant), 3).await;
    b.wait_for(
        "the new rows in the table",
        "return arguments[0].every((id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`));",
        json!([added]),
    )
    .await;
    added
}

/// With the pointer resting on the table and its box at its top (where the browser's own
/// scroll anchoring does nothing), new rows arrive above the rows shown: those stay where
/// they were, a line over the table says how many wait above, and pressing it shows them.
async fn the_rows_pointed_at_stay_put_while_rows_arrive_above(
    b: &Browser,
    s: &dyn JobStore,
    tenant: &TenantId,
) {
    b.exec(
        "window.scrollTo(0, 0); document.getElementById('jobs-box').scrollTop = 0;",
        json!([]),
    )
    .await;
    // A WebDriver click moves the pointer onto a row's plain cell and leaves it there.
    b.click("[data-testid=job-row] td:nth-child(2)").await;
    let shown: Vec<String> = b
        .exec(
            "return [...document.querySelectorAll('[data-testid=job-row]')].slice(0, 3)
               .map((r) => `[data-testid=job-row][data-job-id=\"${r.dataset.jobId}\"] td.id button`);",
            json!([]),
        )
        .await
        .as_array()
        .expect("the first rows")
        .iter()
        .map(|v| v.as_str().expect("a selector").to_owned())
        .collect();
    let rows: Vec<&str> = shown.iter().map(String::as_str).collect();
    let added = moves_nothing(
        b,
        &rows,
        "new rows arriving above the rows the pointer is on",
        new_rows_shown(b, s, tenant),
    )
    .await;
    let told = b
        .wait_for(
            "the line saying how many rows wait above",
            "const n = document.querySelector('[data-testid=jobs-new]');
             return !n.hidden && n.textContent;",
            json!([]),
        )
        .await;
    assert_eq!(told, format!("{} new above: show", added.len()));
    b.screenshot(&screenshot_path("admin-still-new-above"))
        .await;
    click_in_place(b, "[data-testid=jobs-new]").await;
    b.wait_for(
        "the new rows shown at the box's top, the line gone",
        "const first = document.querySelector('[data-testid=job-row]');
         return document.getElementById('jobs-box').scrollTop === 0
           && document.querySelector('[data-testid=jobs-new]').hidden
           && arguments[0].includes(first.dataset.jobId);",
        json!([added]),
    )
    .await;
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
    the_rows_pointed_at_stay_put_while_rows_arrive_above(&b, &*s, &tenants[2]).await;
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
    let tenant = the_jobs_table_fits(&b, "on a phone").await;
    assert!(
        tenant >= 96.0,
        "on a phone, the tenant column reads a dozen characters of a name: {tenant} px"
    );
    in_view(&b, "[data-testid=jobs-table]").await;
    b.screenshot(&screenshot_path("admin-still-jobs-phone"))
        .await;
}

/// One row ticked and retried in bulk: the result line shows, and "Load more" did not move.
async fn a_bulk_results_line_leaves_load_more_where_it_was(b: &Browser) {
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    click_in_place(b, "[data-testid=job-row] [data-testid=job-select]").await;
    moves_nothing(b, &LOAD_MORE, "a bulk action's result line", async {
        click_in_place(b, "[data-testid=bulk-retry]").await;
        b.click("[data-testid=bulk-yes]").await;
        b.wait_for(
            "the bulk action's result",
            "const r = document.querySelector('[data-testid=bulk-result]');
             return !r.hidden && r.textContent.startsWith('Retry');",
            json!([]),
        )
        .await;
    })
    .await;
}

/// The jobs table, its box and the page do not scroll sideways; answers the width of a row's
/// tenant cell.
async fn the_jobs_table_fits(b: &Browser, on: &str) -> f64 {
    painted(b).await;
    let widths = b
        .exec(
            "const t = document.querySelector('[data-testid=jobs-table]');
             const box = t.parentElement;
             const page = document.documentElement;
             const tenant = t.querySelector('[data-testid=job-row] td.tenant').getBoundingClientRect().width;
             return { box: [box.scrollWidth, box.clientWidth], table: [t.scrollWidth, t.clientWidth],
                      page: [page.scrollWidth, page.clientWidth], tenant };",
            json!([]),
        )
        .await;
    for part in ["box", "table", "page"] {
        assert!(
            widths[part][0].as_u64() <= widths[part][1].as_u64(),
            "{on}, the jobs {part} does not scroll sideways: {widths}"
        );
    }
    widths["tenant"].as_f64().expect("a width")
}

/// Controls of the jobs card, below the products.
const BELOW_PRODUCTS: [&str; 2] = ["#jobs-title", "[data-testid=filter-status]"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_product_search_and_a_product_opened_move_nothing_below_them_on_a_phone_and_a_laptop() {
    let app = spawn_catalog_app(Backend::Redis, test_config()).await;
    let tenant = unique("products");
    let sync = app
        .start("sync", &[("tenant_id", &tenant), ("source", "demo.jsonl")])
        .await;
    app.wait_for_status(&started_id(sync).await, "done").await;
    let b = Browser::start(PHONE.0, PHONE.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;
    for (window, on) in [(PHONE, "a phone"), (LAPTOP, "a laptop")] {
        window_is(&b, window).await;
        // Every key of families 10-19 starts with this: a full page of 20 and more.
        b.fill("[data-testid=product-search]", "fam00001").await;
        a_search_an_opened_product_and_back_move_nothing_below_them(&b, on).await;
    }
}

async fn a_search_an_opened_product_and_back_move_nothing_below_them(b: &Browser, on: &str) {
    for (css, what, shown) in [
        (
            "#product-form button",
            "a product search",
            "return document.querySelectorAll('[data-testid=product-result]').length === 20
               && document.querySelector('[data-testid=product-view]').hidden;",
        ),
        (
            "[data-testid=product-result] button",
            "a product opened",
            "return !document.querySelector('[data-testid=product-view]').hidden;",
        ),
        (
            "[data-testid=product-back]",
            "back to the results",
            "return document.querySelector('[data-testid=product-view]').hidden;",
        ),
    ] {
        in_view(b, css).await;
        let act = click_until(b, css, what, shown, json!([]));
        moves_nothing(b, &BELOW_PRODUCTS, &format!("on {on}, {what}"), act).await;
        no_word_of_a_result_is_broken(b, on).await;
        b.screenshot(&screenshot_path(&format!(
            "admin-still-{}-{}",
            on.replace(' ', "-"),
            what.replace(' ', "-")
        )))
        .await;
    }
}

/// Every word of the products' results (their names) stands on one line.
async fn no_word_of_a_result_is_broken(b: &Browser, on: &str) {
    let broken = b
        .exec(
            "const broken = [];
             for (const button of document.querySelectorAll('[data-testid=product-result] button')) {
               const text = button.firstChild;
               for (const m of text.textContent.matchAll(/\\S+/g)) {
                 const r = document.createRange();
                 r.setStart(text, m.index);
                 r.setEnd(text, m.index + m[0].length);
                 const tops = new Set([...r.getClientRects()].map((b) => Math.round(b.top)));
                 if (tops.size > 1) broken.push(m[0]);
               }
             }
             return broken;",
            json!([]),
        )
        .await;
    assert_eq!(
        broken,
        json!([]),
        "on {on}, words of product names broken across lines"
    );
}

/// Once the page has read what it shows (the jobs table's first answer) after a load: whether
/// the overview and the starts are shown, whether the overview was ever painted, and what
/// moved on its own.
async fn what_the_page_showed(b: &Browser, overview: bool, starts: bool) -> Value {
    b.exec(RECORD_SHIFTS, json!([])).await;
    b.wait_for(
        "the overview and the starts as the token may see them, the jobs table's first answer read",
        "return document.getElementById('overview').hidden === !arguments[0]
           && document.getElementById('start-card').hidden === !arguments[1]
           && document.getElementById('jobs-live').textContent !== 'Loading…';",
        json!([overview, starts]),
    )
    .await;
    painted(b).await;
    b.exec(
        "return { painted: window.paintedIds(), shifts: window.shifts() };",
        json!([]),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_token_never_sees_the_overview_or_a_control_it_may_not_use_flash_in() {
    let tenant = unique("scoped");
    let (shop, viewer) = (format!("{tenant}-shop"), format!("{tenant}-viewer"));
    let config = Config {
        api_tokens: Some(format!(
            "{tenant} shop {};read:{tenant} viewer {}",
            hash_token(&shop),
            hash_token(&viewer)
        )),
        ..test_config()
    };
    let app = spawn_catalog_app(Backend::Redis, config).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    let nothing = json!({ "painted": [], "shifts": [] });
    assert_eq!(
        what_the_page_showed(&b, false, true).await,
        nothing,
        "a first visit, no token given yet: no overview painted, nothing moved"
    );
    for (token, starts, on) in [
        (&shop, true, "a tenant's token"),
        (&viewer, false, "a tenant's read-only token"),
    ] {
        // A tab that holds the token and knows nothing of it yet: the page's first load there.
        b.exec(
            "sessionStorage.clear();
             sessionStorage.setItem('catalog-jobs.tenant', arguments[0]);
             sessionStorage.setItem('catalog-jobs.token', arguments[1]);",
            json!([tenant, token]),
        )
        .await;
        for load in ["first", "second"] {
            b.goto(&app.url("/admin")).await;
            assert_eq!(
                what_the_page_showed(&b, false, starts).await,
                nothing,
                "{on}, its {load} load: no overview painted, no start shown to a read-only \
                 token, nothing moved"
            );
        }
    }
}
