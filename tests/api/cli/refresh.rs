//! `catalog-jobs refresh` through the real binary: a demo refresh followed to its three
//! reports, one plain line per step's change for scripts, one bar per step at a terminal, an
//! active pipeline's id with exit 3 (and `--attach` following it), and a failing source's
//! pipeline with exit 1.

use serde_json::Value;

use super::attached;
use crate::helpers::{
    assert_plain, cli, code, free_port, in_a_terminal, service_reading_held_feeds, stderr, stdout,
    unique, HeldFeeds, Service, BIN,
};

/// The summary lines a refresh prints on stdout: one a step, then the pipeline's.
fn summaries(out: &str) -> Vec<&str> {
    out.lines().filter(|l| !l.is_empty()).collect()
}

#[tokio::test]
async fn refresh_wait_follows_the_demo_refresh_step_by_step_to_three_reports_with_exit_0() {
    let svc = Service::embedded().start().await;
    let tenant = unique("refresh");
    let args = [
        "refresh",
        "--tenant",
        &tenant,
        "--source",
        "demo.jsonl",
        "--wait",
    ];
    let o = cli(&svc.base(), &args).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines = summaries(&out);
    assert_eq!(lines.len(), 4, "{out}");
    let wanted = [
        ("sync ", "done: ", "read=2400"),
        ("enrich ", "done: ", "products=2400"),
        ("pair ", "done: ", "products=2400"),
    ];
    for (line, (kind, status, figure)) in lines.iter().zip(wanted) {
        assert!(
            line.starts_with(kind) && line.contains(status) && line.contains(figure),
            "{line}"
        );
    }
    assert!(lines[3].starts_with("pipeline ") && lines[3].ends_with(" done"));
    let err = stderr(&o);
    assert_plain(&err);
    for kind in ["sync", "enrich", "pair"] {
        let ended = format!(" {kind} done 100%");
        assert!(
            err.lines().any(|l| l.contains(&ended)),
            "a line says {kind} ended: {err}"
        );
    }
}

#[tokio::test]
async fn an_active_refresh_exits_3_with_its_id_attach_follows_it_and_a_failing_source_exits_1() {
    let feeds = HeldFeeds::start().await;
    let nowhere = free_port();
    let hosts = format!("{},127.0.0.1:{nowhere}", feeds.allowed());
    let svc = Service::embedded()
        .env("SYNC_ALLOWED_HOSTS", hosts)
        .start()
        .await;
    let tenant = unique("refresh");
    let held = feeds.url("refresh");
    let start = ["refresh", "--tenant", &tenant, "--source", &held];
    let o = cli(&svc.base(), &start).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let id = stdout(&o).trim().to_owned();
    let o = cli(&svc.base(), &start).await;
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), id, "the active pipeline's id is printed");
    assert!(
        stderr(&o).contains("give the same command --attach"),
        "the hint names what refresh takes: {}",
        stderr(&o)
    );
    let attach = [&start[..], &["--attach", "--json"]].concat();
    let o = attached(svc.base(), &attach, || feeds.release("refresh")).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(
        report["job_id"],
        id.as_str(),
        "it followed the active pipeline"
    );
    assert_eq!(report["status"], "done", "{report}");

    let source = format!("http://127.0.0.1:{nowhere}/feed.jsonl");
    let failing = [
        "refresh", "--tenant", &tenant, "--source", &source, "--wait",
    ];
    let o = cli(&svc.base(), &failing).await;
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let out = stdout(&o);
    let lines = summaries(&out);
    assert!(lines[0].contains("failed"), "{out}");
    for skipped in &lines[1..3] {
        assert!(
            skipped.contains("cancelled"),
            "a later step is skipped: {out}"
        );
    }
    assert!(
        lines[3].starts_with("pipeline ") && lines[3].contains("failed (SourceUnreachable)"),
        "{out}"
    );
}

#[tokio::test]
async fn refresh_in_a_terminal_draws_one_bar_per_step() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let tenant = unique("refresh");
    let held = feeds.url("bars");
    let command = format!(
        "{BIN} refresh --tenant {tenant} --source {held} --wait --server {}",
        svc.base()
    );
    let o = in_a_terminal(command, &feeds, "bars").await;
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let screen = stdout(&o);
    for kind in ["sync", "enrich", "pair"] {
        assert!(
            screen.contains(&format!("{kind:<6} ")),
            "a bar for {kind}: {screen:?}"
        );
    }
    for waiting in ["enrich", "pair"] {
        let bar = format!("{waiting:<6}   0% [");
        assert!(screen.contains(&bar), "{waiting} waits at 0 %: {screen:?}");
    }
    assert!(
        screen.contains("running · "),
        "the running step's bar says so: {screen:?}"
    );
    assert!(screen.contains(" done"), "then the summaries: {screen:?}");
}
