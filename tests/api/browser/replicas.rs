//! The overview in a real browser against two replicas of the real binary on one Redis:
//! after a scripted mix of done, failed and cancelled syncs with one held running, the page
//! lists both processes, the held sync under the one that runs it, with figures equal to the
//! jobs API's; its process rows are updated in place across reads (a button under the
//! pointer is never replaced); and a `kill -9`ed replica leaves the page's list. With a long
//! staleness window, a killed replica stays listed meanwhile, marked not answering since its
//! last heartbeat. With Redis stopped, the overview stays, its last figures dimmed and its
//! heading saying since when it is not current, and reads again once Redis is back.

use std::time::Duration;

use serde_json::{json, Value};

use super::{screenshot_path, DESKTOP};
use crate::helpers::webdriver::Browser;
use crate::helpers::{a_scripted_mix, both_agree, pid_of, stats_of};
use crate::helpers::{RedisServer, Replicas, Service};

/// The page reads the overview every 5 s; a killed replica leaves the store's list within its
/// staleness window (1.5 s): together well within this.
const LEAVES_WITHIN: Duration = Duration::from_secs(20);

/// The figure the page shows for sync jobs of `status` in `window`.
async fn sync_figure(b: &Browser, window: &str, status: &str) -> Value {
    let css = format!(
        "[data-testid=overview-count][data-window=\"{window}\"][data-kind=sync][data-status=\"{status}\"]"
    );
    json!(b.text(&css).await.parse::<u64>().expect("a number"))
}

/// Waits until the page has read the overview again twice since now.
async fn two_more_reads(b: &Browser) {
    let first = b
        .exec(
            "return document.getElementById('overview').dataset.readAt;",
            json!([]),
        )
        .await;
    let mut seen = vec![first];
    while seen.len() < 3 {
        let at = b
            .wait_for(
                "another read of the overview",
                "const at = document.getElementById('overview').dataset.readAt;
                 return at !== arguments[0] && at;",
                json!([seen.last()]),
            )
            .await;
        seen.push(at);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_page_lists_both_replicas_agrees_with_the_jobs_api_and_updates_rows_in_place()
{
    let Replicas {
        redis,
        feeds,
        a,
        b,
        dead,
    } = Replicas::start().await;
    // The held sync reads a feed that never ends (a held one would time out after the sync's
    // 30 s read timeout, and a loaded machine can take that long to get here).
    let never_ends = feeds.trickle_url("held");
    let (ended, held) = a_scripted_mix(&a, &b, &feeds, dead, never_ends).await;
    let runner = pid_of(&b.get_job(&held).await["worker"]);
    both_agree(&a, &b, &ended, &held, runner).await;
    let stats = stats_of(&a).await;
    let workers: Vec<Value> = stats["processes"]
        .as_array()
        .expect("a process list")
        .iter()
        .map(|p| p["worker"].clone())
        .collect();
    let runs_it = workers
        .iter()
        .find(|w| pid_of(w) == runner)
        .expect("the runner is listed")
        .clone();

    // The page is served by the replica that runs the held sync; the other is killed later.
    let (mut victim, survivor) = if runner == a.pid() { (b, a) } else { (a, b) };
    let page = Browser::start(DESKTOP.0, DESKTOP.1).await;
    page.goto(&survivor.url("/admin")).await;
    page.wait_for(
        "both processes, the held sync under its runner",
        "const rows = [...document.querySelectorAll('[data-testid=process-row]')];
         const runner = rows.find((r) => r.dataset.worker === arguments[1]);
         return rows.length === 2 && arguments[0].every((w) => rows.some((r) => r.dataset.worker === w))
           && runner && runner.querySelector(`li[data-job-id=\"${arguments[2]}\"] button`);",
        json!([workers, runs_it, held]),
    )
    .await;
    let hour = &stats["finished"]["last_hour"]["by_kind"]["sync"];
    for status in ["done", "failed", "cancelled"] {
        assert_eq!(
            sync_figure(&page, "1h", status).await,
            hour[status],
            "sync {status} in the last hour, as the service and the jobs API say"
        );
    }
    assert_eq!(sync_figure(&page, "active", "running").await, json!(1));

    the_held_button_is_kept_across_reads(&page, &runs_it, &held).await;

    // kill -9 the replica that does not run the held sync: it leaves the page's list.
    let gone = workers
        .iter()
        .find(|w| pid_of(w) == victim.pid())
        .expect("the victim is listed")
        .clone();
    victim.kill9();
    page.wait_until(
        "the killed replica left the page's list",
        "const rows = [...document.querySelectorAll('[data-testid=process-row]')];
         return rows.length === 1 && !rows.some((r) => r.dataset.worker === arguments[0]);",
        json!([gone]),
        LEAVES_WITHIN,
    )
    .await;
    let kept = page
        .exec("return window.heldButton.isConnected;", json!([]))
        .await;
    assert_eq!(kept, true, "the survivor's row was kept");
    assert_eq!(survivor.cancel(&held).await.status(), 202);
    survivor.poll_until_ended(&held).await;
    drop(redis);
}

/// The held sync's button is kept across two reads of the overview: rows change their text,
/// not themselves. Leaves it in `window.heldButton`.
async fn the_held_button_is_kept_across_reads(page: &Browser, runs_it: &Value, held: &str) {
    page.exec(
        "window.heldButton = document.querySelector(`[data-testid=process-row][data-worker=\"${arguments[0]}\"] li[data-job-id=\"${arguments[1]}\"] button`);",
        json!([runs_it, held]),
    )
    .await;
    two_more_reads(page).await;
    let kept = page
        .exec(
            "return window.heldButton.isConnected && window.heldButton === document.querySelector(`[data-testid=process-row][data-worker=\"${arguments[0]}\"] li[data-job-id=\"${arguments[1]}\"] button`);",
            json!([runs_it, held]),
        )
        .await;
    assert_eq!(kept, true, "the same button after two reads");
}

/// A process's entry stays this long after its last heartbeat here: the killed replica is
/// listed through many of the page's reads (every 5 s).
const LONG_STALE: &str = "120";

/// A killed replica, still listed within its staleness window, is marked in its row as not
/// answering since its last heartbeat's time; the live one is not. (Before, its row read
/// as the live one's but for "last heartbeat 40 s ago", nothing saying how old is too old.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_is_marked_not_answering_until_it_leaves_the_list() {
    let redis = RedisServer::start(false);
    let launch = || Service::on(&redis).env("STALE_AFTER_SECONDS", LONG_STALE);
    let survivor = launch().start().await;
    let mut victim = launch().start().await;
    let page = Browser::start(DESKTOP.0, DESKTOP.1).await;
    page.goto(&survivor.url("/admin")).await;
    let rows = "const rows = [...document.querySelectorAll('[data-testid=process-row]')];
        const row = (pid) => rows.find((r) => r.dataset.worker.endsWith(`/${pid}`));";
    page.wait_for(
        "both processes answering",
        &format!(
            "{rows} return rows.length === 2 && [arguments[0], arguments[1]]
               .every((pid) => row(pid) && row(pid).dataset.answering === 'true');"
        ),
        json!([survivor.pid(), victim.pid()]),
    )
    .await;
    let victim_pid = victim.pid();
    victim.kill9();
    let words = page
        .wait_until(
            "the killed replica marked, still listed",
            &format!(
                "{rows} const r = row(arguments[0]); const silent = r && r.querySelector('[data-testid=process-silent]');
                 return rows.length === 2 && r.dataset.answering === 'false' && silent.checkVisibility()
                   && silent.textContent;"
            ),
            json!([victim_pid]),
            LEAVES_WITHIN,
        )
        .await;
    page.screenshot(&screenshot_path("admin-replica-not-answering"))
        .await;
    let words = words.as_str().expect("the row's words");
    assert!(
        words.starts_with("not answering since ") && words.ends_with(" UTC"),
        "{words}"
    );
    let caption = page.text("#processes-help").await;
    assert!(
        caption.starts_with("A process beats every 0.2 s; it reads \"not answering\" once its last heartbeat is 0.6 s old"),
        "the caption states the interval and the windows: {caption}"
    );
    let stats = stats_of(&survivor).await;
    let dead = stats["processes"]
        .as_array()
        .expect("a process list")
        .iter()
        .find(|p| pid_of(&p["worker"]) == victim_pid)
        .expect("the killed replica is still listed");
    let beat = dead["heartbeat_at"].as_str().expect("its last beat");
    assert_eq!(
        &words["not answering since ".len()..],
        format!("{} UTC", &beat[11..19]),
        "since its last heartbeat"
    );
    drop(redis);
}

/// Redis stopped under a page: the overview stays in place (its last figures, dimmed, its
/// heading saying the reads fail and as of when the figures are), and once Redis is back it
/// reads again on its own. (Before, the first failed read hid the overview and stopped its
/// reads: it was gone until a reload, the page shorter by its height.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_says_it_is_not_current_while_redis_is_down_and_comes_back_with_it() {
    let mut redis = RedisServer::start(false);
    let svc = Service::on(&redis).start().await;
    let page = Browser::start(DESKTOP.0, DESKTOP.1).await;
    page.goto(&svc.url("/admin")).await;
    let read_at = page
        .wait_for(
            "the overview read",
            "return document.getElementById('overview').dataset.readAt;",
            json!([]),
        )
        .await;
    redis.stop();
    let words = page
        .wait_until(
            "the overview kept, saying it is not current",
            "const o = document.getElementById('overview');
             const s = document.querySelector('[data-testid=overview-state]');
             return !o.hidden && o.checkVisibility() && o.dataset.stale === 'true' && s.textContent;",
            json!([]),
            LEAVES_WITHIN,
        )
        .await;
    let words = words.as_str().expect("the heading's words");
    assert!(words.starts_with("not current: "), "{words}");
    assert!(words.contains("; figures as of "), "{words}");
    let kept = page
        .exec(
            "return document.getElementById('overview').dataset.readAt === arguments[0]
               && document.querySelectorAll('[data-testid=process-row]').length;",
            json!([read_at]),
        )
        .await;
    assert_eq!(kept, json!(1), "the last figures and the process are kept");
    page.screenshot(&screenshot_path("admin-overview-store-down"))
        .await;
    redis.restart(true);
    page.wait_until(
        "the overview current again",
        "const o = document.getElementById('overview');
         return !o.hidden && !o.dataset.stale && o.dataset.readAt !== arguments[0]
           && document.querySelector('[data-testid=overview-state]').textContent === '';",
        json!([read_at]),
        LEAVES_WITHIN,
    )
    .await;
}
