//! The soak's checker would fail without the guarantees it claims: each test plants one breach
//! (an overlap, a lost 202, a deleted tenant's leftover key, a 5xx, a slow leak) into
//! otherwise clean observations and sees it reported, and sees the clean ones pass.

use serde_json::{json, Value};

use super::chaos::Memory;
use super::check::{judge, memory_broken, Observed, Remains};
use super::fds::OpenFiles;
use super::load::{Accepted, Ledger};

const LIVE: &str = "soak1-1z";
const GONE: &str = "soak1-2z";

fn accepted(id: &str, tenant: &str) -> Accepted {
    Accepted {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
    }
}

fn job(id: &str, status: &str, attempt: u64) -> Value {
    json!({"job_id": id, "tenant_id": LIVE, "kind": "sync", "status": status, "attempt": attempt})
}

/// A timeline that started at `start` and finished at `end` (ms).
fn timeline(start: u64, end: u64) -> Value {
    json!({"events": [
        {"type": "created", "at": start - 5},
        {"type": "started", "at": start},
        {"type": "progress", "at": start + 1},
        {"type": "finished", "at": end},
    ]})
}

/// Two syncs of one live tenant, one after the other; a deleted tenant with one job, gone
/// whole but for its tombstone.
fn clean() -> Observed {
    let mut o = Observed::default();
    for (id, start, end) in [("a", 100, 200), ("b", 200, 300)] {
        o.accepted.push(accepted(id, LIVE));
        o.jobs.insert(id.into(), Some((200, job(id, "done", 1))));
        o.timelines
            .insert(id.into(), Some((200, timeline(start, end))));
    }
    o.accepted.push(accepted("c", GONE));
    o.deleted.insert(GONE.into());
    o.gone_jobs
        .insert("c".into(), Some((404, json!({"error": "not_found"}))));
    let remains = Remains {
        listed: Some((200, json!({"jobs": []}))),
        products: Some((200, json!({"products": []}))),
        keys: vec![format!("job:tenant:{GONE}:gone")],
    };
    o.remains.insert(GONE.into(), remains);
    o
}

fn breaks(o: &Observed, words: &str) {
    let broken = judge(o);
    assert!(
        broken.iter().any(|b| b.contains(words)),
        "expected a breach saying {words:?}, got {broken:?}"
    );
}

#[test]
fn the_soak_checker_passes_clean_observations() {
    assert_eq!(judge(&clean()), Vec::<String>::new());
}

#[test]
fn the_soak_checker_catches_two_runs_of_one_tenant_and_kind_overlapping() {
    let mut o = clean();
    o.timelines
        .insert("b".into(), Some((200, timeline(199, 300))));
    breaks(&o, "overlapped: b started 1 ms before a ended");
    let mut o = clean();
    o.jobs.insert("a".into(), Some((200, job("a", "lost", 3))));
    let events = json!({"events": [{"type": "started", "at": 100}]});
    o.timelines.insert("a".into(), Some((200, events)));
    breaks(&o, "overlapped");
    let mut o = clean();
    o.timelines.insert(
        "b".into(),
        Some((200, json!({"events": [{"type": "started", "at": 250}]}))),
    );
    breaks(&o, "its timeline has no end");
}

#[test]
fn the_soak_checker_catches_a_lost_202_a_job_left_running_and_lost_with_attempts_left() {
    let mut o = clean();
    o.jobs
        .insert("a".into(), Some((404, json!({"error": "not_found"}))));
    breaks(
        &o,
        "job a of tenant soak1-1z was accepted (202) but did not end",
    );
    let mut o = clean();
    o.jobs.remove("b");
    breaks(
        &o,
        "job b of tenant soak1-1z was accepted (202) but did not end",
    );
    let mut o = clean();
    o.jobs
        .insert("a".into(), Some((200, job("a", "running", 1))));
    breaks(&o, "did not end");
    let mut o = clean();
    o.jobs.insert("a".into(), Some((200, job("a", "lost", 2))));
    breaks(&o, "lost after 2 of 3 attempts");
    // Asked to stop, its worker silent: it reads cancelling, then cancelled, never lost.
    let mut o = clean();
    let mut cancelling = job("a", "lost", 1);
    cancelling["cancel_requested_at"] = json!("2026-12-02T18:07:43.273Z");
    o.jobs.insert("a".into(), Some((200, cancelling)));
    breaks(&o, "lost after 1 of 3 attempts");
}

#[test]
fn the_soak_checker_catches_anything_of_a_deleted_tenant_left() {
    let mut o = clean();
    let left = format!("job:idem:{GONE}:sync:k1");
    o.remains.get_mut(GONE).unwrap().keys.push(left.clone());
    breaks(&o, &format!("left keys: [\"{left}\"]"));
    let mut o = clean();
    let staging = format!("catalog:{GONE}:neighbours:staging:x:gone");
    o.remains.get_mut(GONE).unwrap().keys.push(staging);
    breaks(&o, "left keys");
    let mut o = clean();
    o.gone_jobs
        .insert("c".into(), Some((200, job("c", "done", 1))));
    breaks(&o, "job c of deleted tenant soak1-2z is not gone");
    let mut o = clean();
    o.remains.get_mut(GONE).unwrap().products = Some((200, json!({"products": [{}]})));
    breaks(&o, "has products");
    let mut o = clean();
    o.remains.get_mut(GONE).unwrap().listed = None;
    breaks(&o, "lists jobs: None");
}

/// `clean()` with a third tenant a DELETE may have deleted: its one job `d` read `answer`,
/// and `keys` of it are left in Redis.
fn maybe_deleted(answer: Value, keys: &[&str]) -> Observed {
    const MAYBE: &str = "soak1-3z";
    let mut o = clean();
    o.accepted.push(accepted("d", MAYBE));
    o.maybe_deleted.insert(MAYBE.into());
    let status = if answer["error"] == "not_found" {
        404
    } else {
        200
    };
    o.jobs.insert("d".into(), Some((status, answer.clone())));
    o.gone_jobs.insert("d".into(), Some((status, answer)));
    if status == 200 {
        o.timelines
            .insert("d".into(), Some((200, timeline(400, 500))));
    }
    let remains = Remains {
        listed: Some((200, json!({"jobs": []}))),
        products: Some((200, json!({"products": []}))),
        keys: keys.iter().map(|k| k.replace("{t}", MAYBE)).collect(),
    };
    o.remains.insert(MAYBE.into(), remains);
    o
}

#[test]
fn the_soak_checker_takes_a_delete_without_an_answer_either_way_but_a_deleted_tenant_whole() {
    let gone = json!({"error": "not_found"});
    let done = job("d", "done", 1);
    let tombstone = "job:tenant:{t}:gone";
    // Carried out after all (its tombstone stands), or not (its job ended): both hold.
    assert_eq!(
        judge(&maybe_deleted(gone.clone(), &[tombstone])),
        Vec::<String>::new()
    );
    let kept = ["catalog:{t}:products", "job:tenant:{t}"];
    assert_eq!(
        judge(&maybe_deleted(done.clone(), &kept)),
        Vec::<String>::new()
    );
    // Carried out, then judged as deleted: nothing of it but its tombstone, no job.
    let staging = "catalog:{t}:neighbours:staging:x";
    breaks(
        &maybe_deleted(gone.clone(), &[tombstone, staging]),
        "left keys",
    );
    breaks(
        &maybe_deleted(done, &[tombstone]),
        "job d of deleted tenant soak1-3z is not gone",
    );
    // Not carried out, then judged as live: its job must have ended.
    breaks(
        &maybe_deleted(gone, &[]),
        "job d of tenant soak1-3z was accepted (202) but did not end",
    );
}

#[test]
fn the_soak_checker_catches_a_5xx_but_not_a_documented_503() {
    let ledger = Ledger::default();
    for code in ["store_unavailable", "shutting_down", "overloaded"] {
        ledger.count("GET /catalog/jobs/a", 503, &json!({"error": code}));
    }
    let mut o = clean();
    o.undocumented = super::load::lock(&ledger.undocumented).clone();
    assert_eq!(judge(&o), Vec::<String>::new());
    ledger.count("POST /catalog/sync", 500, &json!({"error": "internal"}));
    ledger.count("GET /catalog/jobs/a", 503, &json!({"error": "panicked"}));
    o.undocumented = super::load::lock(&ledger.undocumented).clone();
    breaks(&o, "POST /catalog/sync: 500");
    breaks(&o, "GET /catalog/jobs/a: 503");
}

fn rounds(figures: &[(u64, usize)]) -> Vec<Memory> {
    figures
        .iter()
        .map(|&(mb, fds)| Memory {
            settled: true,
            rss_kb: mb * 1024,
            threads: 0,
            files: OpenFiles {
                total: fds,
                ..OpenFiles::default()
            },
        })
        .collect()
}

#[test]
fn the_soak_checker_catches_a_slow_leak_each_round_within_ten_percent_of_the_last() {
    let steady = rounds(&[(30, 40), (38, 28), (39, 27), (38, 28), (40, 27), (39, 28)]);
    assert_eq!(memory_broken(&steady), Vec::<String>::new());
    // Each round under 6 % above the one before; rounds 4 and 5 beyond 10 % above round 2.
    let creeping = rounds(&[(30, 20), (38, 20), (40, 20), (42, 20), (44, 20)]);
    let broken = memory_broken(&creeping);
    assert!(
        broken.len() == 2 && broken[0].starts_with("RSS in round 4"),
        "{broken:?}"
    );
    let sockets = rounds(&[(30, 20), (30, 20), (30, 21), (30, 22), (30, 23), (30, 24)]);
    let broken = memory_broken(&sockets);
    assert!(
        broken.len() == 2 && broken[0].starts_with("open files in round 5"),
        "{broken:?}"
    );
}
