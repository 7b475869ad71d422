//! Resharding under load: two replicas of the built binary on a Redis Cluster of their own
//! take a 200-tenant mixed load (syncs, enriches, pairs, pipelines, cancels, polls) while
//! `redis-cli --cluster reshard` moves a third of the slots between primaries; no request
//! answers a 5xx (not even 503), every job ends, and the jobs' timelines show single flight
//! and per-tenant order held throughout.
//!
//! What makes it hold: every job script names, beside its group's queue, the group's
//! `migrating` key, which never exists (`jobs::keys::Keys::migrating`). While the group's slot
//! migrates, Redis runs no call of the group (the source answers `ASK` or `TRYAGAIN`, the
//! target `TRYAGAIN` to a call naming a key it lacks) until the slot has moved; before, a
//! call naming the queue alone ran on whichever node held the queue while the script touched
//! keys the other node held (`MIGRATE` then failed with "Target key exists", or the script
//! with "non local key"). See docs/operations.md, "Resharding".

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::Response;
use serde_json::Value;

use crate::helpers::{started_id, unique, HeldFeeds, RedisCluster, Service};

/// Tenants of the load.
const TENANTS: usize = 200;
/// Tenants whose requests are in flight at once.
const IN_FLIGHT: usize = 16;
/// Slots moved: a third of the keyspace.
const MOVED_SLOTS: usize = 16384 / 3;
/// How long the test waits for a job to end, or a request to be answered, at most (generous:
/// the machine is shared at load 20–30).
const PATIENCE: Duration = Duration::from_secs(120);
/// How long the test waits for the reshard at most: `redis-cli` moves a slot in 14 ms under
/// this load at load 5 (77 s for the third), and past 120 s at load 21.
const RESHARD_PATIENCE: Duration = Duration::from_secs(300);

/// What the load saw: each tenant's jobs in creation order, the pipelines, the 5xx answers.
#[derive(Default)]
struct Seen {
    /// Per tenant, its sync/enrich/pair jobs in the order they were created.
    ordered: HashMap<String, Vec<String>>,
    /// Pipeline (parent) jobs.
    pipelines: Vec<String>,
    /// 5xx answers (a 503 is retried, as a client would, so that the load goes on).
    refused: AtomicUsize,
    /// Requests answered while the reshard ran.
    during: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_of_the_slots_resharded_under_a_mixed_load_loses_no_job_and_breaks_no_order() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    // A claim whose answer came after the store's 2 s bound (a call that waited out its
    // group's stall) still took its job: the job is recovered once its lease expires, which
    // takes 15 s here instead of the default 300 (the test's patience is 120 s).
    let launch = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .env("STALE_AFTER_SECONDS", "15");
    let replicas = [launch.clone().start().await, launch.start().await];
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let (to, from) = (
        primaries[1].1.clone(),
        vec![primaries[0].1.clone(), primaries[2].1.clone()],
    );
    let slots_before = cluster.slots_of(&to);
    let resharding = Arc::new(AtomicBool::new(true));
    let reshard = tokio::task::spawn_blocking({
        let (cluster, resharding) = (cluster.clone(), resharding.clone());
        move || {
            // Ends the load however the reshard ends, so that a failed `redis-cli` is reported
            // as such (its output) rather than as the requests it left refused.
            let _ended = Ended(resharding);
            let since = Instant::now();
            cluster.reshard(&from, &to, MOVED_SLOTS);
            since.elapsed()
        }
    });
    let counters = Seen::default();
    let since = Instant::now();
    let (seen, rounds) = load_until_resharded(&replicas, &counters, &resharding).await;
    let load_took = since.elapsed();
    let ending = Instant::now();
    let reshard_took = tokio::time::timeout(RESHARD_PATIENCE, reshard)
        .await
        .expect("the reshard ended")
        .unwrap();
    let slots_after = cluster.slots_of(&primaries[1].1);
    assert_eq!(slots_after, slots_before + MOVED_SLOTS, "the slots moved");

    let (statuses, timelines) = every_job_ended(&replicas, &seen).await;
    let ending_took = ending.elapsed();
    for (tenant, jobs) in &seen.ordered {
        in_order_one_at_a_time(tenant, jobs, &timelines);
    }
    let (during, refused) = (
        counters.during.load(Ordering::SeqCst),
        counters.refused.load(Ordering::SeqCst),
    );
    println!(
        "reshard of {MOVED_SLOTS} slots: {:.1} s; load: {rounds} rounds in {:.1} s, {during} \
         answers during the reshard, {refused} 5xx; jobs: {statuses:?}, every end read in \
         {:.1} s",
        reshard_took.as_secs_f64(),
        load_took.as_secs_f64(),
        ending_took.as_secs_f64(),
    );
    assert!(during > 0, "the load ran while the slots moved");
    no_5xx_nor_crossslot(&replicas, refused);
}

/// The load saw no 5xx (else fails with the services' log lines for them), and no service
/// logged a `CROSSSLOT` or a panic; prints how often their cluster connections were replaced.
fn no_5xx_nor_crossslot(replicas: &[Service; 2], refused: usize) {
    let logs: Vec<String> = replicas.iter().map(Service::log).collect();
    let replaced: usize = logs
        .iter()
        .map(|log| {
            log.matches("the cluster connection answered nothing")
                .count()
        })
        .sum();
    println!("cluster connections replaced as silent: {replaced}");
    let refusals: Vec<&str> = logs
        .iter()
        .flat_map(|log| log.lines().filter(|l| l.contains(" status=5")))
        .collect();
    assert_eq!(
        refused,
        0,
        "requests answered 5xx during the reshard:\n{}",
        refusals.join("\n")
    );
    for log in &logs {
        assert!(!log.contains("CROSSSLOT"), "{log}");
        assert!(!log.contains("panicked"), "{log}");
    }
}

/// Clears its flag when dropped: the reshard ended, done or failed.
struct Ended(Arc<AtomicBool>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Tenants of the offline reshard.
const STOPPED_TENANTS: usize = 40;

/// The offline procedure docs/operations.md keeps as an option: the service stopped (SIGTERM:
/// its running jobs go back to the queue), a third of the slots moved, the service started
/// again. Each tenant had a sync running or queued and an enrich waiting
/// behind it: every one ends `done`, the enrich after the sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_of_the_slots_moved_while_the_service_is_stopped_loses_no_job() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let feeds = HeldFeeds::start().await;
    let launch = Service::embedded()
        .env("REDIS_CLUSTER_NODES", cluster.nodes_env())
        .reading(&feeds)
        .env("SHUTDOWN_GRACE_SECONDS", "0.5");
    let mut svc = launch.clone().start().await;
    let run = unique("stopped");
    let source = feeds.url("held");
    let mut jobs = Vec::new();
    for i in 0..STOPPED_TENANTS {
        let t = format!("{run}-{i}");
        let sync = [("tenant_id", t.as_str()), ("source", source.as_str())];
        let s = started_id(svc.start("sync", &sync).await).await;
        let e = started_id(svc.start("enrich", &[("tenant_id", t.as_str())]).await).await;
        jobs.push(vec![s, e]);
    }
    svc.stop();
    let primaries = cluster.primaries();
    let to = primaries[1].1.clone();
    let from = [primaries[0].1.clone(), primaries[2].1.clone()];
    let slots_before = cluster.slots_of(&to);
    let cluster = tokio::task::spawn_blocking({
        let to = to.clone();
        move || {
            cluster.reshard(&from, &to, MOVED_SLOTS);
            cluster
        }
    })
    .await
    .unwrap();
    assert_eq!(cluster.slots_of(&to), slots_before + MOVED_SLOTS);
    let svc = launch.start().await;
    feeds.release("held");
    let mut timelines = HashMap::new();
    for id in jobs.iter().flatten() {
        let (status, span) = ended(&svc, id).await;
        assert_eq!(status, "done", "job {id}");
        timelines.insert(id.clone(), span);
    }
    for (n, pair) in jobs.iter().enumerate() {
        in_order_one_at_a_time(&format!("{run}-{n}"), pair, &timelines);
    }
}

/// Round after round of the 200 tenants' scenarios until the slots have moved (the load
/// covers the whole reshard however long it takes on the machine; a round under way when it
/// ends starts no more scenarios, the first round runs whole): what was created, and how
/// many rounds ran.
async fn load_until_resharded(
    replicas: &[Service; 2],
    counters: &Seen,
    resharding: &AtomicBool,
) -> (Seen, usize) {
    let run = unique("reshard");
    let seen = std::sync::Mutex::new(Seen::default());
    let since = Instant::now();
    let mut rounds = 0;
    while rounds == 0 || resharding.load(Ordering::SeqCst) {
        assert!(
            since.elapsed() < RESHARD_PATIENCE,
            "the reshard did not end"
        );
        let first = rounds == 0;
        futures_util::stream::iter(0..TENANTS)
            .take_while(|_| std::future::ready(first || resharding.load(Ordering::SeqCst)))
            .map(|i| {
                let load = Load {
                    one: &replicas[i % 2],
                    other: &replicas[(i + 1) % 2],
                    tenant: format!("{run}-{i}"),
                    round: rounds,
                    counters,
                    resharding,
                };
                let seen = &seen;
                async move {
                    let (ordered, pipeline) = load.scenario((i + rounds) % 4).await;
                    let mut seen = seen.lock().unwrap();
                    seen.ordered.entry(load.tenant).or_default().extend(ordered);
                    seen.pipelines.extend(pipeline);
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<()>>()
            .await;
        rounds += 1;
    }
    (seen.into_inner().unwrap(), rounds)
}

/// Waits for every job `seen` to end `done` or `cancelled`: how many ended how, and each
/// job's run from its timeline.
async fn every_job_ended(
    replicas: &[Service; 2],
    seen: &Seen,
) -> (HashMap<String, usize>, HashMap<String, Option<(u64, u64)>>) {
    let every = seen.ordered.values().flatten().chain(&seen.pipelines);
    let ends = futures_util::stream::iter(every.enumerate())
        .map(|(n, id)| {
            let svc = &replicas[n % 2];
            async move { (id.clone(), ended(svc, id).await) }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let mut statuses: HashMap<String, usize> = HashMap::new();
    let mut timelines = HashMap::new();
    for (id, (status, span)) in ends {
        assert!(
            status == "done" || status == "cancelled",
            "job {id} ended {status}"
        );
        *statuses.entry(status).or_default() += 1;
        timelines.insert(id, span);
    }
    (statuses, timelines)
}

/// One tenant's requests, spread over two replicas.
struct Load<'a> {
    one: &'a Service,
    other: &'a Service,
    tenant: String,
    /// Which round of the load this is (idempotency keys are per round).
    round: usize,
    counters: &'a Seen,
    resharding: &'a AtomicBool,
}

impl Load<'_> {
    /// Runs scenario `n` (of four) for the tenant: its sync/enrich/pair jobs in creation
    /// order, and the pipeline it started (if any).
    async fn scenario(&self, n: usize) -> (Vec<String>, Option<String>) {
        let t = self.tenant.as_str();
        let sync = [("tenant_id", t), ("source", "sample.csv")];
        let only = [("tenant_id", t)];
        match n {
            // A whole pipeline, polled on the other replica.
            0 => {
                let p = self.start(self.one, "pipeline", &sync, "p").await;
                self.poll(self.other, &p).await;
                (steps(&p), created(&p))
            }
            // Three starts in order, on both replicas.
            1 => {
                let s = self.start(self.one, "sync", &sync, "s").await;
                let e = self.start(self.other, "enrich", &only, "e").await;
                let p = self.start(self.one, "pair", &only, "p").await;
                self.poll(self.other, &s).await;
                ([s, e, p].iter().filter_map(created).collect(), None)
            }
            // A second sync of the tenant (single flight: the active one's id, or a new job
            // once it ended), then an enrich cancelled from the other replica.
            2 => {
                let s = self.start(self.one, "sync", &sync, "s").await;
                let again = self.start(self.other, "sync", &sync, "s2").await;
                if again["error"] == "already_running" && s["error"].is_null() {
                    assert_eq!(again["job_id"], s["job_id"], "{again}");
                }
                let e = self.start(self.one, "enrich", &only, "e").await;
                if let Some(e) = created(&e) {
                    self.cancel(self.other, &e).await;
                }
                ([s, again, e].iter().filter_map(created).collect(), None)
            }
            // A pipeline cancelled from the other replica at once.
            _ => {
                let p = self.start(self.one, "pipeline", &sync, "p").await;
                if let Some(p) = created(&p) {
                    self.cancel(self.other, &p).await;
                }
                (steps(&p), created(&p))
            }
        }
    }

    /// Counts an answer and any 5xx; a 5xx may only be a 503 with `Retry-After` (it is counted
    /// and the test fails at its end, with the services' lines for it). Answers whether it
    /// was one (to be retried).
    fn refused(&self, r: &Response, what: &str) -> bool {
        if self.resharding.load(Ordering::SeqCst) {
            self.counters.during.fetch_add(1, Ordering::SeqCst);
        }
        let status = r.status().as_u16();
        if status == 503 {
            assert!(
                r.headers().contains_key("retry-after"),
                "{what}: 503 says when"
            );
            self.counters.refused.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        assert!(status < 500, "{what} answered {status}");
        false
    }

    /// A start under an `Idempotency-Key` (so a 503, whose outcome is unknown, is repeated
    /// safely): its answer, 202 or 409 `already_running`.
    async fn start(&self, svc: &Service, kind: &str, form: &[(&str, &str)], key: &str) -> Value {
        let key = format!("{}-{}-{key}", self.tenant, self.round);
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "start {kind} refused throughout");
            let r = svc.start_keyed(kind, form, Some(&key)).await;
            if self.refused(&r, kind) {
                // A client waits before it repeats; the test waits less than Retry-After asks
                // to keep the load on during the reshard.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            assert!(
                status == 202 || (status == 409 && body["error"] == "already_running"),
                "start {kind} answered {status}: {body}"
            );
            return body;
        }
    }

    /// A cancel: 202, or 409 `not_active` when the job ended first.
    async fn cancel(&self, svc: &Service, id: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "cancel refused throughout");
            let r = svc.cancel(id).await;
            if self.refused(&r, "cancel") {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let status = r.status().as_u16();
            assert!(status == 202 || status == 409, "cancel answered {status}");
            return;
        }
    }

    /// Reads the job a few times, as a client polling it does.
    async fn poll(&self, svc: &Service, job: &Value) {
        for _ in 0..3 {
            let r = svc.job(&id(job)).await;
            if !self.refused(&r, "a poll") {
                assert_eq!(r.status(), 200, "a poll finds the job");
            }
            // Paces the polls as a client's interval does.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn id(job: &Value) -> String {
    job["job_id"].as_str().expect("a job id").to_owned()
}

/// The job a start created (`None` when it was refused 409 `already_running`: the active
/// job it names is counted where it was created).
fn created(answer: &Value) -> Option<String> {
    answer["error"].is_null().then(|| id(answer))
}

/// The step jobs a pipeline start created, in order.
fn steps(answer: &Value) -> Vec<String> {
    match answer["steps"].as_array() {
        Some(steps) if answer["error"].is_null() => steps.iter().map(id).collect(),
        _ => Vec::new(),
    }
}

/// Polls a job's timeline on `svc` until it says the job finished, `PATIENCE` at most: how
/// it ended, and when its first run started and when it finished (ms; `None` for a job that
/// never ran: cancelled while queued or waiting). One request a poll: the `finished` event
/// carries the status.
async fn ended(svc: &Service, id: &str) -> (String, Option<(u64, u64)>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = svc.get(&format!("/catalog/jobs/{id}/events")).await;
        assert_eq!(r.status(), 200, "GET {id}/events");
        let timeline: Value = r.json().await.unwrap();
        let events = timeline["events"].as_array().expect("a timeline");
        let first = |kind: &str| events.iter().find(|e| e["type"] == kind);
        if let Some(finished) = first("finished") {
            let at = |e: &Value| e["at"].as_u64().expect("ms");
            let status = finished["status"].as_str().expect("a status").to_owned();
            return (status, first("started").map(|s| (at(s), at(finished))));
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never ended: {timeline}"
        );
        // No signal crosses from the service to the test but its answers.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A tenant's jobs ran one at a time, in creation order: each job that ran started no
/// earlier than the one before it finished (which covers single flight of a kind).
fn in_order_one_at_a_time(
    tenant: &str,
    jobs: &[String],
    timelines: &HashMap<String, Option<(u64, u64)>>,
) {
    let ran: Vec<(&String, (u64, u64))> = jobs
        .iter()
        .filter_map(|j| timelines[j].map(|s| (j, s)))
        .collect();
    for pair in ran.windows(2) {
        let ((before, (_, finished)), (after, (started, _))) = (pair[0], pair[1]);
        assert!(
            finished <= started,
            "tenant {tenant}: {after} started at {started} before {before} finished at {finished}"
        );
    }
}
