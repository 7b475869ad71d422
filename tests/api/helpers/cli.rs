//! The built binary's client subcommands, run as a script runs them: `CATALOG_JOBS_URL` set,
//! nothing else in the environment, no terminal.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::HeldFeeds;

/// The built binary: the service and its command-line client.
pub const BIN: &str = env!("CARGO_BIN_EXE_catalog-jobs");

/// A sync of the demo feed for `tenant`, as a script would submit it.
pub fn submit_a_demo_sync(tenant: &str) -> [&str; 6] {
    [
        "submit",
        "sync",
        "--tenant",
        tenant,
        "--source",
        "demo.jsonl",
    ]
}

/// Runs the CLI to its end (off the test's runtime, which serves the held feeds).
pub async fn cli(svc_base: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("CATALOG_JOBS_URL", svc_base)
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().expect("the CLI runs"))
        .await
        .expect("the CLI thread ends")
}

/// Output for a script or a CI log: printable characters and newlines only.
pub fn assert_plain(text: &str) {
    assert!(
        text.chars().all(|c| c == '\n' || !c.is_control()),
        "control characters in non-terminal output: {text:?}"
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("the CLI exits, not killed")
}

/// How long a command in a pseudo-terminal draws before the test lets its job end.
const TERMINAL_DRAW_TIME: Duration = Duration::from_millis(1500);

/// Runs `command` (a shell line) in a pseudo-terminal, as a person at a terminal would, and
/// releases `feed` once the command has drawn for a moment (nothing reaches the test from
/// inside the terminal before the command ends).
pub async fn in_a_terminal(command: String, feeds: &HeldFeeds, feed: &str) -> Output {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("`script` (util-linux) is needed to give the CLI a pseudo-terminal");
    }
    let mut cmd = Command::new("script");
    cmd.args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::null());
    let running = tokio::task::spawn_blocking(move || cmd.output().expect("script runs"));
    tokio::time::sleep(TERMINAL_DRAW_TIME).await;
    feeds.release(feed);
    running.await.expect("the terminal's thread ends")
}
