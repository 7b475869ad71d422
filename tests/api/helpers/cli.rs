//! The built binary's client subcommands, run as a script runs them: `CATALOG_JOBS_URL` set,
//! nothing else in the environment, no terminal.

use std::process::{Command, Output, Stdio};

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

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("the CLI exits, not killed")
}
