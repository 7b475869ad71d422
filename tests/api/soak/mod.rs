//! The soak: three replicas of the built binary on one Redis (append-only, on loopback), mixed
//! load from many clients across hundreds of tenants — creates of every kind, polls, cancels,
//! retries, imports, deletes, tenant event streams — while, one per round, a replica is killed
//! (`kill -9`), paused past its lease (SIGSTOP, then SIGCONT), stopped (SIGTERM) and Redis
//! restarts. Afterwards the invariant checker (`check`): every accepted job ended, `lost` only
//! with its attempts spent, no two runs of one tenant+kind overlapped, nothing of a deleted
//! tenant is left, no 5xx but the documented 503s, and the untouched replica's RSS and open
//! files flat across rounds.
//!
//! The suite runs a one-minute soak; `scripts/soak.sh --minutes 30` runs the same with
//! `SOAK_MINUTES` (the ignored `the_long_soak…` test) and prints the figures
//! docs/reliability.md records.

mod chaos;
mod check;
mod load;

use std::sync::Arc;
use std::time::Duration;

use crate::helpers::{free_port, RedisServer};
use chaos::{Fault, Replicas};
use load::{Ledger, Load};

/// Attempts a job gets: a job whose runs keep dying ends `failed`/`Lost` after this many.
pub const MAX_ATTEMPTS: u32 = 3;
/// How long the service may take to end every accepted job once the load stops.
const DRAIN: Duration = Duration::from_secs(90);
/// After a round's load stops, how long the replicas idle before their memory is read.
const IDLE: Duration = Duration::from_secs(3);

/// A soak's size.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub rounds: usize,
    /// The load of one round (its fault strikes in the middle).
    pub round: Duration,
    pub tenants: usize,
    pub clients: usize,
    /// Tenant event streams held open during a round.
    pub streams: usize,
}

impl Plan {
    /// The suite's version: four rounds (one of each fault) in about a minute.
    fn short() -> Plan {
        Plan {
            rounds: 4,
            round: Duration::from_secs(10),
            tenants: 300,
            clients: 12,
            streams: 20,
        }
    }

    /// `minutes` of load, the faults in turn, one round every 30 s.
    fn long(minutes: u64) -> Plan {
        let round = Duration::from_secs(30);
        Plan {
            rounds: ((minutes * 60) / (round.as_secs() + IDLE.as_secs())).max(4) as usize,
            round,
            tenants: 600,
            clients: 16,
            streams: 40,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minute_of_mixed_load_through_kill_pause_sigterm_and_a_redis_restart_keeps_every_invariant(
) {
    soak(Plan::short()).await;
}

/// `scripts/soak.sh --minutes N` runs this with `SOAK_MINUTES=N`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "long: run with scripts/soak.sh --minutes 30"]
async fn the_long_soak_keeps_every_invariant() {
    let minutes = std::env::var("SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    soak(Plan::long(minutes)).await;
}

async fn soak(plan: Plan) {
    let started = std::time::Instant::now();
    let mut redis = RedisServer::start(true);
    let feeds = load::slow_feeds().await;
    let replicas = Replicas::start(&redis, &feeds).await;
    let ledger = Arc::new(Ledger::default());
    let tenants = load::tenants(plan.tenants, free_port());
    let mut memory = Vec::new();
    for round in 0..plan.rounds {
        let fault = Fault::ALL[round % Fault::ALL.len()];
        let load = Load::start(&plan, &tenants, &replicas, &ledger, &feeds, round);
        tokio::time::sleep(plan.round / 2).await;
        fault.strike(&replicas, &mut redis).await;
        tokio::time::sleep(plan.round / 2).await;
        load.stop().await;
        tokio::time::sleep(IDLE).await;
        let figure = replicas.untouched_memory();
        eprintln!("soak round {}: {fault:?}; {figure}", round + 1);
        memory.push(figure);
    }
    let report = check::after(&replicas, &redis, &ledger, DRAIN).await;
    eprintln!(
        "soak: {} rounds of {:?} in {:?}; {report}",
        plan.rounds,
        plan.round,
        started.elapsed()
    );
    check::memory_is_flat(&memory);
    report.assert_held();
}
