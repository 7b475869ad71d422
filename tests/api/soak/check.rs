//! The soak's invariants, judged from what `observe` read once the load stopped: every
//! accepted job ended, `lost` only with its attempts spent, no two runs of one tenant+kind
//! overlapped, nothing of a deleted tenant is left, no 5xx but the documented 503s, and the
//! untouched replica's idle memory and open files flat. Pure functions of the observations,
//! so `check_tests` plants each breach and sees it reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde_json::Value;

use super::chaos::Memory;
use super::load::Accepted;
use super::MAX_ATTEMPTS;

/// Growth of an idle figure that still counts as flat.
const FLAT: f64 = 1.10;
/// Rounds whose figures only warm up (the allocator's heaps, connection pools): the first is never
/// judged nor a baseline.
const WARM_UP_ROUNDS: usize = 1;

/// An answer as read: its status and JSON body, `None` when no replica answered.
pub type Answer = Option<(u16, Value)>;

/// What a deleted tenant looked like afterwards.
#[derive(Debug, Default)]
pub struct Remains {
    /// `GET /catalog/jobs?tenant_id=…`
    pub listed: Answer,
    /// `GET /catalog/products?tenant_id=…`
    pub products: Answer,
    /// Every Redis key whose name holds the tenant's.
    pub keys: Vec<String>,
}

/// Everything the checker judges, read after the load stopped and the jobs drained.
#[derive(Debug, Default)]
pub struct Observed {
    /// Every job a 202 accepted, with its tenant.
    pub accepted: Vec<Accepted>,
    /// Tenants a 200 deleted (none of them was used again).
    pub deleted: HashSet<String>,
    /// Tenants a DELETE without a definite answer may have deleted (none of them was used
    /// again either): each is judged deleted if its tombstone stands, else live.
    pub maybe_deleted: HashSet<String>,
    /// Each accepted job of a live or maybe deleted tenant: its last answer (an ended one
    /// once it ended; for a maybe deleted tenant, a 404 too).
    pub jobs: HashMap<String, Answer>,
    /// Each ended job's timeline answer.
    pub timelines: HashMap<String, Answer>,
    /// Each accepted job of a deleted or maybe deleted tenant: what `GET /catalog/jobs/{id}`
    /// answers now.
    pub gone_jobs: HashMap<String, Answer>,
    /// Each deleted or maybe deleted tenant's remains.
    pub remains: BTreeMap<String, Remains>,
    /// Every 5xx answer that was not a documented 503, as the ledger kept it.
    pub undocumented: Vec<String>,
}

/// Every invariant `observed` breaks, in words.
pub fn judge(observed: &Observed) -> Vec<String> {
    let mut broken = Vec::new();
    let deleted = deleted(observed);
    for job in &observed.accepted {
        if deleted.contains(job.tenant.as_str()) {
            continue;
        }
        match observed.jobs.get(&job.id) {
            Some(Some((200, body))) if ended(body) => lost_only_when_spent(body, &mut broken),
            answer => broken.push(format!(
                "job {} of tenant {} was accepted (202) but did not end: {answer:?}",
                job.id, job.tenant
            )),
        }
    }
    broken.extend(overlaps(observed));
    broken.extend(left_behind(observed, &deleted));
    broken.extend(observed.undocumented.iter().cloned());
    broken
}

/// The tenants judged deleted: those a 200 deleted, and those maybe deleted whose tombstone
/// stands (`<prefix>:tenant:<tenant>:gone`: the delete was carried out after all). A maybe
/// deleted tenant without one is judged live: every job of it must have ended.
fn deleted(observed: &Observed) -> HashSet<&str> {
    let tombstoned = observed.maybe_deleted.iter().filter(|t| {
        let tombstone = tombstone(t);
        observed
            .remains
            .get(*t)
            .is_some_and(|r| r.keys.iter().any(|k| k.ends_with(&tombstone)))
    });
    observed
        .deleted
        .iter()
        .chain(tombstoned)
        .map(String::as_str)
        .collect()
}

/// The end of a tenant's tombstone key's name.
fn tombstone(tenant: &str) -> String {
    format!(":tenant:{tenant}:gone")
}

/// How many tenants were maybe deleted, and how many of them were (their tombstone stands).
pub fn maybe_deleted(observed: &Observed) -> (usize, usize) {
    let judged = deleted(observed).len() - observed.deleted.len();
    (observed.maybe_deleted.len(), judged)
}

/// A job's ended answers counted by outcome (`done`, `failed/Lost`, …).
pub fn outcomes(observed: &Observed) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for (_, body) in observed.jobs.values().flatten() {
        if ended(body) {
            *by.entry(outcome(body)).or_default() += 1;
        }
    }
    by
}

fn outcome(job: &Value) -> String {
    match job["error"].as_str() {
        Some(class) => format!("{}/{class}", job["status"].as_str().unwrap_or("?")),
        None => job["status"].as_str().unwrap_or("?").to_owned(),
    }
}

pub fn ended(job: &Value) -> bool {
    matches!(
        job["status"].as_str(),
        Some("done" | "failed" | "cancelled" | "lost")
    )
}

/// A job reads `lost` (or failed `Lost`) only once its attempts are spent.
fn lost_only_when_spent(job: &Value, broken: &mut Vec<String>) {
    // A job asked to stop whose worker went silent reads `cancelling`, then `cancelled`
    // (`conformance::a_cancelling_job_that_goes_silent_reads_cancelling_until_…`), never lost.
    let lost = job["status"] == "lost" || job["error"] == "Lost";
    let attempts = job["attempt"].as_u64().unwrap_or(0);
    if lost && attempts < u64::from(MAX_ATTEMPTS) {
        broken.push(format!(
            "lost after {attempts} of {MAX_ATTEMPTS} attempts: {job}"
        ));
    }
}

/// A job's run: from its first `started` to its end (ms, the store's clock), and its id.
type Span = (u64, u64, String);

/// From each ended job's timeline, its span; no two of one tenant+kind may overlap (single
/// flight). A timeline that cannot be read, or a started job with no end in it, breaks too.
fn overlaps(observed: &Observed) -> Vec<String> {
    let mut broken = Vec::new();
    let mut spans: BTreeMap<(String, String), Vec<Span>> = BTreeMap::new();
    for (id, answer) in &observed.jobs {
        let Some((200, job)) = answer else { continue };
        if !ended(job) {
            continue;
        }
        let timeline = match observed.timelines.get(id) {
            Some(Some((200, timeline))) => timeline,
            other => {
                broken.push(format!("job {id}'s timeline could not be read: {other:?}"));
                continue;
            }
        };
        let key = (job["tenant_id"].to_string(), job["kind"].to_string());
        match span(job, timeline) {
            Ok(Some((start, end))) => spans.entry(key).or_default().push((start, end, id.clone())),
            Ok(None) => {} // never started (cancelled while queued)
            Err(why) => broken.push(format!("job {id}: {why}: {timeline}")),
        }
    }
    for ((tenant, kind), mut runs) in spans {
        runs.sort();
        for pair in runs.windows(2) {
            let ((_, end, a), (start, _, b)) = (&pair[0], &pair[1]);
            if start < end {
                broken.push(format!(
                    "{kind} jobs {a} and {b} of tenant {tenant} overlapped: {b} started {} ms before {a} ended",
                    end.saturating_sub(*start).min(u64::from(u32::MAX))
                ));
            }
        }
    }
    broken
}

/// A timeline's first `started` and its last ending event (`finished`, `superseded`, `lost`);
/// `None` when it never started. A `lost` job keeps its lock until a newer job supersedes it,
/// so without an ending event it spans to the end of time; any other ended job must have one.
fn span(job: &Value, timeline: &Value) -> Result<Option<(u64, u64)>, &'static str> {
    let events = timeline["events"].as_array().ok_or("no events")?;
    let at = |e: &Value| e["at"].as_u64().unwrap_or(0);
    let Some(start) = events.iter().find(|e| e["type"] == "started").map(at) else {
        return Ok(None);
    };
    let end = events
        .iter()
        .rev()
        .find(|e| matches!(e["type"].as_str(), Some("finished" | "superseded" | "lost")))
        .map(at);
    match (end, job["status"].as_str()) {
        (Some(end), _) => Ok(Some((start, end))),
        (None, Some("lost")) => Ok(Some((start, u64::MAX))),
        (None, _) => Err("started and ended, but its timeline has no end"),
    }
}

/// A deleted tenant has no job (by id or listed), no product and no Redis key but its
/// tombstone (`<prefix>:tenant:<tenant>:gone`); a probe no replica answered breaks too (it proves nothing).
fn left_behind(observed: &Observed, deleted: &HashSet<&str>) -> Vec<String> {
    let mut broken = Vec::new();
    for job in &observed.accepted {
        if !deleted.contains(job.tenant.as_str()) {
            continue;
        }
        match observed.gone_jobs.get(&job.id) {
            Some(Some((404, _))) => {}
            answer => broken.push(format!(
                "job {} of deleted tenant {} is not gone: {answer:?}",
                job.id, job.tenant
            )),
        }
    }
    for &tenant in deleted {
        let Some(remains) = observed.remains.get(tenant) else {
            broken.push(format!("deleted tenant {tenant} was not probed"));
            continue;
        };
        if !empty(&remains.listed, "jobs") {
            broken.push(format!(
                "deleted tenant {tenant} lists jobs: {:?}",
                remains.listed
            ));
        }
        if !empty(&remains.products, "products") {
            broken.push(format!(
                "deleted tenant {tenant} has products: {:?}",
                remains.products
            ));
        }
        let tombstone = tombstone(tenant);
        let left: Vec<&String> = remains
            .keys
            .iter()
            .filter(|k| !k.ends_with(&tombstone))
            .collect();
        if !left.is_empty() {
            broken.push(format!("deleted tenant {tenant} left keys: {left:?}"));
        }
    }
    broken
}

/// A 200 whose `field` is an empty array.
fn empty(answer: &Answer, field: &str) -> bool {
    matches!(answer, Some((200, body)) if body[field].as_array().is_some_and(Vec::is_empty))
}

/// The untouched replica's idle figures, round by round: after the warm-up, each within
/// `FLAT` of the lowest of the rounds before it (from the end of the warm-up on), so a slow
/// leak cannot pass by growing less than `FLAT` a round. RSS is judged in MB and open files
/// as a count, each with a small absolute floor (a page-sized wobble, one socket). A round
/// whose jobs had not all ended is no idle figure: it is neither judged nor a baseline, and
/// fewer than two idle rounds after the warm-up is a breach (nothing was judged).
pub fn memory_broken(rounds: &[Memory]) -> Vec<String> {
    /// Growth in kB below which RSS counts as flat whatever the ratio (allocator pages).
    const RSS_FLOOR_KB: f64 = 1024.0;
    /// Open files that may come and go (a Redis reconnection in flight).
    const FDS_FLOOR: f64 = 1.0;
    let idle: Vec<(usize, Memory)> = rounds
        .iter()
        .copied()
        .enumerate()
        .skip(WARM_UP_ROUNDS)
        .filter(|(_, m)| m.settled)
        .collect();
    if idle.len() < 2 {
        return vec![format!(
            "memory not judged: {} idle rounds after the warm-up: {rounds:?}",
            idle.len()
        )];
    }
    let mut broken = Vec::new();
    for i in 1..idle.len() {
        let low_rss = idle[..i].iter().map(|(_, m)| m.rss_kb).min().unwrap_or(0) as f64;
        let low_fds = idle[..i]
            .iter()
            .map(|(_, m)| m.files.total)
            .min()
            .unwrap_or(0) as f64;
        let (round, now) = (idle[i].0 + 1, idle[i].1);
        if now.rss_kb as f64 > (low_rss * FLAT).max(low_rss + RSS_FLOOR_KB) {
            broken.push(format!(
                "RSS in round {round} ({now}) beyond {FLAT} × the lowest before it ({:.1} MB): {rounds:?}",
                low_rss / 1024.0
            ));
        }
        if now.files.total as f64 > (low_fds * FLAT).max(low_fds + FDS_FLOOR) {
            broken.push(format!(
                "open files in round {round} ({now}) beyond {FLAT} × the lowest before it ({low_fds}): {rounds:?}"
            ));
        }
    }
    broken
}

/// The WARN lines of `logs` counted by message: the text after `WARN` up to its first field.
pub fn warnings(logs: &str) -> BTreeMap<String, usize> {
    /// Longest message kept as a key.
    const KEPT: usize = 100;
    let mut by = BTreeMap::new();
    for line in logs.lines() {
        let Some((_, said)) = line.split_once(" WARN ") else {
            continue;
        };
        let end = said
            .find('=')
            .map_or(said.len(), |i| said[..i].rfind(' ').unwrap_or(i));
        let message: String = said[..end].trim().chars().take(KEPT).collect();
        *by.entry(message).or_default() += 1;
    }
    by
}

/// What the soak saw and broke: counts to print, and every broken invariant.
pub struct Report {
    pub accepted: usize,
    pub ended: BTreeMap<String, usize>,
    pub deleted: usize,
    /// Tenants maybe deleted, and how many of those were.
    pub maybe_deleted: (usize, usize),
    pub statuses: BTreeMap<u16, u64>,
    pub unanswered: u64,
    pub frames: u64,
    pub imported: u64,
    /// WARN lines of the live replicas' logs by what they say (their fields left out).
    pub warnings: BTreeMap<String, usize>,
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
            "{} jobs accepted, ended {:?}; {} tenants deleted, {} maybe deleted (a DELETE without a definite answer; {} of them were); answers by status {:?}; {} requests unanswered (replica down); {} stream frames; {} imports; WARN lines in the live replicas' logs by message {:?}; {} invariants broken",
            self.accepted,
            self.ended,
            self.deleted,
            self.maybe_deleted.0,
            self.maybe_deleted.1,
            self.statuses,
            self.unanswered,
            self.frames,
            self.imported,
            self.warnings,
            self.broken.len()
        )
    }
}
