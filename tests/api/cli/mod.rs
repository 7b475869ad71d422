//! The CLI end to end: the built binary's client subcommands against a running service (the
//! same binary, spawned), each exit code, `--json` parsed, plain output for scripts, the
//! progress bar in a pseudo-terminal, and Ctrl-C leaving the job running; `refresh` (a
//! pipeline, one bar per step) in refresh.rs.

mod commands;
mod refresh;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{
    assert_plain, cli, code, free_port, in_a_terminal, serve, service_reading_held_feeds,
    service_with_an_unreachable_feed, stderr, stdout, submit_a_demo_sync, unique, HeldFeeds,
    Service, BIN,
};

#[tokio::test]
async fn submit_prints_the_job_id_and_wait_follows_it_to_a_json_report_with_exit_0() {
    let svc = Service::embedded().start().await;
    let tenant = unique("cli");
    let o = cli(&svc.base(), &submit_a_demo_sync(&tenant)).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let id = stdout(&o).trim().to_owned();
    let job = svc.wait_for_status(&id, "done").await;
    assert_eq!(job["tenant_id"], tenant.as_str(), "stdout is just the id");

    let o = cli(
        &svc.base(),
        &["submit", "enrich", "--tenant", &tenant, "--wait", "--json"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report: Value =
        serde_json::from_str(stdout(&o).trim()).expect("--json prints one JSON object");
    assert_eq!(report["status"], "done");
    assert_eq!(report["kind"], "enrich");
    assert_eq!(report["result"]["products"], 2400);
    assert_plain(&stdout(&o));
    assert_plain(&stderr(&o));
    assert!(
        stderr(&o).contains("enrich done 100%"),
        "plain progress lines: {}",
        stderr(&o)
    );

    let o = cli(&svc.base(), &["jobs", "--tenant", &tenant, "--limit", "5"]).await;
    assert_eq!(code(&o), 0);
    let table = stdout(&o);
    assert!(
        table.starts_with("JOB ID"),
        "a table with a header: {table}"
    );
    assert!(table.contains(&id) && table.contains("enrich"));
    assert_eq!(table.lines().count(), 3, "header and two jobs: {table}");
    let o = cli(&svc.base(), &["jobs", "--tenant", &tenant, "--json"]).await;
    let listing: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(listing.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_job_that_fails_exits_1_and_says_its_error_class() {
    // The only source cannot be read, so the sync fails.
    let (svc, source) = service_with_an_unreachable_feed().await;
    let o = cli(
        &svc.base(),
        &[
            "submit",
            "sync",
            "--tenant",
            &unique("cli"),
            "--source",
            &source,
            "--wait",
        ],
    )
    .await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("failed (SourceUnreachable)"),
        "{}",
        stdout(&o)
    );
}

#[tokio::test]
async fn an_active_job_exits_3_with_its_id_and_attach_follows_it_to_the_end() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let tenant = unique("cli");
    let held = feeds.url("attach");
    let id = svc.start_sync(&tenant, &held).await;
    let o = cli(
        &svc.base(),
        &["submit", "sync", "--tenant", &tenant, "--source", &held],
    )
    .await;
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), id, "the running job's id is printed");

    let attach = [
        "submit", "sync", "--tenant", &tenant, "--source", &held, "--attach", "--json",
    ];
    let o = attached(svc.base(), &attach, || feeds.release("attach")).await;
    assert_eq!(code(&o), 0);
    let report: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(report["job_id"], id.as_str(), "it followed the running job");
    assert_eq!(report["status"], "done");
}

#[tokio::test]
async fn cancel_stops_an_active_job_and_watching_it_then_exits_1() {
    let feeds = HeldFeeds::start().await;
    // One worker, held by a first job: the second waits in the queue, and a cancel ends it at
    // once, whatever the held feed does.
    let svc = Service::embedded()
        .env("HEARTBEAT_SECONDS", "0.1")
        .env("MAX_CONCURRENT_JOBS", "1")
        .reading(&feeds)
        .start()
        .await;
    let busy = svc.start_sync(&unique("cli"), &feeds.url("busy")).await;
    let tenant = unique("cli");
    let id = svc.start_sync(&tenant, &feeds.url("cancel")).await;
    let o = cli(&svc.base(), &["cancel", &id]).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A queued job ends at once ("cancelled"); a running one reads "cancelling" first.
    assert!(stdout(&o).contains("cancel"), "{}", stdout(&o));
    let o = cli(&svc.base(), &["watch", &id]).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stdout(&o).contains("cancelled"), "{}", stdout(&o));
    let o = cli(&svc.base(), &["cancel", &id]).await;
    assert_eq!(code(&o), 1, "an ended job has nothing to cancel");
    feeds.release("busy");
    svc.wait_for_status(&busy, "done").await;
}

#[tokio::test]
async fn usage_errors_exit_2_and_an_unreachable_or_failing_server_exits_4() {
    let svc = Service::embedded().start().await;
    let o = cli(&svc.base(), &["submit", "sync"]).await;
    assert_eq!(code(&o), 2, "a missing --tenant");
    let o = cli(&svc.base(), &["submit", "sync", "--tenant", "not a tenant"]).await;
    assert_eq!(code(&o), 2, "the server's 422");
    assert!(stderr(&o).contains("invalid_field"), "{}", stderr(&o));
    let o = cli(&svc.base(), &["watch", "no-such-job"]).await;
    assert_eq!(code(&o), 2, "an unknown job");
    let o = cli(
        &svc.base(),
        &["jobs", "--tenant", "acme", "--token-file", "/no/such/file"],
    )
    .await;
    assert_eq!(code(&o), 2, "an unreadable token file");
    let o = cli(
        &svc.base(),
        &["jobs", "--tenant", "acme", "--token-file", ""],
    )
    .await;
    assert_eq!(code(&o), 2, "an empty token file path");
    assert!(
        stderr(&o).contains("empty") && stderr(&o).contains("unset CATALOG_JOBS_TOKEN_FILE"),
        "{}",
        stderr(&o)
    );

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let o = cli(&nobody, &["submit", "sync", "--tenant", "acme"]).await;
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot reach"), "{}", stderr(&o));

    let failing = Service::on_unreachable_redis().start().await;
    let o = cli(&failing.base(), &submit_a_demo_sync("acme")).await;
    assert_eq!(code(&o), 4, "a 503: {}", stderr(&o));
    assert_plain(&stderr(&o));
}

#[tokio::test]
async fn a_token_file_is_sent_as_a_bearer_header_and_never_in_the_url() {
    use axum::http::HeaderMap;
    use std::sync::{Arc, Mutex};
    /// Each request the stand-in server saw: its URI and its Authorization header.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let router = axum::Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap| {
        let auth = headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned());
        record.lock().unwrap().push((uri.to_string(), auth));
        async { axum::Json(serde_json::json!({"jobs": []})) }
    });
    let base = format!("http://{}", serve(router).await);
    let token = std::env::temp_dir().join(format!("catalog-jobs-token-{}", std::process::id()));
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let o = cli(
        &base,
        &[
            "jobs",
            "--tenant",
            "acme",
            "--token-file",
            token.to_str().unwrap(),
        ],
    )
    .await;
    let _ = std::fs::remove_file(&token);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].1.as_deref(), Some("Bearer s3cret-token"));
    assert!(!seen[0].0.contains("s3cret"), "the token is not in the URL");
}

#[tokio::test]
async fn watch_in_a_terminal_draws_a_progress_bar() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let id = svc.start_sync(&unique("cli"), &feeds.url("bar")).await;
    svc.wait_for_status(&id, "running").await;
    let command = format!("{BIN} watch {id} --server {}", svc.base());
    let o = in_a_terminal(command, &feeds, "bar").await;
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let screen = stdout(&o);
    assert!(
        screen.contains("\r") || screen.contains("\u{1b}["),
        "the bar redraws in place: {screen:?}"
    );
    assert!(
        screen.contains("ETA not known yet") && screen.contains("elapsed"),
        "a held job has made no progress: no rate, so no ETA yet: {screen:?}"
    );
    assert!(screen.contains("% ["), "a percent and a bar: {screen:?}");
    assert!(
        screen.contains(&format!("sync {id} done")),
        "then the summary: {screen:?}"
    );
}

#[tokio::test]
async fn ctrl_c_stops_watching_and_leaves_the_job_running() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let id = svc.start_sync(&unique("cli"), &feeds.url("ctrlc")).await;
    svc.wait_for_status(&id, "running").await;
    let child = Command::new(BIN)
        .args(["watch", &id, "--server", &svc.base()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the watcher's first progress line before interrupting it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = child.id().to_string();
    let o = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut child = child;
        let mut err = child.stderr.take().unwrap();
        let mut first = [0u8; 1];
        let _ = err.read(&mut first);
        assert!(Instant::now() < deadline);
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        let mut rest = Vec::new();
        let _ = err.read_to_end(&mut rest);
        let status = child.wait().unwrap();
        let mut text = String::from_utf8_lossy(&first).into_owned();
        text.push_str(&String::from_utf8_lossy(&rest));
        (status.code(), text)
    })
    .await
    .unwrap();
    assert_eq!(o.0, Some(130), "{}", o.1);
    assert!(
        o.1.contains("goes on") && o.1.contains(&format!("catalog-jobs cancel {id}")),
        "{}",
        o.1
    );
    let job = svc.get_json(&format!("/catalog/jobs/{id}")).await;
    assert_eq!(job["status"], "running", "the job goes on");
    feeds.release("ctrlc");
}

#[tokio::test]
async fn a_200_that_is_not_a_job_is_a_bad_answer_from_the_server_and_exits_4() {
    let router = axum::Router::new()
        .fallback(|| async { axum::Json(serde_json::json!({"product_key": "w1"})) });
    let base = format!("http://{}", serve(router).await);
    for args in [
        &["watch", "w1"][..],
        &submit_a_demo_sync("acme"),
        &["cancel", "w1"][..],
    ] {
        let o = cli(&base, args).await;
        assert_eq!(code(&o), 4, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("not a job"), "{args:?}: {}", stderr(&o));
        assert_plain(&stderr(&o));
    }
}

/// Runs the CLI with `args` (an `--attach` start) and, once it says it follows the active
/// job, calls `release` (what holds that job running); its output once it ends. Released
/// sooner, the job could end before the CLI's POST, and that POST would start a new one.
pub(super) async fn attached(
    base: String,
    args: &[&str],
    release: impl FnOnce(),
) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (following_tx, following) = tokio::sync::oneshot::channel();
    let run = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .args(&args)
            .env_clear()
            .env("CATALOG_JOBS_URL", base)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the CLI runs");
        let err = std::io::BufReader::new(child.stderr.take().expect("stderr is piped"));
        let mut following_tx = Some(following_tx);
        for line in err.lines().map_while(Result::ok) {
            if line.contains("following") {
                if let Some(tx) = following_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
        child.wait_with_output().expect("the CLI ends")
    });
    following
        .await
        .expect("the CLI says it follows the active job");
    release();
    run.await.expect("the CLI's thread ends")
}
