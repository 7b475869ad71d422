//! The CLI's reading and re-running commands through the real binary: `jobs` with filters,
//! paging and every tenant's listing, `retry`, `products` (list, search, view), refusals in
//! the command line's own words, and following that keeps up with the job.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::RETRY_AFTER;
use catalog_jobs::config::tokens::hash_token;
use serde_json::{json, Value};

use crate::helpers::{
    cli, code, serve, service_reading_held_feeds, stderr, stdout, unique, Service,
};

/// The rows of a table the CLI printed, without its header.
fn rows(o: &std::process::Output) -> Vec<String> {
    stdout(o).lines().skip(1).map(str::to_owned).collect()
}

/// The `--cursor` the CLI said the next page starts at.
fn next_cursor(o: &std::process::Output) -> Option<String> {
    let err = stderr(o);
    let (_, after) = err.split_once("--cursor ")?;
    after.split_whitespace().next().map(str::to_owned)
}

/// A new tenant whose catalogue is the demo feed, synced and then worked on by `kind`, both
/// jobs done: the tenant, the sync's id and the `kind` job's.
async fn demo_tenant_after(svc: &Service, kind: &str) -> (String, String, String) {
    let tenant = unique("cli");
    let sync = svc.start_sync(&tenant, "demo.jsonl").await;
    svc.wait_for_status(&sync, "done").await;
    let id = svc.start_id(kind, &[("tenant_id", &tenant)]).await;
    svc.wait_for_status(&id, "done").await;
    (tenant, sync, id)
}

#[tokio::test]
async fn jobs_filters_by_status_and_kind_and_pages_on_with_the_cursor_it_prints() {
    let svc = Service::embedded().start().await;
    let (tenant, sync, enrich) = demo_tenant_after(&svc, "enrich").await;

    let base = svc.base();
    let one = |extra: &'static [&'static str]| {
        let mut args = vec!["jobs", "--tenant", &tenant];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| {
        let base = base.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&base, &args).await
        }
    };
    let o = run(one(&["--status", "done", "--kind", "enrich"])).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let found = rows(&o);
    assert!(
        found.len() == 1 && found[0].starts_with(&enrich),
        "only the enrich: {found:?}"
    );

    let first = run(one(&["--limit", "1"])).await;
    assert_eq!(rows(&first).len(), 1);
    assert!(rows(&first)[0].starts_with(&enrich), "newest first");
    let cursor = next_cursor(&first).expect("a cursor to the next page");
    let mut args = one(&["--limit", "1"]);
    args.extend(["--cursor".to_owned(), cursor]);
    let second = run(args).await;
    assert!(rows(&second)[0].starts_with(&sync), "{}", stdout(&second));
    assert_eq!(next_cursor(&second), None, "the last page says no more");

    let all = run(one(&["--limit", "1", "--all"])).await;
    assert_eq!(rows(&all).len(), 2, "every page: {}", stdout(&all));
}

/// The service answers a narrow filter a short page and a cursor when the index stretch it
/// read held few matches: the CLI reads on until its page is full or the listing ends, so a
/// kind that only old jobs have is still listed (it printed an empty table, exit 0, before).
#[tokio::test]
async fn a_narrow_filter_reads_on_until_its_page_is_full_or_the_listing_ends() {
    let svc = Service::embedded().start().await;
    let (tenant, sync, _) = demo_tenant_after(&svc, "enrich").await;
    let mut last = String::new();
    for _ in 0..NEWER_JOBS {
        last = svc
            .start_id("enrich", &[("tenant_id", &unique("crowd"))])
            .await;
    }
    svc.wait_for_status(&last, "done").await;

    let o = cli(&svc.base(), &["jobs", "--kind", "sync", "--limit", "5"]).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let found = rows(&o);
    assert!(
        found.len() == 1 && found[0].starts_with(&sync) && found[0].contains(&tenant),
        "the one sync under {NEWER_JOBS} newer enriches: {found:?} {}",
        stderr(&o)
    );
    assert_eq!(next_cursor(&o), None, "the listing ended: {}", stderr(&o));
}

/// More newer jobs than one call of the operators' listing reads past.
const NEWER_JOBS: usize = 1_500;

#[tokio::test]
async fn without_a_tenant_an_operator_lists_every_tenants_jobs_with_a_tenant_column() {
    let (feeds, svc) = service_reading_held_feeds().await;
    let (a, b) = (unique("cli"), unique("cli"));
    let ids = [
        svc.start_sync(&a, &feeds.url("every-a")).await,
        svc.start_sync(&b, &feeds.url("every-b")).await,
    ];
    for id in &ids {
        svc.wait_for_status(id, "running").await;
    }
    let o = cli(
        &svc.base(),
        &["jobs", "--status", "running", "--limit", "100"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).lines().next().unwrap().contains("TENANT"));
    for (id, tenant) in ids.iter().zip([&a, &b]) {
        let row = rows(&o).into_iter().find(|r| r.starts_with(id.as_str()));
        assert!(
            row.is_some_and(|r| r.contains(tenant.as_str())),
            "{id} of {tenant}: {}",
            stdout(&o)
        );
    }
    feeds.release("every-a");
    feeds.release("every-b");
    for id in &ids {
        svc.wait_for_status(id, "done").await;
    }
}

/// Why the tenant's newest pair was a full one (`first`, `asked`, …), or null.
async fn newest_pair_full_because(svc: &Service, tenant: &str) -> Value {
    let list = svc
        .get_json(&format!(
            "/catalog/jobs?tenant_id={tenant}&kind=pair&limit=1"
        ))
        .await;
    list["jobs"][0]["result"]["full_because"].clone()
}

#[tokio::test]
async fn full_asks_submit_pair_and_refresh_for_a_full_pair_and_another_kind_refuses_it() {
    let svc = Service::embedded().start().await;
    let (tenant, _, _) = demo_tenant_after(&svc, "pair").await;
    let base = svc.base();
    let o = cli(
        &base,
        &["submit", "pair", "--tenant", &tenant, "--wait", "--json"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let unasked: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON job");
    assert_eq!(unasked["result"]["mode"], "incremental", "{unasked}");

    let full = [
        "submit", "pair", "--tenant", &tenant, "--full", "--wait", "--json",
    ];
    let o = cli(&base, &full).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let asked: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON job");
    assert_eq!(asked["params"]["full"], true, "{asked}");
    assert_eq!(asked["result"]["full_because"], "asked", "{asked}");

    let refresh = [
        "refresh", "--tenant", &tenant, "--steps", "pair", "--full", "--wait",
    ];
    let o = cli(&base, &refresh).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(newest_pair_full_because(&svc, &tenant).await, "asked");

    let sync = [
        "submit",
        "sync",
        "--tenant",
        &tenant,
        "--source",
        "demo.jsonl",
        "--full",
    ];
    let o = cli(&base, &sync).await;
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`--full` is not a field"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test]
async fn retry_runs_an_ended_job_again_and_its_new_job_names_the_old_one() {
    let svc = Service::embedded().start().await;
    let tenant = unique("cli");
    let old = svc.start_sync(&tenant, "sample.csv").await;
    svc.wait_for_status(&old, "done").await;
    let o = cli(&svc.base(), &["retry", &old, "--wait", "--json"]).await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let new: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON job");
    assert_eq!(new["status"], "done");
    assert_eq!(new["retry_of"], old.as_str());
    assert_ne!(new["job_id"], old.as_str());

    let o = cli(
        &svc.base(),
        &["retry", "4f1c2d3e-0000-4000-8000-000000000000"],
    )
    .await;
    assert_eq!(code(&o), 2, "an unknown job: {}", stderr(&o));
}

#[tokio::test]
async fn products_lists_searches_and_views_a_product_with_its_neighbours_keys() {
    let svc = Service::embedded().start().await;
    let (tenant, _, _) = demo_tenant_after(&svc, "pair").await;

    let o = cli(
        &svc.base(),
        &["products", "list", "--tenant", &tenant, "--limit", "3"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(rows(&o).len(), 3, "{}", stdout(&o));
    assert!(next_cursor(&o).is_some(), "2,400 products: more pages");

    let o = cli(
        &svc.base(),
        &["products", "search", "--tenant", &tenant, "fam000001"],
    )
    .await;
    assert!(
        !rows(&o).is_empty() && rows(&o).iter().all(|r| r.starts_with("fam000001")),
        "{}",
        stdout(&o)
    );
    // Refused in the command line's words (and grammar).
    let long = "w".repeat(201);
    let o = cli(
        &svc.base(),
        &["products", "search", "--tenant", &tenant, &long],
    )
    .await;
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the search text is at most 200 characters"),
        "{}",
        stderr(&o)
    );

    let o = cli(
        &svc.base(),
        &["products", "view", "--tenant", &tenant, "fam000001-v0"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let view = stdout(&o);
    assert!(view.starts_with("fam000001-v0  "), "{view}");
    let neighbours = view
        .split_once("neighbours\n")
        .expect("a neighbours list")
        .1;
    assert!(
        neighbours
            .lines()
            .any(|l| l.trim_start().starts_with("fam000001-v1")),
        "a neighbour shown by its key: {view}"
    );

    let o = cli(
        &svc.base(),
        &[
            "products",
            "view",
            "--tenant",
            &tenant,
            "no-such-product",
            "--json",
        ],
    )
    .await;
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[tokio::test]
async fn refusals_name_the_command_lines_flags_not_http_headers() {
    let svc = Service::embedded()
        .env(
            "API_TOKENS",
            format!("acme acme-ci {}", hash_token("acme-secret")),
        )
        .start()
        .await;
    let o = cli(&svc.base(), &["jobs", "--tenant", "acme"]).await;
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--token-file") && !stderr(&o).contains("Authorization"),
        "{}",
        stderr(&o)
    );
    let token = std::env::temp_dir().join(unique("cli-token"));
    std::fs::write(&token, "acme-secret\n").unwrap();
    let with_token = ["--token-file", token.to_str().unwrap()];
    let mut args = vec!["jobs"];
    args.extend(with_token);
    let o = cli(&svc.base(), &args).await;
    assert_eq!(code(&o), 2, "a tenant token names its tenant");
    assert!(stderr(&o).contains("--tenant=acme"), "{}", stderr(&o));
    let mut args = vec![
        "submit", "sync", "--tenant", "acme:eu", "--source", "x.jsonl",
    ];
    args.extend(with_token);
    let o = cli(&svc.base(), &args).await;
    let _ = std::fs::remove_file(&token);
    assert!(
        stderr(&o).contains("--tenant must be") && stderr(&o).contains("invalid_field"),
        "{}",
        stderr(&o)
    );
}

/// A stand-in for the service whose job runs until its third read, each read answering
/// the longest `Retry-After` the service ever sends.
async fn a_job_that_ends_on_its_third_read() -> (String, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let seen = reads.clone();
    let router = axum::Router::new().fallback(move || {
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        let (status, percent) = if n >= 3 {
            ("done", 100)
        } else {
            ("running", 0)
        };
        let job = json!({"job_id": "j1", "tenant_id": "acme", "kind": "sync", "status": status,
                         "percent": percent, "step": "syncing", "eta_seconds": null});
        async move { ([(RETRY_AFTER, "30")], axum::Json(job)) }
    });
    let addr = serve(router).await;
    (format!("http://{addr}"), reads)
}

#[tokio::test]
async fn watch_keeps_reading_the_job_whatever_retry_after_says() {
    let (base, reads) = a_job_that_ends_on_its_third_read().await;
    // Honouring Retry-After would take a minute here; polling twice a second takes one. The
    // bound only turns a hang into a failure.
    let o = tokio::time::timeout(Duration::from_secs(20), cli(&base, &["watch", "j1"]))
        .await
        .expect("watch followed the job to its end without waiting out Retry-After");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(reads.load(Ordering::SeqCst), 3);
}

/// A reader that stops early (`catalog-jobs jobs | head -1`, `… products view … | head -2`):
/// the command ends with success and says nothing, where printing to a closed pipe used to
/// panic (exit 101, "failed printing to stdout"). The pipe's reader is gone before the
/// command writes, so its first line meets the closed pipe.
#[tokio::test]
async fn a_reader_that_stops_early_ends_the_command_quietly_not_with_a_panic() {
    let svc = Service::embedded().start().await;
    let tenant = unique("pipe");
    let id = svc
        .start_id("sync", &[("tenant_id", &tenant), ("source", "demo.jsonl")])
        .await;
    svc.wait_for_status(&id, "done").await;
    for args in [
        vec!["jobs", "--all"],
        vec!["jobs", "--tenant", &tenant],
        vec!["products", "list", "--tenant", &tenant],
    ] {
        let mut child = std::process::Command::new(crate::helpers::BIN)
            .args(&args)
            .env_clear()
            .env("CATALOG_JOBS_URL", svc.base())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the CLI runs");
        drop(child.stdout.take());
        let o = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("the CLI thread ends")
            .expect("the CLI ends");
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).is_empty(), "{args:?}: {}", stderr(&o));
    }
}
