//! What the checker judges, read once the load stopped: every accepted job polled until it
//! ends (or the drain runs out; a maybe deleted tenant's until it ends or is gone), the ended
//! jobs' timelines, and each deleted or maybe deleted tenant's jobs, listing, products and
//! Redis keys.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use tokio::task::JoinSet;

use super::chaos::Replicas;
use super::check::{ended, Answer, Observed, Remains};
use super::load::{lock, Ledger};
use crate::helpers::RedisServer;

/// Requests the observer has in flight at once.
const PARALLEL: usize = 16;
/// How often the jobs still running are polled while draining.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Waits (up to `drain`) for every accepted job to end, then reads the rest.
pub async fn observe(
    replicas: &Replicas,
    redis: &RedisServer,
    ledger: &Ledger,
    drain: Duration,
) -> Observed {
    let deleted: HashSet<String> = ledger.deleted().into_iter().collect();
    let maybe_deleted: HashSet<String> = ledger.maybe_deleted().into_iter().collect();
    let accepted = ledger.accepted();
    let (mut gone, mut live, mut maybe) = (Vec::new(), Vec::new(), HashSet::new());
    for job in &accepted {
        if deleted.contains(&job.tenant) {
            gone.push(job.id.clone());
        } else {
            live.push(job.id.clone());
            if maybe_deleted.contains(&job.tenant) {
                maybe.insert(job.id.clone());
            }
        }
    }
    // A maybe deleted tenant's job is settled once it ended or is gone.
    let settled = |id: &str, answer: &Answer| match answer {
        Some((200, job)) => ended(job),
        Some((404, _)) => maybe.contains(id),
        _ => false,
    };
    let jobs = drained(replicas, live, drain, settled).await;
    let ended_ids: Vec<String> = jobs
        .iter()
        .filter(|(_, a)| matches!(a, Some((200, job)) if ended(job)))
        .map(|(id, _)| id.clone())
        .collect();
    let timelines = get_all(replicas, &ended_ids, |id| {
        format!("/catalog/jobs/{id}/events")
    })
    .await;
    let mut gone_jobs: HashMap<String, Answer> = gone
        .iter()
        .cloned()
        .zip(get_all(replicas, &gone, |id| format!("/catalog/jobs/{id}")).await)
        .collect();
    gone_jobs.extend(maybe.iter().map(|id| (id.clone(), jobs[id].clone())));
    let mut remains = std::collections::BTreeMap::new();
    let mut conn = redis.connection().await;
    let every_key: Vec<String> = conn.keys("*").await.expect("the checker reads Redis");
    for tenant in deleted.iter().chain(&maybe_deleted) {
        let left = Remains {
            listed: get(replicas, &format!("/catalog/jobs?tenant_id={tenant}")).await,
            products: get(replicas, &format!("/catalog/products?tenant_id={tenant}")).await,
            keys: every_key
                .iter()
                .filter(|k| k.contains(tenant.as_str()))
                .cloned()
                .collect(),
        };
        remains.insert(tenant.clone(), left);
    }
    Observed {
        accepted,
        deleted,
        maybe_deleted,
        jobs,
        timelines: ended_ids.into_iter().zip(timelines).collect(),
        gone_jobs,
        remains,
        undocumented: lock(&ledger.undocumented).clone(),
    }
}

/// Waits until no job is queued, running or cancelling (`GET /catalog/stats`), at most
/// `within`: how long that took, or `None` when the jobs were still at work then.
pub async fn settled(replicas: &Replicas, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some((200, stats)) = get(replicas, "/catalog/stats").await {
            let active = &stats["active"]["by_status"];
            let busy: u64 = ["queued", "running", "cancelling"]
                .iter()
                .map(|s| active[s].as_u64().unwrap_or(u64::MAX))
                .sum();
            if busy == 0 {
                return Some(started.elapsed());
            }
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    None
}

/// Waits (at most `within`) until replica `slot` runs no more than `threads` threads (its
/// blocking threads went): how long that took, or `None` when some were still there.
pub async fn threads_down_to(
    replicas: &Replicas,
    slot: usize,
    threads: u64,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if replicas.memory(slot, true).threads <= threads {
            return Some(started.elapsed());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    None
}

/// GETs `path` from some live replica, trying each in turn.
async fn get(replicas: &Replicas, path: &str) -> Answer {
    for n in 0..3 {
        let base = replicas.pick(n)?;
        if let Ok(r) = replicas.client().get(format!("{base}{path}")).send().await {
            let status = r.status().as_u16();
            return Some((status, r.json().await.unwrap_or_default()));
        }
    }
    None
}

/// Polls every job until it is `settled` or `drain` runs out: each one's last answer.
async fn drained(
    replicas: &Replicas,
    mut ids: Vec<String>,
    drain: Duration,
    settled: impl Fn(&str, &Answer) -> bool,
) -> HashMap<String, Answer> {
    ids.sort();
    ids.dedup();
    let deadline = Instant::now() + drain;
    let mut last = HashMap::new();
    let mut waiting = ids;
    while !waiting.is_empty() {
        let answers = get_all(replicas, &waiting, |id| format!("/catalog/jobs/{id}")).await;
        let mut still = Vec::new();
        for (id, answer) in waiting.into_iter().zip(answers) {
            if !settled(&id, &answer) {
                still.push(id.clone());
            }
            last.insert(id, answer);
        }
        waiting = still;
        if waiting.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    last
}

/// GETs one path per id, `PARALLEL` at a time, answers in the ids' order.
async fn get_all(
    replicas: &Replicas,
    ids: &[String],
    path: impl Fn(&str) -> String,
) -> Vec<Answer> {
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
