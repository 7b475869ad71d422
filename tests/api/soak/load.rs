//! The soak's load: clients, each owning its share of the tenants (so one tenant's actions
//! are in order and a delete is never raced by its own client's create), send a random mix of
//! creates, polls, cancels, retries, imports, deletes and listings to a random live replica;
//! tenant event streams stay open meanwhile. Every answer is counted in the `Ledger`, and
//! every job a create or retry accepted is kept for the checker.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::chaos::Replicas;
use super::check::{self, Observed, Report};
use super::Plan;
use crate::helpers::serve;

/// Longest a soak request waits: a paused replica answers nothing.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Replicas a request tries before it counts as unanswered.
const TRIES: usize = 3;
/// A slow feed sends a row every this long: a sync of one runs for a second or two.
const ROW_EVERY: Duration = Duration::from_millis(15);
/// Rows of an import.
const IMPORT_ROWS: usize = 40;

/// A job an API call accepted (202).
#[derive(Clone, Debug)]
pub struct Accepted {
    pub id: String,
    pub tenant: String,
}

/// What the load saw: answers by status, the 5xx that are not documented 503s, the jobs
/// accepted, the tenants deleted and those a DELETE may have deleted (`Client::delete`).
#[derive(Default)]
pub struct Ledger {
    pub statuses: Mutex<BTreeMap<u16, u64>>,
    pub undocumented: Mutex<Vec<String>>,
    pub accepted: Mutex<Vec<Accepted>>,
    pub deleted: Mutex<Vec<String>>,
    pub maybe_deleted: Mutex<Vec<String>>,
    pub unanswered: AtomicU64,
    pub stream_frames: AtomicU64,
    pub imported: AtomicU64,
}

impl Ledger {
    /// Counts an answer; a 5xx other than a 503 with a documented code is kept whole.
    pub fn count(&self, what: &str, status: u16, body: &Value) {
        *lock(&self.statuses).entry(status).or_default() += 1;
        let documented = matches!(
            body["error"].as_str(),
            Some("store_unavailable" | "shutting_down" | "overloaded")
        );
        if status >= 500 && !(status == 503 && documented) {
            lock(&self.undocumented).push(format!("{what}: {status} {body}"));
        }
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        lock(&self.accepted).clone()
    }

    pub fn deleted(&self) -> Vec<String> {
        lock(&self.deleted).clone()
    }

    pub fn maybe_deleted(&self) -> Vec<String> {
        lock(&self.maybe_deleted).clone()
    }

    /// The tenants never used again: deleted, or maybe deleted.
    pub fn retired(&self) -> HashSet<String> {
        let mut retired: HashSet<String> = self.deleted().into_iter().collect();
        retired.extend(self.maybe_deleted());
        retired
    }

    /// The soak's report: what the ledger counted, the jobs' outcomes, `broken`, and the WARN
    /// lines of `logs`.
    pub fn report(&self, observed: &Observed, broken: Vec<String>, logs: &str) -> Report {
        Report {
            accepted: observed.accepted.len(),
            ended: check::outcomes(observed),
            deleted: observed.deleted.len(),
            maybe_deleted: check::maybe_deleted(observed),
            statuses: lock(&self.statuses).clone(),
            unanswered: self.unanswered.load(Ordering::Relaxed),
            frames: self.stream_frames.load(Ordering::Relaxed),
            imported: self.imported.load(Ordering::Relaxed),
            warnings: check::warnings(logs),
            broken,
        }
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Adds new tenants until `live` of them were not retired: names no other test uses, none
/// within another (`soak<salt>-<n>z`), so the checker can find one tenant's keys by name.
pub fn replenish(tenants: &mut Vec<String>, live: usize, ledger: &Ledger, salt: u16) {
    let retired = ledger.retired();
    let mut have = tenants.iter().filter(|t| !retired.contains(*t)).count();
    while have < live {
        tenants.push(format!("soak{salt}-{}z", tenants.len()));
        have += 1;
    }
}

/// A feed server whose `/slow/<rows>.jsonl` sends `rows` rows, one every `ROW_EVERY`.
pub async fn slow_feeds() -> String {
    let router = axum::Router::new().route("/slow/{name}", get(slow));
    serve(router).await.to_string()
}

/// Each answer closes its connection: a replica keeps no idle connection to the feeds (its
/// feed client would keep one up to 90 s), so its open files at idle are its own.
async fn slow(Path(name): Path<String>) -> impl axum::response::IntoResponse {
    let rows: u64 = name
        .trim_end_matches(".jsonl")
        .parse()
        .unwrap_or(20)
        .min(500);
    let chunks = futures_util::stream::unfold(0u64, move |n| async move {
        if n == rows {
            return None;
        }
        tokio::time::sleep(ROW_EVERY).await;
        let row = format!("{{\"product_key\":\"slow-{n}\",\"name\":\"Slow Mug {n} Navy - L\"}}\n");
        Some((Ok::<_, std::io::Error>(row), n + 1))
    });
    (
        [(axum::http::header::CONNECTION, "close")],
        axum::body::Body::from_stream(chunks),
    )
}

/// One round's load, running until `stop`.
pub struct Load {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Load {
    pub fn start(
        plan: &Plan,
        tenants: &[String],
        replicas: &Replicas,
        ledger: &Arc<Ledger>,
        feeds: &str,
        round: usize,
    ) -> Load {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        // A deleted tenant is never used again: whatever of it exists afterwards came back.
        let retired = ledger.retired();
        let tenants: Vec<&String> = tenants.iter().filter(|t| !retired.contains(*t)).collect();
        for c in 0..plan.clients {
            let own: Vec<String> = tenants
                .iter()
                .copied()
                .skip(c)
                .step_by(plan.clients)
                .cloned()
                .collect();
            let client = Client {
                replicas: replicas.clone(),
                ledger: ledger.clone(),
                feeds: feeds.to_owned(),
                tenants: own,
                jobs: Vec::new(),
                current: String::new(),
                tainted: HashSet::new(),
                rng: Rng((round * 1000 + c) as u64 * 0x9E37_79B9 + 1),
            };
            tasks.spawn(client.run(stop.clone()));
        }
        for s in 0..plan.streams {
            let tenant = tenants[(s * 7 + round) % tenants.len()].clone();
            let stream = Stream {
                replicas: replicas.clone(),
                ledger: ledger.clone(),
                tenant,
            };
            tasks.spawn(stream.run(stop.clone()));
        }
        Load { stop, tasks }
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// A tiny deterministic generator: the soak needs spread, not quality.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

struct Client {
    replicas: Replicas,
    ledger: Arc<Ledger>,
    feeds: String,
    tenants: Vec<String>,
    /// The jobs this client's tenants had accepted, this round.
    jobs: Vec<Accepted>,
    /// The tenant the current action is about.
    current: String,
    /// Tenants a request about went unanswered: a replica paused mid-request may still carry
    /// it out later, so such a tenant is never deleted (what came after would look revived).
    tainted: HashSet<String>,
    rng: Rng,
}

const KINDS: [&str; 3] = ["sync", "enrich", "pair"];

impl Client {
    async fn run(mut self, stop: CancellationToken) {
        while !stop.is_cancelled() && !self.tenants.is_empty() {
            let tenant = self.tenants[self.rng.below(self.tenants.len())].clone();
            self.current = tenant.clone();
            match self.rng.below(100) {
                0..=34 => self.create(&tenant).await,
                35..=59 => self.poll().await,
                60..=66 => self.act("cancel").await,
                67..=73 => self.act("retry").await,
                74..=84 => self.import(&tenant).await,
                85..=89 => self.delete(&tenant).await,
                _ => self.list(&tenant).await,
            }
        }
    }

    async fn create(&mut self, tenant: &str) {
        let kind = KINDS[self.rng.below(KINDS.len())];
        let mut form = vec![("tenant_id", tenant.to_owned())];
        if kind == "sync" {
            let rows = 20 + self.rng.below(120);
            form.push(("source", format!("http://{}/slow/{rows}.jsonl", self.feeds)));
        }
        let key = (self.rng.below(3) == 0).then(|| format!("k{}", self.rng.below(1_000_000)));
        let path = format!("/catalog/{kind}");
        let answer = self
            .send(&path, |b| {
                let b = b.form(&form);
                match &key {
                    Some(k) => b.header("idempotency-key", k),
                    None => b,
                }
            })
            .await;
        self.accept(tenant, answer);
    }

    fn accept(&mut self, tenant: &str, answer: Option<(u16, Value)>) {
        if let Some((202, body)) = answer {
            if let Some(id) = body["job_id"].as_str() {
                let job = Accepted {
                    id: id.to_owned(),
                    tenant: tenant.to_owned(),
                };
                lock(&self.ledger.accepted).push(job.clone());
                self.jobs.push(job);
            }
        }
    }

    async fn poll(&mut self) {
        if let Some(job) = self.pick() {
            self.get(&format!("/catalog/jobs/{}", job.id)).await;
        }
    }

    /// A cancel or a retry of one of this client's jobs.
    async fn act(&mut self, what: &str) {
        let Some(job) = self.pick() else { return };
        let path = format!("/catalog/jobs/{}/{what}", job.id);
        let answer = self.send(&path, |b| b).await;
        if what == "retry" {
            self.accept(&job.tenant, answer);
        }
    }

    async fn import(&mut self, tenant: &str) {
        let from = self.rng.below(1000);
        let body: String = (from..from + IMPORT_ROWS)
            .map(|i| format!("{{\"product_key\":\"im-{i}\",\"name\":\"Imported Lamp {i} Oak\"}}\n"))
            .collect();
        let path = format!("/catalog/products?tenant_id={tenant}");
        let answer = self
            .send(&path, |b| {
                b.header("content-type", "application/x-ndjson")
                    .body(body.clone())
            })
            .await;
        if let Some((200, _)) = answer {
            self.ledger.imported.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Deletes the tenant when none of its jobs is active (409 otherwise); a deleted tenant is
    /// never used again, so whatever of it exists afterwards came back. A DELETE without a
    /// definite answer — none, a 5xx (the store may have carried it out), or any answer after
    /// a try that got none (the replica that got it may carry it out later) — may have
    /// deleted the tenant: it is retired all the same, as maybe deleted (`check` judges it by
    /// its tombstone).
    async fn delete(&mut self, tenant: &str) {
        if self.tainted.contains(tenant) {
            return;
        }
        let path = format!("/catalog/tenants/{tenant}");
        let answer = self.request(Method::DELETE, &path, |b| b).await;
        let retired = match answer {
            Some((200, _)) => &self.ledger.deleted,
            Some((status, _)) if status < 500 && !self.tainted.contains(tenant) => return,
            _ => &self.ledger.maybe_deleted,
        };
        lock(retired).push(tenant.to_owned());
        self.tenants.retain(|t| t != tenant);
        self.jobs.retain(|j| j.tenant != tenant);
    }

    async fn list(&mut self, tenant: &str) {
        let path = match self.rng.below(2) {
            0 => format!("/catalog/jobs?tenant_id={tenant}"),
            _ => format!("/catalog/products?tenant_id={tenant}&limit=20"),
        };
        self.get(&path).await;
    }

    /// One of this client's jobs, its tenant now the current one.
    fn pick(&mut self) -> Option<Accepted> {
        let n = self.jobs.len();
        let job = (n > 0).then(|| self.jobs[self.rng.below(n)].clone())?;
        self.current = job.tenant.clone();
        Some(job)
    }

    async fn get(&mut self, path: &str) -> Option<(u16, Value)> {
        self.request(Method::GET, path, |b| b).await
    }

    async fn send(
        &mut self,
        path: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Option<(u16, Value)> {
        self.request(Method::POST, path, build).await
    }

    /// Sends to a random live replica, trying another when one does not answer (killed,
    /// paused, restarting). Answers the status and JSON body, counted in the ledger.
    async fn request(
        &mut self,
        method: Method,
        path: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Option<(u16, Value)> {
        for _ in 0..TRIES {
            let Some(base) = self.replicas.pick(self.rng.below(usize::MAX)) else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let request = build(
                self.replicas
                    .client()
                    .request(method.clone(), format!("{base}{path}")),
            );
            let Ok(answer) = request.send().await else {
                self.tainted.insert(self.current.clone());
                continue;
            };
            let status = answer.status().as_u16();
            let body = answer.json::<Value>().await.unwrap_or(Value::Null);
            self.ledger
                .count(&format!("{method} {path}"), status, &body);
            return Some((status, body));
        }
        self.ledger.unanswered.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// A tenant event stream, reopened on another replica when its replica goes away.
struct Stream {
    replicas: Replicas,
    ledger: Arc<Ledger>,
    tenant: String,
}

impl Stream {
    async fn run(self, stop: CancellationToken) {
        let mut n = self.tenant.len();
        while !stop.is_cancelled() {
            n += 1;
            let Some(base) = self.replicas.pick(n) else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let url = format!("{base}/catalog/events?tenant_id={}", self.tenant);
            let opened = tokio::select! {
                () = stop.cancelled() => return,
                r = self.replicas.stream_client().get(url).header("accept", "text/event-stream").send() => r,
            };
            let Ok(mut answer) = opened else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let status = answer.status().as_u16();
            if status != 200 {
                let body = answer.json::<Value>().await.unwrap_or(Value::Null);
                self.ledger.count("GET /catalog/events", status, &body);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            self.ledger
                .count("GET /catalog/events", status, &Value::Null);
            loop {
                let chunk = tokio::select! {
                    () = stop.cancelled() => return,
                    c = answer.chunk() => c,
                };
                match chunk {
                    Ok(Some(bytes)) => {
                        let frames = bytes.windows(2).filter(|w| w == b"\n\n").count();
                        self.ledger
                            .stream_frames
                            .fetch_add(frames as u64, Ordering::Relaxed);
                    }
                    _ => break,
                }
            }
        }
    }
}
