//! The job kinds tests run through the real runner, and `Gate`: a job holds at its
//! tenant's gate until the test releases it, so tests wait on signals, not sleeps.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use catalog_jobs::jobs::params::{bool_field, only_fields, ParamError};
use catalog_jobs::jobs::registry::{ErrorClass, JobError, Registry};
use catalog_jobs::jobs::TenantId;
use serde_json::json;
use tokio::sync::{watch, Semaphore};

#[derive(Debug, thiserror::Error)]
pub enum TestError {
    #[error("the feed at customer-secret.example could not be reached")]
    SourceUnreachable,
}

impl ErrorClass for TestError {
    fn class(&self) -> &'static str {
        "SourceUnreachable"
    }
}

/// A gate a test holds a job at: the job says it has started, then blocks until released.
pub struct Gate {
    pub started: watch::Sender<bool>,
    release: Semaphore,
}

/// How long a job holds at its gate at the most: a test that failed before releasing it must
/// not leave the blocking thread behind (the runtime would wait for it, and the test binary
/// hang). Long enough for a test that lines up thousands of jobs behind gated ones on a
/// loaded machine.
const GATE_HOLDS_AT_MOST: Duration = Duration::from_secs(120);

static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Default::default);

impl Gate {
    /// The gate for jobs of this tenant (made on first use by either side).
    pub fn of(tenant: &TenantId) -> Arc<Gate> {
        GATES
            .lock()
            .expect("the gate map is never poisoned")
            .entry(tenant.to_string())
            .or_insert_with(|| {
                Arc::new(Gate {
                    started: watch::channel(false).0,
                    release: Semaphore::new(0),
                })
            })
            .clone()
    }

    /// Waits (10 s at most) until a job has reached the gate.
    pub async fn reached(&self) {
        let mut rx = self.started.subscribe();
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|s| *s))
            .await
            .expect("the job reached its gate within 10 s")
            .expect("the gate lives");
    }

    pub fn release(&self) {
        self.release.add_permits(1);
    }

    /// The job's side: announce, then block this (blocking) thread until released, or until
    /// the job is asked to stop (answering false).
    fn pass(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        self.started.send_replace(true);
        tokio::runtime::Handle::current().block_on(async {
            tokio::select! {
                permit = self.release.acquire() => {
                    permit.expect("the gate's semaphore is never closed").forget();
                    true
                }
                () = cancel.cancelled() => false,
                () = tokio::time::sleep(GATE_HOLDS_AT_MOST) => false,
            }
        })
    }
}

/// The kinds the tests run through the real service:
/// - `ticker` (`n`, default 10): reports n evenly spaced ticks, answers `{"ticks": n}`;
/// - `fail`: fails with `SourceUnreachable` (its message stands for customer data);
/// - `panic`: panics;
/// - `gated`: reports 50 %, then waits at its tenant's gate; answers `{"gated": true}`, or
///   stops with `Cancelled` when asked to while it waits.
pub fn test_registry() -> Registry {
    Registry::new()
        .with(
            "ticker",
            |fields| {
                only_fields(fields, &["n", "slow"])?;
                let n = match fields.get("n").and_then(|v| v.first()) {
                    None => 10,
                    Some(v) => v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                        .ok_or_else(|| ParamError::invalid("n", "n must be a whole number"))?,
                };
                let slow = bool_field(fields, "slow")?.unwrap_or(false);
                Ok(json!({ "n": n, "slow": slow }))
            },
            |input, progress| {
                let n = input.params["n"].as_u64().unwrap_or(10);
                let slow = input.params["slow"].as_bool().unwrap_or(false);
                for i in 1..=n {
                    if slow {
                        // Stands for real work between ticks, so a poller can watch it move.
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    if let Some(p) = progress {
                        p((i * 100 / n.max(1)) as u8, &format!("tick {i} of {n}"));
                    }
                }
                Ok(json!({ "ticks": n }))
            },
        )
        .with_plain("fail", |_, _| {
            Err(JobError::from(TestError::SourceUnreachable))
        })
        .with_plain("panic", |_, _| panic!("the job function fell over"))
        .with_plain("gated", |input, progress| {
            if let Some(p) = progress {
                p(50, "waiting at the gate");
            }
            if !Gate::of(&input.tenant).pass(&input.cancel) {
                return Err(JobError::cancelled());
            }
            Ok(json!({ "gated": true }))
        })
}
