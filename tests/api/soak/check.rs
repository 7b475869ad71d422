//! The soak's invariant checker, run once the load stopped: it waits for every accepted job to
//! end, then reads the jobs, their timelines, the deleted tenants and Redis itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::Value;
use tokio::task::JoinSet;

use super::chaos::{Memory, Replicas};
use super::load::{Accepted, Ledger};
use super::MAX_ATTEMPTS;
use crate::helpers::RedisServer;

/// Requests the checker has in flight at once.
const PARALLEL: usize = 16;
/// Growth of an idle figure over the previous round's that still counts as flat.
const FLAT: f64 = 1.10;
/// Rounds whose figures only warm up (allocator arenas, connection pools).
const WARM_UP_ROUNDS: usize = 2;

/// What the checker found: counts to print, and every broken invariant.
pub struct Report {
    accepted: usize,
    ended: BTreeMap<String, usize>,
    deleted: usize,
    statuses: BTreeMap<u16, u64>,
    unanswered: u64,
    frames: u64,
    imported: u64,
    warnings: usize,
    pub broken: Vec<String>,
}

impl Report {
    pub fn assert_held(&self) {
        assert!(
            self.broken.is_empty(),
            "{} invariants broken:\n{}",
            self.broken.len(),
            self.broken.join("\n")
        );
        assert!(
            self.accepted > 0 && self.deleted > 0,
            "the load ran: {self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} jobs accepted, ended {:?}; {} tenants deleted; answers by status {:?}; {} requests unanswered (replica down); {} stream frames; {} imports; {} WARN lines in the live replicas' logs; {} invariants broken",
            self.accepted,
            self.ended,
            self.deleted,
            self.statuses,
            self.unanswered,
            self.frames,
            self.imported,
            self.warnings,
            self.broken.len()
        )
    }
}

/// Waits (up to `drain`) for every accepted job to end, then checks every invariant.
pub async fn after(
    replicas: &Replicas,
    redis: &RedisServer,
    ledger: &Ledger,
    drain: Duration,
) -> Report {
    let deleted: HashSet<String> = ledger.deleted().into_iter().collect();
    let accepted = ledger.accepted();
    let (live, gone): (Vec<Accepted>, Vec<Accepted>) = accepted
        .iter()
        .cloned()
        .partition(|j| !deleted.contains(&j.tenant));
    let mut broken = Vec::new();
    let ended = drained(replicas, &live, drain, &mut broken).await;
    let mut by_status = BTreeMap::new();
    for job in ended.values() {
        *by_status.entry(outcome(job)).or_default() += 1;
        lost_only_when_spent(job, &mut broken);
    }
    no_overlap(replicas, &ended, &mut broken).await;
    deleted_left_nothing(replicas, redis, &deleted, &gone, &mut broken).await;
    broken.extend(super::load::lock(&ledger.undocumented).iter().cloned());
    let logs = replicas.logs();
    Report {
        accepted: accepted.len(),
        ended: by_status,
        deleted: deleted.len(),
        statuses: super::load::lock(&ledger.statuses).clone(),
        unanswered: ledger.unanswered.load(std::sync::atomic::Ordering::Relaxed),
        frames: ledger
            .stream_frames
            .load(std::sync::atomic::Ordering::Relaxed),
        imported: ledger.imported.load(std::sync::atomic::Ordering::Relaxed),
        warnings: logs.lines().filter(|l| l.contains("WARN")).count(),
        broken,
    }
}

fn outcome(job: &Value) -> String {
    match job["error"].as_str() {
        Some(class) => format!("{}/{class}", job["status"].as_str().unwrap_or("?")),
        None => job["status"].as_str().unwrap_or("?").to_owned(),
    }
}

fn ended(job: &Value) -> bool {
    matches!(
        job["status"].as_str(),
        Some("done" | "failed" | "cancelled" | "lost")
    )
}

/// GETs `path` from some live replica, trying each in turn; the status and JSON body.
async fn get(replicas: &Replicas, path: &str) -> Option<(u16, Value)> {
    for n in 0..3 {
        let base = replicas.pick(n)?;
        if let Ok(r) = replicas.client().get(format!("{base}{path}")).send().await {
            let status = r.status().as_u16();
            return Some((status, r.json().await.unwrap_or(Value::Null)));
        }
    }
    None
}

/// Polls every job until it ends; one that does not within `drain` breaks the invariant.
async fn drained(
    replicas: &Replicas,
    jobs: &[Accepted],
    drain: Duration,
    broken: &mut Vec<String>,
) -> HashMap<String, Value> {
    let deadline = Instant::now() + drain;
    let mut ended_jobs = HashMap::new();
    let mut waiting: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
    waiting.sort();
    waiting.dedup();
    while !waiting.is_empty() && Instant::now() < deadline {
        let answers = get_all(replicas, &waiting, |id| format!("/catalog/jobs/{id}")).await;
        let mut still = Vec::new();
        for (id, answer) in waiting.into_iter().zip(answers) {
            match answer {
                Some((200, job)) if ended(&job) => {
                    ended_jobs.insert(id, job);
                }
                _ => still.push(id),
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    for id in waiting {
        let last = get(replicas, &format!("/catalog/jobs/{id}")).await;
        broken.push(format!(
            "job {id} accepted but not ended after {drain:?}: {last:?}"
        ));
    }
    ended_jobs
}

/// GETs one path per id, `PARALLEL` at a time, answers in the ids' order.
async fn get_all(
    replicas: &Replicas,
    ids: &[String],
    path: impl Fn(&str) -> String,
) -> Vec<Option<(u16, Value)>> {
    let mut answers = vec![None; ids.len()];
    for (c, chunk) in ids.chunks(PARALLEL).enumerate() {
        let mut set = JoinSet::new();
        for (i, id) in chunk.iter().enumerate() {
            let (replicas, path) = (replicas.clone(), path(id));
            set.spawn(async move { (i, get(&replicas, &path).await) });
        }
        while let Some(Ok((i, answer))) = set.join_next().await {
            answers[c * PARALLEL + i] = answer;
        }
    }
    answers
}

/// A job reads `lost` (or failed `Lost`) only once its attempts are spent.
fn lost_only_when_spent(job: &Value, broken: &mut Vec<String>) {
    let lost = job["status"] == "lost" || job["error"] == "Lost";
    let attempts = job["attempt"].as_u64().unwrap_or(0);
    if lost && attempts < u64::from(MAX_ATTEMPTS) {
        broken.push(format!(
            "lost after {attempts} of {MAX_ATTEMPTS} attempts: {job}"
        ));
    }
}

/// A job's run from its first start to its end (ms since the epoch), and its id.
type Span = (u64, u64, String);

/// From each job's timeline, the span from its first start to its end: no two jobs of one
/// tenant+kind may overlap (single flight).
async fn no_overlap(replicas: &Replicas, jobs: &HashMap<String, Value>, broken: &mut Vec<String>) {
    let ids: Vec<String> = jobs.keys().cloned().collect();
    let timelines = get_all(replicas, &ids, |id| format!("/catalog/jobs/{id}/events")).await;
    let mut spans: BTreeMap<(String, String), Vec<Span>> = BTreeMap::new();
    for (id, timeline) in ids.iter().zip(timelines) {
        let Some((200, timeline)) = timeline else {
            broken.push(format!(
                "job {id}'s timeline could not be read: {timeline:?}"
            ));
            continue;
        };
        let Some(span) = span(&timeline) else {
            continue; // never started (cancelled while queued)
        };
        let job = &jobs[id];
        let key = (job["tenant_id"].to_string(), job["kind"].to_string());
        spans
            .entry(key)
            .or_default()
            .push((span.0, span.1, id.clone()));
    }
    for ((tenant, kind), mut runs) in spans {
        runs.sort();
        for pair in runs.windows(2) {
            let ((_, end, a), (start, _, b)) = (&pair[0], &pair[1]);
            if start < end {
                broken.push(format!(
                    "{kind} jobs {a} and {b} of tenant {tenant} overlapped: {b} started {} ms before {a} ended",
                    end - start
                ));
            }
        }
    }
}

/// A timeline's first `started` and its last ending event (`finished`, `superseded`, `lost`).
fn span(timeline: &Value) -> Option<(u64, u64)> {
    let events = timeline["events"].as_array()?;
    let at = |e: &Value| e["at"].as_u64().unwrap_or(0);
    let start = events.iter().find(|e| e["type"] == "started").map(at)?;
    let end = events
        .iter()
        .rev()
        .find(|e| matches!(e["type"].as_str(), Some("finished" | "superseded" | "lost")))
        .map(at)?;
    Some((start, end))
}

/// A deleted tenant has no job (listed or by id), no product and no key in Redis but its
/// tombstone.
async fn deleted_left_nothing(
    replicas: &Replicas,
    redis: &RedisServer,
    deleted: &HashSet<String>,
    gone: &[Accepted],
    broken: &mut Vec<String>,
) {
    for job in gone {
        if let Some((status, body)) = get(replicas, &format!("/catalog/jobs/{}", job.id)).await {
            if status != 404 {
                broken.push(format!(
                    "job {} of deleted tenant {} came back: {body}",
                    job.id, job.tenant
                ));
            }
        }
    }
    let mut conn = redis.connection().await;
    for tenant in deleted {
        let listed = get(replicas, &format!("/catalog/jobs?tenant_id={tenant}")).await;
        if let Some((_, body)) = &listed {
            if body["jobs"].as_array().is_some_and(|j| !j.is_empty()) {
                broken.push(format!("deleted tenant {tenant} lists jobs: {body}"));
            }
        }
        let products = get(replicas, &format!("/catalog/products?tenant_id={tenant}")).await;
        if let Some((_, body)) = &products {
            if body["products"].as_array().is_some_and(|p| !p.is_empty()) {
                broken.push(format!("deleted tenant {tenant} has products again"));
            }
        }
        let keys: Vec<String> = conn
            .keys(format!("*{tenant}*"))
            .await
            .expect("the checker reads Redis");
        let left: Vec<&String> = keys.iter().filter(|k| !k.ends_with(":gone")).collect();
        if !left.is_empty() {
            broken.push(format!("deleted tenant {tenant} left keys: {left:?}"));
        }
    }
}

/// Each round's idle figures of the untouched replica, after the warm-up rounds, within
/// `FLAT` of the round before.
pub fn memory_is_flat(rounds: &[Memory]) {
    for (i, pair) in rounds.windows(2).enumerate().skip(WARM_UP_ROUNDS - 1) {
        let (before, now) = (pair[0], pair[1]);
        assert!(
            now.rss_kb as f64 <= before.rss_kb as f64 * FLAT,
            "RSS grew from {before} to {now} in round {}: {rounds:?}",
            i + 2
        );
        assert!(
            now.fds as f64 <= before.fds as f64 * FLAT + 2.0,
            "open files grew from {before} to {now} in round {}: {rounds:?}",
            i + 2
        );
    }
}
