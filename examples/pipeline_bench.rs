//! Prints what a tenant's refresh (sync, then enrich, then pair) costs as one pipeline
//! against the same three jobs started one after another by a client, and how 1,000 tenants
//! refreshing at once share 4 workers:
//!
//! 1. One tenant's refresh of a generated feed of `--products` products as a pipeline
//!    (`POST /catalog/pipeline`), and a second tenant's refresh of the same feed as three
//!    jobs, each started once the client, polling every 100 ms, saw the one before end. For
//!    each: the total (its first create to its last end, the store's clock, from the
//!    timelines), each step's run, and each hand-over (a step's `finished` to the next
//!    step's `started`, from the timelines).
//! 2. `--tenants` tenants each starting a refresh of the demo feed (2,400 products) at once:
//!    the total time (first create to last end), the spread of their finish times after the
//!    burst began (first, median, p90, last), and of their durations.
//!
//! Run it:
//!
//!     cargo run --release --example pipeline_bench                          # 20,000 products, 100 tenants
//!     cargo run --release --example pipeline_bench -- --products 1000000 --tenants 1000   # the full size
//!
//! Runs a throwaway `redis-server` and the service in this process as `App::build` makes it
//! (the Redis job store and catalogue, the real catalogue kinds, `MAX_CONCURRENT_JOBS=4`).
//! Record `uptime` beside the figures: the wall times depend on the machine's load.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use catalog_jobs::catalog::demo::generate;
use catalog_jobs::config::Config;
use catalog_jobs::startup::App;
use serde_json::Value;

/// The client's poll of a job it waits for, as a script that starts the next job would.
const CLIENT_POLL: Duration = Duration::from_millis(100);
/// How often the burst's unfinished refreshes are read (their figures come from the store).
const BURST_POLL: Duration = Duration::from_secs(1);
/// The workers the service runs jobs on (`MAX_CONCURRENT_JOBS`).
const WORKERS: usize = 4;
/// Requests the burst sends at once.
const BURST_CONCURRENCY: usize = 32;
/// The steps of a refresh, in order.
const STEPS: [&str; 3] = ["sync", "enrich", "pair"];
/// The generated feed's seed (the demo feed is seed 7).
const SEED: u64 = 11;
/// The committed demo feed the burst's tenants refresh.
const DEMO_FEED: &str = "demo.jsonl";

struct Args {
    products: usize,
    tenants: usize,
}

fn args() -> Args {
    let mut out = Args {
        products: 20_000,
        tenants: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: usize = it
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} takes a whole number"));
        match flag.as_str() {
            "--products" => out.products = value,
            "--tenants" => out.tenants = value,
            other => panic!("unknown flag {other}: --products N, --tenants N"),
        }
    }
    out
}

/// A feeds directory holding the generated feed (`big.jsonl`) and the demo feed.
fn feeds_dir(products: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "catalog-jobs-pipeline-bench-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    let mut feed = String::new();
    for product in generate(products, SEED) {
        feed.push_str(&serde_json::to_string(&product).expect("a product serialises"));
        feed.push('\n');
    }
    std::fs::write(dir.join("big.jsonl"), feed).expect("the feed is written");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/feeds")
        .join(DEMO_FEED);
    std::fs::copy(demo, dir.join(DEMO_FEED)).expect("the demo feed is copied");
    dir
}

/// The service on `redis_url`, as `App::build` makes it; answers its base URL.
async fn service(redis_url: String, feeds: PathBuf) -> String {
    let mut config = Config::defaults();
    config.bind_addr = Some("127.0.0.1:0".into());
    config.redis_url = Some(redis_url);
    config.feeds_dir = feeds;
    config.max_concurrent_jobs = WORKERS;
    config.max_queued_jobs = 100_000;
    config.tenant_creates_per_minute = 0;
    config.pair_max_memory_mb = 4096;
    let app = App::build(config).await.expect("the service starts");
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    base
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .form(form)
            .send()
            .await
            .expect("the service answers");
        assert_eq!(r.status(), 202, "{path} {form:?}");
        r.json().await.expect("a JSON answer")
    }

    async fn get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("the service answers");
        assert_eq!(r.status(), 200, "{path}");
        r.json().await.expect("a JSON answer")
    }

    async fn job(&self, id: &str) -> Value {
        self.get(&format!("/catalog/jobs/{id}")).await
    }

    /// Polls job `id` every `every` until it ends; panics unless it ended done.
    async fn until_done(&self, id: &str, every: Duration) -> Value {
        loop {
            let job = self.job(id).await;
            match job["status"].as_str() {
                Some("done") => return job,
                Some("queued" | "running" | "cancelling") => tokio::time::sleep(every).await,
                _ => panic!("job {id} did not end done: {job}"),
            }
        }
    }

    /// When job `id` was created, last started and ended (ms, the store's clock).
    async fn times(&self, id: &str) -> Times {
        let timeline = self.get(&format!("/catalog/jobs/{id}/events")).await;
        let at = |kind: &str| {
            timeline["events"]
                .as_array()
                .expect("a timeline")
                .iter()
                .filter(|e| e["type"] == kind)
                .filter_map(|e| e["at"].as_u64())
                .next_back()
        };
        Times {
            created: at("created").expect("a created event"),
            started: at("started"),
            finished: at("finished").expect("a finished event"),
        }
    }
}

#[derive(Clone, Copy)]
struct Times {
    created: u64,
    started: Option<u64>,
    finished: u64,
}

/// What one refresh took: its total, each step's run, each hand-over (ms).
struct Refresh {
    total: u64,
    runs: Vec<u64>,
    handovers: Vec<u64>,
    wall: Duration,
}

impl Refresh {
    fn of(first_created: u64, steps: &[Times], wall: Duration) -> Refresh {
        let last = steps.last().expect("three steps").finished;
        Refresh {
            total: last - first_created,
            runs: steps
                .iter()
                .map(|s| s.finished - s.started.unwrap_or(s.created))
                .collect(),
            handovers: steps
                .windows(2)
                .map(|w| w[1].started.expect("a later step started") - w[0].finished)
                .collect(),
            wall,
        }
    }

    fn print(&self, what: &str) {
        let runs: Vec<String> = STEPS
            .iter()
            .zip(&self.runs)
            .map(|(k, ms)| format!("{k} {ms} ms"))
            .collect();
        println!(
            "{what}: total {} ms (client saw it end after {} ms); runs: {}; hand-overs: {:?} ms",
            self.total,
            self.wall.as_millis(),
            runs.join(", "),
            self.handovers
        );
    }
}

async fn as_a_pipeline(c: &Client, tenant: &str, source: &str) -> Refresh {
    let began = Instant::now();
    let pipeline = c
        .post(
            "/catalog/pipeline",
            &[("tenant_id", tenant), ("source", source)],
        )
        .await;
    let id = pipeline["job_id"].as_str().expect("an id").to_owned();
    let done = c.until_done(&id, CLIENT_POLL).await;
    let wall = began.elapsed();
    let mut steps = Vec::new();
    for step in done["steps"].as_array().expect("steps") {
        steps.push(c.times(step["job_id"].as_str().expect("a step id")).await);
    }
    Refresh::of(c.times(&id).await.created, &steps, wall)
}

async fn one_after_another(c: &Client, tenant: &str, source: &str) -> Refresh {
    let began = Instant::now();
    let mut ids = Vec::new();
    for kind in STEPS {
        let mut form = vec![("tenant_id", tenant)];
        if kind == "sync" {
            form.push(("source", source));
        }
        let job = c.post(&format!("/catalog/{kind}"), &form).await;
        let id = job["job_id"].as_str().expect("an id").to_owned();
        c.until_done(&id, CLIENT_POLL).await;
        ids.push(id);
    }
    let wall = began.elapsed();
    let mut steps = Vec::new();
    for id in &ids {
        steps.push(c.times(id).await);
    }
    Refresh::of(steps[0].created, &steps, wall)
}

/// The value at `share` (0–1) of sorted `values`.
fn at_share(values: &[u64], share: f64) -> u64 {
    let i = ((values.len() - 1) as f64 * share).round() as usize;
    values[i]
}

async fn burst(c: &Client, tenants: usize) {
    let run = std::process::id();
    let names: Vec<String> = (0..tenants).map(|i| format!("burst{run}-{i}")).collect();
    let began = Instant::now();
    let mut ids = Vec::with_capacity(tenants);
    for chunk in names.chunks(BURST_CONCURRENCY) {
        let starts: Vec<_> = chunk
            .iter()
            .map(|t| {
                let (c, t) = (c.clone(), t.clone());
                tokio::spawn(async move {
                    let form = [("tenant_id", t.as_str()), ("source", DEMO_FEED)];
                    c.post("/catalog/pipeline", &form).await
                })
            })
            .collect();
        for start in starts {
            let answer = start.await.expect("the start ran");
            ids.push(answer["job_id"].as_str().expect("an id").to_owned());
        }
    }
    let created_in = began.elapsed();
    let mut waiting = ids.clone();
    while !waiting.is_empty() {
        tokio::time::sleep(BURST_POLL).await;
        let mut still = Vec::new();
        for id in waiting {
            match c.job(&id).await["status"].as_str() {
                Some("done") => {}
                Some("queued" | "running" | "cancelling") => still.push(id),
                other => panic!("refresh {id} ended {other:?}"),
            }
        }
        waiting = still;
    }
    let mut times = Vec::with_capacity(tenants);
    for id in &ids {
        times.push(c.times(id).await);
    }
    let start = times.iter().map(|t| t.created).min().expect("refreshes");
    let mut finished: Vec<u64> = times.iter().map(|t| t.finished - start).collect();
    let mut durations: Vec<u64> = times.iter().map(|t| t.finished - t.created).collect();
    finished.sort_unstable();
    durations.sort_unstable();
    let secs = |ms: u64| ms as f64 / 1000.0;
    println!(
        "{tenants} tenants refreshing {DEMO_FEED} at once on {WORKERS} workers: created in {:.1} s; \
         total {:.1} s ({:.1} refreshes/s)",
        created_in.as_secs_f64(),
        secs(*finished.last().expect("refreshes")),
        tenants as f64 / secs(*finished.last().expect("refreshes")),
    );
    println!(
        "  finish times after the burst began: first {:.1} s, median {:.1} s, p90 {:.1} s, last {:.1} s",
        secs(finished[0]),
        secs(at_share(&finished, 0.5)),
        secs(at_share(&finished, 0.9)),
        secs(*finished.last().expect("refreshes")),
    );
    println!(
        "  each refresh's duration (create to end): min {:.1} s, median {:.1} s, p90 {:.1} s, max {:.1} s",
        secs(durations[0]),
        secs(at_share(&durations, 0.5)),
        secs(at_share(&durations, 0.9)),
        secs(*durations.last().expect("refreshes")),
    );
}

#[tokio::main]
async fn main() {
    let args = args();
    let port = common::free_port();
    let mut redis = common::redis_server(port, &[]);
    let feeds = feeds_dir(args.products);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let base = service(format!("redis://127.0.0.1:{port}/"), feeds.clone()).await;
    let c = Client {
        http: reqwest::Client::new(),
        base,
    };
    println!(
        "one tenant's refresh of {} generated products (client polls every {} ms):",
        args.products,
        CLIENT_POLL.as_millis()
    );
    let run = std::process::id();
    one_after_another(&c, &format!("seq{run}"), "big.jsonl")
        .await
        .print("  three jobs one after another");
    as_a_pipeline(&c, &format!("pipe{run}"), "big.jsonl")
        .await
        .print("  one pipeline                ");
    burst(&c, args.tenants).await;
    redis.kill().ok();
    redis.wait().ok();
    std::fs::remove_dir_all(feeds).ok();
}
