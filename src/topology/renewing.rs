//! `Renewing`: a Redis Cluster's connection that is replaced the moment it goes silent, and
//! the calls waiting on it sent again on the new one, within the call's 2 s.
//!
//! Why: redis-rs 1.8.1's cluster connection rebuilds its slot map after a `MOVED`, and while
//! it does no call of it is sent or answered; during a reshard one such rebuild in ~30 never
//! ended (`cluster_reshard`'s test: 65 rebuilds, 63 took 30–140 ms, two hung until the
//! connection was replaced; every request answered 503 in that run, 17 of 17, was waiting on
//! one of the two). Silence is told from a slow call (one waiting out its slot group's move,
//! `TRYAGAIN`, or behind a deep backlog) by a `PING` through the same connection to any node
//! and by the connection's other calls: a connection is silent only when neither the `PING`
//! nor any other call of it got an answer for `PROBE_WAIT`. Knows nothing of jobs or HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisError, RedisResult};
use tokio::time::{timeout_at, Instant};
use tracing::warn;

/// How long a call waits for its answer before the connection is asked whether it answers at
/// all: the longest a healthy call was seen to wait is a slot group's move (up to 670 ms at
/// load 11), so a probe then is a `PING` among many calls, not a verdict.
const SILENT_AFTER: Duration = Duration::from_millis(250);
/// How long the probe's `PING` may take, with no other call of the connection answered
/// meanwhile, before the connection counts as silent: a healthy connection answers it within
/// milliseconds (its node runs it at once, whatever slot moves), but at load 25 on two cores
/// a 300 ms wait for the `PING` alone took a slow answer for silence ~17 times a reshard, and
/// a thousand calls queued at once delay it further (`cluster`'s 1,000-tenant test); a
/// silent one is still found and replaced within 750 ms of the call.
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// The longest one call takes, resends included: the store's own bound.
const CALL_WAIT: Duration = Duration::from_secs(2);
/// How long a new connection may take to find the cluster (dial the seeds, read the slots,
/// dial every node) before a silent probe through it counts: within it a probe that gets no
/// answer keeps the call waiting rather than replacing a connection still being made.
const FRESH_FOR: Duration = Duration::from_millis(500);

/// Makes a cluster connection (lazily: nothing is dialled until its first call).
pub(super) type Connect = Arc<dyn Fn() -> RedisResult<ClusterConnection> + Send + Sync>;

/// The cluster connection in use, shared by every clone; replaced when it goes silent.
#[derive(Clone)]
pub struct Renewing {
    inner: Arc<Inner>,
}

struct Inner {
    connect: Connect,
    current: RwLock<Current>,
}

#[derive(Clone)]
struct Current {
    /// Bumped at each replacement: a silent connection is replaced once, by the first call
    /// that finds it so; the others send again on the replacement.
    generation: u64,
    made: Instant,
    conn: ClusterConnection,
    /// Calls of this connection answered so far (an error is an answer): a connection whose
    /// count moves is not silent, however slow one call is.
    answered: Arc<AtomicU64>,
}

impl Renewing {
    pub(super) fn new(connect: Connect) -> RedisResult<Self> {
        let conn = connect()?;
        Ok(Self {
            inner: Arc::new(Inner {
                connect,
                current: RwLock::new(Current {
                    generation: 0,
                    made: Instant::now(),
                    conn,
                    answered: Arc::default(),
                }),
            }),
        })
    }

    fn current(&self) -> Current {
        self.inner
            .current
            .read()
            .expect("no thread panics while holding the cluster connection")
            .clone()
    }

    /// Replaces the connection of `generation` if it is still the one in use and not too new
    /// to judge; answers whether a newer one is in use now (to send the call again on).
    fn renew(&self, generation: u64) -> bool {
        let mut current = self
            .inner
            .current
            .write()
            .expect("no thread panics while holding the cluster connection");
        if current.generation != generation {
            return true;
        }
        if current.made.elapsed() < FRESH_FOR {
            return false;
        }
        match (self.inner.connect)() {
            Ok(conn) => {
                *current = Current {
                    generation: generation + 1,
                    made: Instant::now(),
                    conn,
                    answered: Arc::default(),
                };
                warn!("the cluster connection answered nothing, not even a PING: replaced");
                true
            }
            Err(e) => {
                warn!(error = %e, "could not make a new cluster connection");
                false
            }
        }
    }

    /// Runs a call (`send` makes it on a connection) and answers its answer; while it waits,
    /// checks every `SILENT_AFTER` that the connection answers a `PING`, and when it does not,
    /// replaces it and sends the call again on the new one. A call sent again may have run on
    /// the silent one (as a client's repeat after a 503 may find); a call that is slow on a
    /// healthy connection is never sent twice. `CALL_WAIT` bounds the whole.
    pub async fn call<'a, T>(
        &self,
        send: impl Fn(ClusterConnection) -> BoxFuture<'a, RedisResult<T>>,
    ) -> RedisResult<T> {
        self.call_on(send, Resend::Yes).await
    }

    /// `call`, for a call that means something only on the connection in use (`WAIT`, which
    /// counts the replicas that have this connection's writes): never sent again; a silent
    /// connection is still replaced, for the calls after it.
    pub async fn call_here<'a, T>(
        &self,
        send: impl Fn(ClusterConnection) -> BoxFuture<'a, RedisResult<T>>,
    ) -> RedisResult<T> {
        self.call_on(send, Resend::No).await
    }

    async fn call_on<'a, T>(
        &self,
        send: impl Fn(ClusterConnection) -> BoxFuture<'a, RedisResult<T>>,
        resend: Resend,
    ) -> RedisResult<T> {
        let deadline = Instant::now() + CALL_WAIT;
        loop {
            let Current {
                generation,
                conn,
                answered,
                ..
            } = self.current();
            let mut answer = send(conn.clone());
            loop {
                let quiet = (Instant::now() + SILENT_AFTER).min(deadline);
                if let Ok(result) = timeout_at(quiet, &mut answer).await {
                    answered.fetch_add(1, Ordering::Relaxed);
                    return result;
                }
                if Instant::now() >= deadline {
                    return Err(timed_out());
                }
                let before = answered.load(Ordering::Relaxed);
                let probe = answers_ping(conn.clone(), deadline);
                tokio::select! {
                    result = &mut answer => {
                        answered.fetch_add(1, Ordering::Relaxed);
                        return result;
                    }
                    alive = probe => if alive || answered.load(Ordering::Relaxed) != before {
                        continue;
                    },
                }
                if Instant::now() < deadline && self.renew(generation) && resend == Resend::Yes {
                    break;
                }
            }
        }
    }
}

/// Whether a call may be sent again on a new connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resend {
    Yes,
    No,
}

/// Whether `conn` answers a `PING` (to any node) within `PROBE_WAIT` (and before `deadline`).
/// An error is an answer: a node that refuses or is gone (a failover) is followed by redis-rs
/// itself, and a new connection would not change it.
async fn answers_ping(mut conn: ClusterConnection, deadline: Instant) -> bool {
    let until = (Instant::now() + PROBE_WAIT).min(deadline);
    let ping = conn.route_command(
        redis::cmd("PING"),
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
    );
    timeout_at(until, ping).await.is_ok()
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer from the cluster within 2 s",
    ))
}
