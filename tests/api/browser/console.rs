//! The operator's console in a real browser: the jobs table clicked like a mouse while jobs
//! stream progress, the caption while it streams, a long sync's timeline read as lines, the
//! deep link to a job, and a read-only token that is shown no control it may not use (no
//! start, cancel, retry or bulk action).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Path;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use serde_json::{json, Value};

use super::{click_in_place, screenshot_path, use_identity, DESKTOP};
use crate::helpers::webdriver::Browser;
use crate::helpers::{
    serve, settings, spawn_app, spawn_app_with, spawn_catalog_app, store, test_config, unique,
    Backend,
};

/// How long a person holds the button down in a click.
const HOLD: Duration = Duration::from_millis(150);
/// Clicks on a running job's link, each of which must open the job.
const CLICKS: usize = 10;
/// Jobs that stream progress while the links are clicked (one tenant each: a tenant runs
/// one job of a kind at a time).
const STREAMING: usize = 4;
/// Ticks of each streaming job: at 2 ms a tick about 40 s, longer than the clicks take.
const TICKS: &str = "20000";
/// The long sync: its sources, each streamed over this long.
const LONG_SOURCES: usize = 3;
const SOURCE_SECONDS: u64 = 20;
/// Rows of each long source: three batches of the sync's 500, so its percent moves.
const SOURCE_ROWS: usize = 1500;
/// A timeline a person can read: fewer lines than this for a minute's sync.
const READABLE_LINES: u64 = 20;

/// The test feed server's route: a JSON Lines feed of `SOURCE_ROWS` rows sent in even parts
/// over `SOURCE_SECONDS`, with its length declared, so a sync of it shows progress by bytes.
async fn slow_feed(Path(name): Path<String>) -> impl IntoResponse {
    let rows: Vec<String> = (0..SOURCE_ROWS)
        .map(|i| {
            format!("{{\"product_key\":\"{name}-{i:05}\",\"name\":\"Slow Product {i} Blue\"}}\n")
        })
        .collect();
    let length: usize = rows.iter().map(String::len).sum();
    let parts = SOURCE_SECONDS as usize;
    let per_part = SOURCE_ROWS.div_ceil(parts);
    let chunks: Vec<String> = rows.chunks(per_part).map(|c| c.concat()).collect();
    let stream = futures_util::stream::unfold((0usize, chunks), |(i, chunks)| async move {
        let chunk = chunks.get(i)?.clone();
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Some((Ok::<_, std::io::Error>(chunk), (i + 1, chunks)))
    });
    (
        [(header::CONTENT_LENGTH, length.to_string())],
        Body::from_stream(stream),
    )
}

/// The rows of the jobs table that follow their job's own stream, with their percent.
async fn streaming_rows(b: &Browser, ids: &[String]) -> Value {
    b.wait_for(
        "every running job's row following its stream",
        "const rows = arguments[0].map((id) => document.querySelector(`[data-testid=job-row][data-job-id=\"${id}\"]`));
         return rows.every((r) => r && r.dataset.follow === 'stream' && r.dataset.status === 'running')
           && rows.map((r) => Number(r.children[4].textContent));",
        json!([ids]),
    )
    .await
}

/// Clicks `id`'s link in the table as a mouse does; answers whether the job opened.
async fn click_opens(b: &Browser, id: &str) -> bool {
    b.exec(
        "document.getElementById('job-view').hidden = true; document.getElementById('job-view').dataset.jobId = '';",
        json!([]),
    )
    .await;
    let css = format!("[data-testid=job-row][data-job-id=\"{id}\"] td.id button");
    if !b.press_and_release(&css, HOLD).await {
        return false; // the link was replaced before the pointer reached it
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let opened = b
            .exec(
                "const v = document.getElementById('job-view'); return !v.hidden && v.dataset.jobId === arguments[0];",
                json!([id]),
            )
            .await;
        if opened == true {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_link_opens_on_a_mouse_click_10_times_in_10_while_4_jobs_stream_progress() {
    let app = spawn_app(Backend::Redis).await;
    let mut ids = Vec::new();
    for _ in 0..STREAMING {
        let tenant = unique("click");
        ids.push(
            app.start_id(
                "ticker",
                &[("tenant_id", &tenant), ("n", TICKS), ("slow", "true")],
            )
            .await,
        );
    }
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    // No tenant picked: an operator's view of every tenant's jobs.
    b.goto(&app.url("/admin")).await;
    let before = streaming_rows(&b, &ids).await;
    let mut opened = 0;
    for i in 0..CLICKS {
        if click_opens(&b, &ids[i % STREAMING]).await {
            opened += 1;
        }
    }
    let after = streaming_rows(&b, &ids).await;
    assert_eq!(
        opened, CLICKS,
        "every mouse click on a running job's link opens it"
    );
    let wrapped = b
        .exec(
            "const lines = (td) => {
               const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
               const r = document.createRange();
               let most = 0;
               for (let n = walk.nextNode(); n; n = walk.nextNode()) {
                 r.selectNodeContents(n);
                 most = Math.max(most, new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size);
               }
               return most; };
             return [...document.querySelectorAll('[data-testid=job-row] td')]
               .filter((td) => td.textContent && lines(td) > 1).map((td) => td.textContent);",
            json!([]),
        )
        .await;
    assert_eq!(
        wrapped,
        json!([]),
        "every row is one line, so a growing cell never moves a link from under the pointer"
    );
    let moved = (0..STREAMING)
        .filter(|&i| after[i].as_f64() > before[i].as_f64())
        .count();
    assert!(
        moved >= STREAMING - 1,
        "the jobs streamed progress meanwhile: {before} then {after}"
    );
    the_table_redraws_a_few_times_a_second_and_tells_time_one_way(&b).await;
}

/// How long the table's redraws are counted.
const WATCHED: Duration = Duration::from_secs(3);
/// Redraws a second at most: the coalesced redraw (4 a second) and the clock's tick (1).
const REDRAWS_PER_SECOND: u64 = 6;

/// While jobs stream (each tells ~20 ticks a second), the rows change in at most a few
/// batches a second (a MutationObserver reports each batch once); and each row's start reads
/// as relative time, with its exact UTC time on hover.
async fn the_table_redraws_a_few_times_a_second_and_tells_time_one_way(b: &Browser) {
    b.exec(
        "window.redraws = 0;
         new MutationObserver(() => { window.redraws += 1; })
           .observe(document.getElementById('jobs-body'), { subtree: true, childList: true, characterData: true });",
        json!([]),
    )
    .await;
    // Nothing signals "3 s of streaming have passed": the count is over a stretch of time.
    tokio::time::sleep(WATCHED).await;
    let redraws = b.exec("return window.redraws;", json!([])).await;
    let most = REDRAWS_PER_SECOND * WATCHED.as_secs();
    assert!(
        redraws.as_u64().is_some_and(|n| n > 0 && n <= most),
        "at most {most} redraws in {WATCHED:?} while 4 jobs stream: {redraws}"
    );
    let times = b
        .exec(
            "return [...document.querySelectorAll('[data-testid=job-row] time.rel')].filter((t) => t.dateTime)
               .map((t) => [t.textContent, t.title]);",
            json!([]),
        )
        .await;
    let times = times.as_array().expect("the rows' start times");
    assert!(!times.is_empty());
    for t in times {
        let (text, utc) = (t[0].as_str().unwrap(), t[1].as_str().unwrap());
        assert!(
            (text.ends_with(" ago") || text == "just now") && utc.ends_with(" UTC"),
            "relative, exact UTC on hover: {t}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caption_says_the_table_is_live_while_it_streams_even_after_use_is_pressed_twice() {
    let app = spawn_app(Backend::Redis).await;
    let tenant = unique("caption");
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;
    // Pressed again at once: the first follower is dropped while it still loads.
    b.click("#use").await;
    let id = app
        .start_id("ticker", &[("tenant_id", &tenant), ("n", "5")])
        .await;
    b.wait_for(
        "the new job's row done, from the stream",
        "const r = document.querySelector(`[data-testid=job-row][data-job-id=\"${arguments[0]}\"]`);
         return r && r.dataset.status === 'done' && document.getElementById('jobs-table').dataset.follow === 'stream';",
        json!([id]),
    )
    .await;
    // Longer than the dropped follower's poll would take to write its caption.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let caption = b.text("#jobs-live").await;
    assert_eq!(
        caption, "Updated live",
        "the caption says what the table does"
    );
}

/// Opens the running sync from its row and waits (past the usual bound) for it to end.
async fn follow_the_long_sync_to_done(b: &Browser, id: &str) {
    click_in_place(
        b,
        &format!("[data-testid=job-row][data-job-id=\"{id}\"] td.id button"),
    )
    .await;
    let limit = Duration::from_secs(SOURCE_SECONDS * LONG_SOURCES as u64 * 3);
    b.wait_until(
        "the long sync done in the job view",
        "const v = document.querySelector('[data-testid=job-view]');
         return v.dataset.jobId === arguments[0] && v.dataset.status === 'done'
           && [...document.querySelectorAll('[data-testid=timeline-line]')].some((l) => l.dataset.type === 'finished');",
        json!([id]),
        limit,
    )
    .await;
}

/// The job view's timeline lines (`type`, `text`, `utc`) of the long sync of `sources`: fewer
/// than `READABLE_LINES`, created first and finished last, one line per step that reads
/// "from → to % in time", each with its exact UTC time.
fn the_timeline_reads_one_line_per_step(lines: &Value, sources: &[String]) {
    let lines = lines.as_array().expect("the lines");
    assert!(
        (lines.len() as u64) < READABLE_LINES,
        "a minute's sync reads in fewer than {READABLE_LINES} lines: {lines:#?}"
    );
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"created"), "{types:?}");
    assert!(types.contains(&"started"), "{types:?}");
    assert_eq!(types.last(), Some(&"finished"), "{types:?}");
    let progress: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "progress")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    for (i, source) in sources.iter().enumerate() {
        let step = format!("syncing {source} ({} of {LONG_SOURCES})", i + 1);
        let of_step: Vec<_> = progress.iter().filter(|t| t.contains(&step)).collect();
        assert_eq!(of_step.len(), 1, "one line for {step}: {progress:#?}");
        assert!(
            of_step[0].contains(" → ") && of_step[0].contains(" % in "),
            "a step's line reads from → to % in time: {}",
            of_step[0]
        );
    }
    assert!(
        lines
            .iter()
            .all(|l| l["utc"].as_str().is_some_and(|t| t.ends_with(" UTC"))),
        "every line has its exact UTC time: {lines:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_long_syncs_timeline_reads_in_fewer_than_20_lines_one_per_step_and_its_link_reopens_it(
) {
    let router = axum::Router::new().route("/slow/{name}", get(slow_feed));
    let feeds = serve(router).await;
    let config = Config {
        sync_allowed_hosts: vec![feeds.to_string()],
        ..test_config()
    };
    let app = spawn_catalog_app(Backend::Redis, config).await;
    let tenant = unique("long");
    let sources: Vec<String> = (0..LONG_SOURCES)
        .map(|i| format!("http://{feeds}/slow/big{i}.jsonl"))
        .collect();
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;
    b.fill("[data-testid=sync-source]", &sources.join("\n"))
        .await;
    click_in_place(&b, "[data-testid=start-sync]").await;
    let id = b
        .wait_for(
            "the long sync's row",
            "const r = document.querySelector('[data-testid=job-row]'); return r && r.dataset.jobId;",
            json!([]),
        )
        .await
        .as_str()
        .expect("a job id")
        .to_owned();
    follow_the_long_sync_to_done(&b, &id).await;
    let lines = b
        .exec(
            "return [...document.querySelectorAll('[data-testid=timeline-line]')].map((l) => ({
               type: l.dataset.type, text: l.textContent, utc: l.querySelector('time').title }));",
            json!([]),
        )
        .await;
    the_timeline_reads_one_line_per_step(&lines, &sources);
    let chart = b
        .exec(
            "const c = document.querySelector('[data-testid=percent-chart] polyline'); return c && c.getAttribute('points').split(' ').length;",
            json!([]),
        )
        .await;
    assert!(
        chart.as_u64() >= Some(3),
        "a chart of percent over time: {chart}"
    );
    b.exec(
        // The panel scrolls on its own: its timeline, with the chart, into its view.
        "document.getElementById('job-chart').previousElementSibling.scrollIntoView();",
        json!([]),
    )
    .await;
    b.screenshot(&screenshot_path("admin-job")).await;

    // The job's address opens it again after a reload, the timeline with it.
    b.goto(&app.url(&format!("/admin#job={id}"))).await;
    b.wait_for(
        "the job reopened from its address",
        "const v = document.querySelector('[data-testid=job-view]');
         return !v.hidden && v.dataset.jobId === arguments[0]
           && document.querySelectorAll('[data-testid=timeline-line]').length > 2;",
        json!([id]),
    )
    .await;
}

/// The overview is shown, each of its figures a number.
async fn the_overview_shows_its_figures(b: &Browser) {
    b.wait_for(
        "the overview, with its figures",
        "const o = document.querySelector('[data-testid=overview]');
         const counts = [...document.querySelectorAll('[data-testid=overview-count]')];
         return o && o.getClientRects().length > 0 && !o.closest('[hidden]') && counts.length > 0
           && counts.every((c) => /^[0-9]+$/.test(c.textContent.trim()));",
        json!([]),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_is_shown_no_start_cancel_retry_or_bulk_control() {
    let viewer = "viewer-secret-token";
    let ops = "ops-secret-token";
    let config = Config {
        api_tokens: Some(format!(
            "read:* viewer {};* ops {}",
            hash_token(viewer),
            hash_token(ops)
        )),
        ..test_config()
    };
    let app = spawn_app_with(config, store(Backend::Redis, settings())).await;
    let tenant = unique("ro");
    let id = app
        .client
        .post(app.url("/catalog/ticker"))
        .bearer_auth(ops)
        .form(&[("tenant_id", tenant.as_str()), ("n", "3")])
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["job_id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, "", viewer).await;
    b.wait_for(
        "the start controls hidden",
        "return document.getElementById('start-card').hidden;",
        json!([]),
    )
    .await;
    the_overview_shows_its_figures(&b).await;
    // The job is listed, without a box to select it, and no bulk action is offered.
    let bulk = b
        .wait_for(
            "the job's row, without bulk controls",
            "const r = document.querySelector(`[data-testid=job-row][data-job-id=\"${arguments[0]}\"]`);
             const shown = (e) => Boolean(e && e.getClientRects().length && !e.closest('[hidden]'));
             return r && [Boolean(r.querySelector('[data-testid=job-select]')),
                          shown(r.querySelector('[data-testid=job-select]')),
                          shown(document.querySelector('[data-testid=job-select-all]')),
                          shown(document.querySelector('[data-testid=bulk-retry]')),
                          shown(document.querySelector('[data-testid=bulk-cancel]')),
                          shown(document.querySelector('[data-testid=bulk-retry-all]')),
                          shown(document.querySelector('[data-testid=bulk-cancel-tenant]'))];",
            json!([id]),
        )
        .await;
    assert_eq!(
        bulk,
        json!([true, false, false, false, false, false, false]),
        "the row's box exists but is not shown, and no bulk action is"
    );
    b.goto(&app.url(&format!("/admin#job={id}"))).await;
    let controls = b
        .wait_for(
            "the ended job opened, without retry or cancel",
            "const v = document.querySelector('[data-testid=job-view]');
             return !v.hidden && v.dataset.jobId === arguments[0] && v.dataset.status === 'done'
               && [document.querySelector('[data-testid=retry]').hidden,
                   document.querySelector('[data-testid=cancel]').hidden,
                   document.getElementById('start-card').hidden];",
            json!([id]),
        )
        .await;
    assert_eq!(controls, json!([true, true, true]), "retry, cancel, starts");
}

/// Every control a person can use, and whether Tab reached each (by id or test hook).
const TAB_REACHES: &str = "
  const visible = (e) => e.offsetParent !== null && !e.disabled && !e.closest('[hidden]');
  const name = (e) => e.id || e.dataset.testid || e.textContent.trim();
  return [...document.querySelectorAll('button, input, select, textarea, a[href]')].filter(visible).map(name);";

/// Presses Tab `presses` times: the controls focused (by id, test hook or text) and the
/// outline style each focused control showed.
async fn tab_through(b: &Browser, presses: usize) -> (BTreeSet<String>, Vec<String>) {
    let mut reached = BTreeSet::new();
    let mut outlines = Vec::new();
    for _ in 0..presses {
        b.press_key("\u{E004}").await;
        let focused = b
            .exec(
                "const e = document.activeElement;
                 return e === document.body ? ['', 'body']
                   : [e.id || e.dataset.testid || e.textContent.trim(), getComputedStyle(e).outlineStyle];",
                json!([]),
            )
            .await;
        reached.insert(focused[0].as_str().unwrap_or_default().to_owned());
        let outline = focused[1].as_str().unwrap_or_default();
        if outline != "body" {
            outlines.push(outline.to_owned());
        }
    }
    (reached, outlines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tab_reaches_every_control_with_a_visible_focus_the_tenant_rule_is_the_servers_and_dark_mode_follows_the_system(
) {
    let app = spawn_app(Backend::Redis).await;
    let tenant = unique("keys");
    let id = app
        .start_id("ticker", &[("tenant_id", &tenant), ("n", "3")])
        .await;
    app.wait_for_status(&id, "done").await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, &tenant, "").await;
    b.wait_for(
        "the job's row",
        "return document.querySelector(`[data-testid=job-row][data-job-id=\"${arguments[0]}\"]`);",
        json!([id]),
    )
    .await;
    let controls = b.exec(TAB_REACHES, json!([])).await;
    let controls: Vec<String> = serde_json::from_value(controls).unwrap();
    b.exec(
        "document.activeElement.blur(); window.scrollTo(0, 0);",
        json!([]),
    )
    .await;
    let (reached, outlines) = tab_through(&b, controls.len() + 5).await;
    let missed: Vec<_> = controls.iter().filter(|c| !reached.contains(*c)).collect();
    assert!(missed.is_empty(), "Tab never reached {missed:?}");
    assert!(
        outlines.iter().all(|o| o != "none"),
        "every focused control shows its focus: {outlines:?}"
    );

    let doc = app.get_json("/openapi.json").await;
    let rule = doc["components"]["schemas"]["TenantId"]["description"]
        .as_str()
        .expect("the service states its tenant rule")
        .replace('`', "");
    let help = b.text("#tenant-help").await;
    assert!(
        help.starts_with(&rule),
        "the page shows the service's rule: {help}"
    );

    b.prefer_color_scheme("dark").await;
    let background = b
        .exec(
            "return getComputedStyle(document.documentElement).backgroundColor;",
            json!([]),
        )
        .await;
    let rgb: Vec<u32> = background
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    assert!(
        rgb.len() == 3 && rgb.iter().all(|c| *c < 64),
        "a dark system setting makes a dark page: {background}"
    );
    b.screenshot(&screenshot_path("admin-dark")).await;
}
