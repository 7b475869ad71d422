//! The admin page in a real browser: headless Chromium through chromedriver (see
//! `helpers/webdriver.rs`) against the real service (Redis started by the harness, the real catalogue
//! job kinds, the demo feed). One browser session walks the page the way an operator does;
//! every wait polls the DOM (bounded), none sleeps. Screenshots go to `target/screenshots/`.
//! `console.rs` holds the operator's console: the table under load, the timeline, the roles.

mod bulk;
mod console;
mod gone;
mod listing;
mod overview;
mod pipeline;
mod replicas;
mod steady;
mod still;
mod switch;
mod timeline;

use std::path::PathBuf;

use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use serde_json::{json, Value};

use std::sync::Arc;

use catalog_jobs::jobs::redis::RedisStore;

use crate::helpers::webdriver::Browser;
use crate::helpers::{
    dead_redis_url, settings, spawn_app_with, spawn_catalog_app, test_config, unique, Backend,
    HeldFeeds, TestApp, NOBODY_LISTENS,
};

/// A laptop's viewport, and a phone's width (an iPhone SE / 13 mini in CSS pixels).
pub const DESKTOP: (u32, u32) = (1280, 1000);
pub const PHONE_WIDTH: u32 = 375;
/// The currency the service is told its prices are in (`PRICE_CURRENCY`).
const CURRENCY: &str = "EUR";
/// A product name that would run script if the page ever rendered data as markup.
const HOSTILE: &str = "<img src=x onerror=alert(1)>";

pub fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/screenshots")
        .join(format!("{name}.png"))
}

/// Clicks the element `css` where it stands, in one script run by the page: scrolled into
/// view, it must be what a pointer at its centre hits, and it is clicked in the same run.
/// A WebDriver click locates, hit-tests and dispatches in steps, not at once: a live part of
/// the page that changes between them (a poll's rows, the overview's read, a card's line)
/// can move the element away, and the click lands on whatever slid under the point (the
/// failed CI: an open job's Cancel pushed down by the jobs table's new rows). Where the page
/// keeps a control still by design (the header, the job panel, a dialog), the tests click it
/// with WebDriver, as a person would; `steady.rs` proves the job panel stays still.
pub async fn click_in_place(b: &Browser, css: &str) {
    b.wait_for(
        &format!("{css} shown, enabled and hit where it stands, then clicked"),
        "const e = document.querySelector(arguments[0]);
         if (!e || e.disabled || e.closest('[hidden]')) return false;
         e.scrollIntoView({ block: 'center', inline: 'nearest' });
         const r = e.getBoundingClientRect();
         if (!r.width || !r.height) return false;
         const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
         if (!hit || (hit !== e && !e.contains(hit))) return false;
         e.click();
         return true;",
        json!([css]),
    )
    .await;
}

/// Types the tenant (and token) and applies them.
pub async fn use_identity(b: &Browser, tenant: &str, token: &str) {
    b.fill("[data-testid=tenant]", tenant).await;
    b.fill("[data-testid=token]", token).await;
    b.click("#use").await;
}

/// Waits for the newest live card of `kind` to read `status`; answers its job id.
async fn card_reads(b: &Browser, kind: &str, status: &str) -> String {
    b.wait_for(
        &format!("a {kind} job {status}"),
        "const c = document.querySelector(`#live .job-card[data-kind=\"${arguments[0]}\"]`);
         return c && c.dataset.status === arguments[1] ? c.dataset.jobId : null;",
        json!([kind, status]),
    )
    .await
    .as_str()
    .expect("a job id")
    .to_owned()
}

/// Waits for the jobs table's row of `id` to read `status`.
async fn row_reads(b: &Browser, id: &str, status: &str) {
    b.wait_for(
        &format!("job {id}'s row reading {status}"),
        "const r = document.querySelector(`[data-testid=jobs-table] [data-testid=job-row][data-job-id=\"${arguments[0]}\"]`);
         return r && r.dataset.status === arguments[1];",
        json!([id, status]),
    )
    .await;
}

async fn a_sync_started_from_the_page_fills_its_bar_to_100_and_the_jobs_table_shows_it_done(
    b: &Browser,
) {
    // Every value the bars take, as the page sets them.
    b.exec(
        "window.barValues = [];
         new MutationObserver((changes) => {
           for (const c of changes) if (c.attributeName === 'aria-valuenow')
             window.barValues.push([c.target.closest('.job-card').dataset.jobId, Number(c.target.getAttribute('aria-valuenow'))]);
         }).observe(document.getElementById('live'), { attributes: true, subtree: true });",
        json!([]),
    )
    .await;
    b.fill("[data-testid=sync-source]", "demo.jsonl").await;
    click_in_place(b, "[data-testid=start-sync]").await;
    let id = card_reads(b, "sync", "done").await;
    let follow = b
        .exec(
            "return [document.querySelector(`.job-card[data-job-id=\"${arguments[0]}\"]`).dataset.follow,
                     document.getElementById('jobs-table').dataset.follow];",
            json!([id]),
        )
        .await;
    assert_eq!(
        follow,
        json!(["stream", "stream"]),
        "the card and the table follow the event streams, not a poll"
    );
    let values: Vec<u64> = b
        .exec(
            "return window.barValues.filter(([job]) => job === arguments[0]).map(([, v]) => v);",
            json!([id]),
        )
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "the bar never goes backwards: {values:?}"
    );
    let bar = b
        .exec(
            "return document.querySelector(`.job-card[data-job-id=\"${arguments[0]}\"] [data-testid=job-progress]`).getAttribute('aria-valuenow');",
            json!([id]),
        )
        .await;
    assert_eq!(bar, "100", "the bar of a done sync is full");
    let step = b
        .text(&format!(
            ".job-card[data-job-id=\"{id}\"] [data-testid=job-step]"
        ))
        .await;
    assert!(!step.is_empty(), "the card shows the job's step");
    let meta = b
        .text(&format!(".job-card[data-job-id=\"{id}\"] .meta"))
        .await;
    assert!(
        meta.contains("elapsed") && meta.contains("ETA"),
        "the card shows elapsed time and ETA: {meta}"
    );
    row_reads(b, &id, "done").await;
}

async fn pair_and_wait_shows_the_report_inline(b: &Browser) {
    click_in_place(b, "[data-testid=start-enrich]").await;
    card_reads(b, "enrich", "done").await;
    click_in_place(b, "[data-testid=pair-wait]").await;
    let report = the_pair_report(b).await;
    assert_eq!(report["products"], 2400, "{report}");
    assert!(report["paired"].as_u64().unwrap() > 2000, "{report}");
    let words = pair_report_words(b, "Full pair").await;
    assert!(
        words.starts_with("Full pair (the first pair): re-scored all 2,400 products;"),
        "the report says full and its counts in words: {words}"
    );
    // Nothing changed since: the next pair is incremental and re-scores nothing.
    click_in_place(b, "[data-testid=pair-wait]").await;
    let words = pair_report_words(b, "Incremental pair").await;
    assert!(
        words.starts_with("Incremental pair: re-scored 0 of 2,400 products")
            && words.contains("since the last pair 0 added, 0 changed, 0 removed")
            && words.contains("(found by the change feed)"),
        "the report says incremental, its counts and how it found them in words: {words}"
    );
    a_report_that_does_not_say_how_it_found_its_changes_reads_without_it(b).await;
}

/// The report the box shows once the pair asked to wait ends (a click on Pair and wait says
/// "Waiting…" there at once, so the report read is that pair's).
pub async fn the_pair_report(b: &Browser) -> Value {
    b.wait_for(
        "the pair's report",
        "const r = document.querySelector('[data-testid=report]').textContent;
         try { return JSON.parse(r); } catch { return null; }",
        json!([]),
    )
    .await
}

/// An incremental pair's report kept from before reports said how they found their changes
/// (no `changes.found_by`) reads its counts and no "found by".
async fn a_report_that_does_not_say_how_it_found_its_changes_reads_without_it(b: &Browser) {
    b.exec(
        "import('/admin/core.js').then((m) => { window.olderWords = m.pairWords(arguments[0]); });",
        json!([{
            "mode": "incremental", "products": 10, "paired": 9, "pairs": 40, "rescored": 2,
            "changes": {"added": 1, "changed": 0, "removed": 0}, "rescored_because": {},
        }]),
    )
    .await;
    let words = b
        .wait_for(
            "the older report's words",
            "return window.olderWords;",
            json!([]),
        )
        .await;
    let words = words.as_str().expect("words");
    assert!(
        words.contains("1 added, 0 changed, 0 removed; 9 products paired, 40 pairs.")
            && !words.contains("found by"),
        "{words}"
    );
}

/// The words the report box shows above a pair's report, once they begin with `mode`.
async fn pair_report_words(b: &Browser, mode: &str) -> String {
    let words = b
        .wait_for(
            &format!("the report's words: {mode}"),
            "const w = document.querySelector('[data-testid=report-words]');
             return w && !w.hidden && w.textContent.startsWith(arguments[0]) ? w.textContent : null;",
            json!([mode]),
        )
        .await;
    words.as_str().unwrap_or_default().to_owned()
}

async fn a_search_pages_through_its_results(b: &Browser) {
    // Every key of families 10-19 starts with this: more than one page of 20.
    b.fill("[data-testid=product-search]", "fam00001").await;
    click_in_place(b, "#product-form button").await;
    let first = b
        .wait_for(
            "a first page with more to come",
            "const found = document.querySelectorAll('[data-testid=product-result]').length;
             return document.querySelector('[data-testid=product-more]') && found;",
            json!([]),
        )
        .await;
    assert_eq!(first, 20, "a page of 20");
    click_in_place(b, "[data-testid=product-more]").await;
    b.wait_for(
        "a second page appended, every result matching",
        "const keys = [...document.querySelectorAll('[data-testid=product-result] button')].map((b) => b.dataset.productKey);
         return keys.length > 20 && new Set(keys).size === keys.length && keys.every((k) => k.startsWith('fam00001'));",
        json!([]),
    )
    .await;
}

/// Searches the products for `query`, waits for `key` among the results and opens it.
async fn search_and_open(b: &Browser, query: &str, key: &str) {
    b.fill("[data-testid=product-search]", query).await;
    click_in_place(b, "#product-form button").await;
    let result = format!("[data-testid=product-results] button[data-product-key=\"{key}\"]");
    b.wait_for(
        &format!("{key} in the results"),
        "return document.querySelector(arguments[0]);",
        json!([result]),
    )
    .await;
    click_in_place(b, &result).await;
}

async fn a_product_is_found_opened_and_its_neighbour_followed(b: &Browser) {
    search_and_open(b, "fam000001-v0", "fam000001-v0").await;
    b.wait_for(
        "its sibling among its neighbours",
        "const v = document.querySelector('[data-testid=product-view]');
         return !v.hidden && v.dataset.productKey === 'fam000001-v0'
           && v.querySelector('[data-testid=neighbours] button[data-product-key=\"fam000001-v1\"]');",
        json!([]),
    )
    .await;
    let score = b.text("[data-testid=neighbours] .score").await;
    let shown: f64 = score
        .strip_prefix("score ")
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1.0);
    assert!(
        (0.0..=1.0).contains(&shown),
        "a neighbour shows its score: {score}"
    );
    click_in_place(
        b,
        "[data-testid=neighbours] button[data-product-key=\"fam000001-v1\"]",
    )
    .await;
    b.wait_for(
        "the neighbour opened",
        "const v = document.querySelector('[data-testid=product-view]');
         return v.dataset.productKey === 'fam000001-v1'
           && v.querySelector('[data-testid=neighbours] button[data-product-key=\"fam000001-v0\"]');",
        json!([]),
    )
    .await;
}

/// The product open (`key`, opened from the results of a search for `opened_from`) shows
/// its price with the currency the service names, and its neighbours with key, name and
/// score; "Back to results" shows the results again, focused on the one it was opened from.
async fn a_product_reads_its_price_and_neighbours_and_goes_back_to_its_results(
    b: &Browser,
    app: &TestApp,
    tenant: &str,
    key: &str,
    opened_from: &str,
) {
    let p = app
        .get_json(&format!("/catalog/products/{key}?tenant_id={tenant}"))
        .await;
    assert_eq!(p["currency"], CURRENCY, "the service names the currency");
    let cents = p["price_cents"]
        .as_i64()
        .expect("the demo products have prices");
    let facts = b.text("#product-facts").await;
    let price = format!("Price{}.{:02} {CURRENCY}", cents / 100, cents % 100);
    assert!(
        facts
            .split_whitespace()
            .collect::<String>()
            .contains(&price.replace(' ', "")),
        "the price with its currency ({price}): {facts}"
    );
    let neighbours = b
        .exec(
            "return [...document.querySelectorAll('[data-testid=neighbours] li')].map((li) =>
               [li.querySelector('button').textContent, li.querySelector('.key').textContent,
                li.querySelector('.score').textContent]);",
            json!([]),
        )
        .await;
    let expected: Vec<Value> = p["neighbours"]
        .as_array()
        .expect("neighbours")
        .iter()
        .map(|n| {
            json!([
                n["name"],
                n["product_key"],
                format!("score {:.3}", n["score"].as_f64().unwrap())
            ])
        })
        .collect();
    assert!(!expected.is_empty(), "the pair found neighbours");
    assert_eq!(
        neighbours,
        json!(expected),
        "each neighbour's name, key and score"
    );
    the_product_uses_both_columns_names_its_category_and_keeps_keys_whole(b, &p, &facts).await;
    b.exec(
        "document.getElementById('products').scrollIntoView();",
        json!([]),
    )
    .await;
    b.screenshot(&screenshot_path("admin-product")).await;
    click_in_place(b, "[data-testid=product-back]").await;
    let back = b
        .wait_for(
            "the results again, focused on the one the product was opened from",
            "const v = document.querySelector('[data-testid=product-view]');
             const results = [...document.querySelectorAll('[data-testid=product-result] button')];
             return v.hidden && results.length > 0 && results.every((r) => r.offsetParent !== null)
               && document.activeElement.dataset.productKey;",
            json!([]),
        )
        .await;
    assert_eq!(
        back, opened_from,
        "focus returns to the result it was opened from"
    );
}

/// On a wide screen the open product stands beside its results (both columns used); its
/// facts name its category; no product key (its own, a result's, a neighbour's) is broken
/// over two lines.
async fn the_product_uses_both_columns_names_its_category_and_keeps_keys_whole(
    b: &Browser,
    p: &Value,
    facts: &str,
) {
    let layout = b
        .exec(
            "const r = (id) => document.getElementById(id).getBoundingClientRect();
             const [results, view] = [r('product-results'), r('product-view')];
             const keys = [...document.querySelectorAll('#products .key')];
             return [view.left >= results.right - 1, view.top < results.bottom, results.width > 200,
                     keys.length > 0 && keys.every((k) => k.getClientRects().length === 1)];",
            json!([]),
        )
        .await;
    assert_eq!(
        layout,
        json!([true, true, true, true]),
        "beside the results (right of them, overlapping them in height), keys whole"
    );
    let path: Vec<&str> = p["taxonomy_path"]
        .as_array()
        .expect("the demo products have categories")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        facts.contains(&format!("Category{}", path.join(" › ")))
            || facts.contains(&path.join(" › ")),
        "the category, whole: {facts}"
    );
}

async fn a_hostile_product_name_is_shown_as_text(b: &Browser, app: &TestApp, tenant: &str) {
    let r = app
        .client
        .post(app.url(&format!("/catalog/products?tenant_id={tenant}")))
        .json(&json!([{"product_key": "evil-1", "name": HOSTILE, "brand": HOSTILE}]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A key prefix: found by the search, not by a key lookup.
    search_and_open(b, "evil", "evil-1").await;
    b.wait_for(
        "the hostile product opened",
        "return document.querySelector('[data-testid=product-view]').dataset.productKey === 'evil-1';",
        json!([]),
    )
    .await;
    assert_eq!(b.text("#product-name").await, HOSTILE, "the name is text");
    let images = b
        .exec("return document.querySelectorAll('img').length;", json!([]))
        .await;
    assert_eq!(images, 0, "no element was made from the name");
}

async fn every_control_is_labelled(b: &Browser) {
    let unlabelled = b
        .exec(
            "const fields = [...document.querySelectorAll('input, select, textarea')]
               .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
               .map((e) => e.id);
             const buttons = [...document.querySelectorAll('button')]
               .filter((e) => !e.textContent.trim() && !e.getAttribute('aria-label'))
               .map((e) => e.id);
             return fields.concat(buttons);",
            json!([]),
        )
        .await;
    assert_eq!(unlabelled, json!([]), "controls without a label");
}

/// Starts a sync of `source` from the page and waits until its card reads `status`: its id.
async fn start_a_sync_until(b: &Browser, source: &str, status: &str) -> String {
    b.fill("[data-testid=sync-source]", source).await;
    click_in_place(b, "[data-testid=start-sync]").await;
    let card = b
        .wait_for(
            &format!("a sync {status}"),
            "const c = document.querySelector('#live .job-card[data-kind=sync]');
             return c && c.dataset.status === arguments[0] && c.dataset.jobId;",
            json!([status]),
        )
        .await;
    card.as_str().expect("a job id").to_owned()
}

async fn a_failed_sync_shows_its_error_class(b: &Browser, unreachable: &str) -> String {
    let id = start_a_sync_until(b, unreachable, "failed").await;
    row_reads(b, &id, "failed").await;
    b.wait_for(
        "the error class in the row",
        "const r = document.querySelector(`[data-testid=job-row][data-job-id=\"${arguments[0]}\"]`);
         return r.lastElementChild.textContent === 'SourceUnreachable';",
        json!([id]),
    )
    .await;
    id
}

async fn the_jobs_table_filters_by_status_and_kind_and_finds_a_job_by_id(
    b: &Browser,
    failed: &str,
) {
    const VISIBLE: &str = "const rows = [...document.querySelectorAll('[data-testid=job-row]')].filter((r) => !r.hidden);";
    b.exec(
        "const s = document.getElementById('filter-status'); s.value = 'failed'; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    b.wait_for(
        "only the failed job",
        &format!(
            "{VISIBLE} return rows.length === 1 && rows[0].dataset.jobId === arguments[0]
               && rows[0].dataset.status === 'failed';"
        ),
        json!([failed]),
    )
    .await;
    b.exec(
        "const s = document.getElementById('filter-status'); s.value = ''; s.dispatchEvent(new Event('change'));
         const k = document.getElementById('filter-kind'); k.value = 'pair'; k.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    b.wait_for(
        "only pairs",
        &format!(
            "{VISIBLE} return rows.length > 0 && rows.every((r) => r.children[1].textContent === 'pair');"
        ),
        json!([]),
    )
    .await;
    b.exec(
        "const k = document.getElementById('filter-kind'); k.value = ''; k.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    b.fill("[data-testid=find-job]", failed).await;
    click_in_place(b, "#find-form button").await;
    b.wait_for(
        "the job found by its id",
        "const v = document.querySelector('[data-testid=job-view]');
         return !v.hidden && v.dataset.jobId === arguments[0] && v.dataset.status === 'failed'
           && !document.querySelector('[data-testid=retry]').hidden
           && document.querySelector('[data-testid=cancel]').hidden;",
        json!([failed]),
    )
    .await;
}

/// Close (a WebDriver click: the panel keeps it still) hides the job panel, takes `#job=`
/// out of the address and gives the focus back to the field the job was found from.
async fn the_job_panel_closes_and_gives_the_focus_back_to_what_opened_it(b: &Browser) {
    b.click("#close-job").await;
    let focused = b
        .wait_for(
            "the panel closed",
            "return document.querySelector('[data-testid=job-view]').hidden
               && !location.hash.startsWith('#job=') && document.activeElement.id;",
            json!([]),
        )
        .await;
    assert_eq!(
        focused, "find-id",
        "the focus is back where the job was opened from"
    );
}

/// Starts a sync of a held feed (a job that runs until the test releases it) and answers its id.
async fn start_a_long_sync(b: &Browser, feed: &str) -> String {
    start_a_sync_until(b, feed, "running").await
}

async fn a_second_start_shows_already_running_with_a_link_to_the_job(b: &Browser, running: &str) {
    click_in_place(b, "[data-testid=start-sync]").await;
    let link = b
        .wait_for(
            "already running",
            "const e = document.querySelector('[data-testid=error]');
             const a = e.querySelector('[data-testid=error-job]');
             return !e.hidden && e.textContent.includes('already running') && a && a.getAttribute('href');",
            json!([]),
        )
        .await;
    assert_eq!(link, format!("#job={running}"));
}

/// Waits until job `id` is open with its cancel button.
pub async fn open_with_cancel(b: &Browser, id: &str) {
    b.wait_for(
        "the job opened with a cancel button",
        "const v = document.querySelector('[data-testid=job-view]');
         return !v.hidden && v.dataset.jobId === arguments[0]
           && !document.querySelector('[data-testid=cancel]').hidden;",
        json!([id]),
    )
    .await;
}

/// Clicks the open job's Cancel (a WebDriver click: the job panel keeps it still) and waits
/// for the confirmation.
pub async fn press_cancel(b: &Browser) {
    b.click("[data-testid=cancel]").await;
    b.wait_for(
        "the confirmation",
        "return document.getElementById('confirm').open;",
        json!([]),
    )
    .await;
}

/// Once job `id` is open with its cancel button: Cancel, then yes in the confirmation.
pub async fn cancel_the_open_job_through_the_confirmation(b: &Browser, id: &str) {
    open_with_cancel(b, id).await;
    press_cancel(b).await;
    b.click("[data-testid=confirm-yes]").await;
}

async fn a_long_job_is_cancelled_through_the_confirmation(b: &Browser, id: &str) {
    let open = format!("[data-testid=job-row][data-job-id=\"{id}\"] button");
    // The jobs table shows a job started a moment ago at its next refresh.
    b.wait_for(
        "the long job's row",
        "return !!document.querySelector(arguments[0]);",
        json!([open]),
    )
    .await;
    click_in_place(b, &open).await;
    cancel_the_open_job_through_the_confirmation(b, id).await;
    b.wait_for(
        "the job cancelled",
        "const v = document.querySelector('[data-testid=job-view]');
         return v.dataset.status === 'cancelled' && !document.querySelector('[data-testid=retry]').hidden;",
        json!([]),
    )
    .await;
    row_reads(b, id, "cancelled").await;
    b.wait_for(
        "the timeline from created to finished",
        "const types = [...document.querySelectorAll('[data-testid=job-timeline] li')].map((li) => li.dataset.type);
         return types[0] === 'created' && types.includes('cancel_requested') && types[types.length - 1] === 'finished';",
        json!([]),
    )
    .await;
}

async fn a_cancelled_job_is_retried_and_the_new_job_runs_to_done(b: &Browser, old: &str) -> String {
    b.click("[data-testid=retry]").await;
    let id = b
        .wait_for(
            "the new job opened",
            "const v = document.querySelector('[data-testid=job-view]');
             return !v.hidden && v.dataset.jobId !== arguments[0] && v.dataset.jobId;",
            json!([old]),
        )
        .await
        .as_str()
        .expect("a job id")
        .to_owned();
    let facts = b
        .text("#job-snapshot")
        .await
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        facts.contains(&format!("Retry of {old}")),
        "the new job names the old one: {facts}"
    );
    b.wait_for(
        "the retried job done, its bar full",
        "const c = document.querySelector(`.job-card[data-job-id=\"${arguments[0]}\"]`);
         return c && c.dataset.status === 'done'
           && c.querySelector('[data-testid=job-progress]').getAttribute('aria-valuenow') === '100'
           && document.querySelector('[data-testid=job-view]').dataset.status === 'done';",
        json!([id]),
    )
    .await;
    row_reads(b, &id, "done").await;
    id
}

async fn a_phone_wide_window_has_no_horizontal_scroll(b: &Browser) {
    b.set_size(PHONE_WIDTH, 800).await;
    let widths = b
        .wait_for(
            "a phone-wide viewport",
            "return window.innerWidth <= arguments[0] + 20
               ? [window.innerWidth, document.documentElement.scrollWidth] : null;",
            json!([PHONE_WIDTH]),
        )
        .await;
    assert!(
        widths[1].as_u64() <= widths[0].as_u64(),
        "the page is wider than the window: {widths}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_runs_a_tenants_jobs_and_browses_its_products_from_the_admin_page() {
    let feeds = HeldFeeds::start().await;
    // A source that cannot be reached.
    let dead = NOBODY_LISTENS.to_owned();
    let config = Config {
        sync_allowed_hosts: vec![feeds.allowed(), dead.clone()],
        price_currency: Some(CURRENCY.into()),
        ..test_config()
    };
    let app = spawn_catalog_app(Backend::Redis, config).await;
    let tenant = unique("web");
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;

    b.goto(&app.url("/")).await;
    let path = b.exec("return location.pathname;", json!([])).await;
    assert_eq!(path, "/admin", "/ leads to the admin page");
    use_identity(&b, &tenant, "").await;
    every_control_is_labelled(&b).await;

    a_sync_started_from_the_page_fills_its_bar_to_100_and_the_jobs_table_shows_it_done(&b).await;
    pair_and_wait_shows_the_report_inline(&b).await;
    let failed =
        a_failed_sync_shows_its_error_class(&b, &format!("http://{dead}/gone.jsonl")).await;
    the_jobs_table_filters_by_status_and_kind_and_finds_a_job_by_id(&b, &failed).await;
    the_job_panel_closes_and_gives_the_focus_back_to_what_opened_it(&b).await;
    a_search_pages_through_its_results(&b).await;
    a_product_is_found_opened_and_its_neighbour_followed(&b).await;
    a_product_reads_its_price_and_neighbours_and_goes_back_to_its_results(
        &b,
        &app,
        &tenant,
        "fam000001-v1",
        "fam000001-v0",
    )
    .await;
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    b.screenshot(&screenshot_path("admin-desktop")).await;
    a_hostile_product_name_is_shown_as_text(&b, &app, &tenant).await;

    let feed = format!("web-{tenant}");
    let long = start_a_long_sync(&b, &feeds.url(&feed)).await;
    a_second_start_shows_already_running_with_a_link_to_the_job(&b, &long).await;
    a_long_job_is_cancelled_through_the_confirmation(&b, &long).await;
    b.screenshot(&screenshot_path("admin-job-cancelled")).await;
    // The retry reads the same feed, released now: it runs to its end.
    feeds.release(&feed);
    a_cancelled_job_is_retried_and_the_new_job_runs_to_done(&b, &long).await;

    a_phone_wide_window_has_no_horizontal_scroll(&b).await;
    b.exec("window.scrollTo(0, 0);", json!([])).await;
    b.screenshot(&screenshot_path("admin-phone")).await;
    the_console_shows_only_the_refusals_the_walk_asked_for(&b).await;
}

/// The page's console over the whole walk: no script error, no CSP refusal, no failed load
/// (a missing /favicon.ico was one), only the API's 4xx answers the walk provoked on purpose
/// (the 409 of a second start, the failed sync's), which Chromium logs as failed loads.
async fn the_console_shows_only_the_refusals_the_walk_asked_for(b: &Browser) {
    let unexpected: Vec<String> = b
        .console_errors()
        .await
        .into_iter()
        .filter(|m| !(m.contains("/catalog/") && m.contains("status of 4")))
        .collect();
    assert!(unexpected.is_empty(), "console errors: {unexpected:#?}");
}

/// The message the page's error banner shows, once it shows one.
async fn the_error_shown(b: &Browser, what: &str) -> String {
    let shown = b
        .wait_for(
            what,
            "const e = document.querySelector('[data-testid=error]');
             return !e.hidden && e.textContent;",
            json!([]),
        )
        .await;
    shown.as_str().expect("the banner's text").to_owned()
}

async fn with_its_token_a_sync_runs_to_done_and_no_error_shows(
    b: &Browser,
    tenant: &str,
    token: &str,
) -> String {
    use_identity(b, tenant, token).await;
    b.fill("[data-testid=sync-source]", "sample.csv").await;
    click_in_place(b, "[data-testid=start-sync]").await;
    let id = card_reads(b, "sync", "done").await;
    row_reads(b, &id, "done").await;
    let error: Value = b
        .exec(
            "return document.querySelector('[data-testid=error]').hidden;",
            json!([]),
        )
        .await;
    assert_eq!(error, true, "no error shows once the token is given");
    id
}

/// Where the event stream fails, the card polls the job instead, to the same end.
async fn without_the_event_stream_the_card_polls_its_job_to_done(b: &Browser, earlier: &str) {
    b.exec(
        "const plain = window.fetch;
         window.fetch = (url, init) => init && init.headers && init.headers.Accept === 'text/event-stream'
           ? Promise.reject(new TypeError('streams blocked by the test'))
           : plain(url, init);",
        json!([]),
    )
    .await;
    click_in_place(b, "[data-testid=start-sync]").await;
    let polled = b
        .wait_for(
            "a polled sync done",
            "const c = document.querySelector('#live .job-card[data-kind=sync]');
             return c && c.dataset.jobId !== arguments[0] && c.dataset.status === 'done'
               && c.querySelector('[data-testid=job-progress]').getAttribute('aria-valuenow') === '100'
               && c.dataset.follow;",
            json!([earlier]),
        )
        .await;
    assert_eq!(polled, "poll", "the card fell back to polling");
}

/// A service whose store cannot be reached: the page shows the 503's message.
async fn a_service_without_its_store_shows_the_503s_message(b: &Browser, tenant: &str) {
    let down = spawn_app_with(
        test_config(),
        Arc::new(RedisStore::open(&dead_redis_url(), settings()).unwrap()),
    )
    .await;
    let refusal: Value = down
        .get_json(&format!("/catalog/jobs?tenant_id={tenant}"))
        .await;
    let message = refusal["message"].as_str().expect("a message").to_owned();
    b.goto(&down.url("/admin")).await;
    use_identity(b, tenant, "").await;
    let shown = the_error_shown(b, "the 503's message").await;
    assert!(shown.contains(&message), "{shown} should carry {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_401_without_a_token_and_a_503_without_a_store_and_works_with_a_token() {
    let tenant = unique("web");
    let token = format!("{tenant}-secret");
    let config = Config {
        api_tokens: Some(format!("{tenant} web-bot {}", hash_token(&token))),
        ..test_config()
    };
    let app = spawn_catalog_app(Backend::Redis, config).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;

    use_identity(&b, &tenant, "").await;
    let shown = the_error_shown(&b, "the 401's message").await;
    assert!(
        shown.contains("paste yours in the Token field"),
        "the page says what to do in its own terms: {shown}"
    );
    assert!(
        !shown.contains("Authorization"),
        "no HTTP header named: {shown}"
    );
    let id = with_its_token_a_sync_runs_to_done_and_no_error_shows(&b, &tenant, &token).await;
    without_the_event_stream_the_card_polls_its_job_to_done(&b, &id).await;
    a_service_without_its_store_shows_the_503s_message(&b, &tenant).await;
}
