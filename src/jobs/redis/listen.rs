//! The store's listener: one pub/sub connection per process that hears the store's channel
//! (`wake:<tag>`, `cancel:<id>`, `end:<id>`) and the channels of the tenants this process watches,
//! subscribing again after a broken connection or a failover.
//!
//! It hands what it hears on (a broadcast of [`Event`]s, the tenant [`Watchers`]) and never
//! reads or writes a job. On a single Redis it names the tenant channels it follows to the job
//! library (`Naming`): the scripts publish a tenant's changes only to channels named there.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tracing::warn;

use super::super::keys::{Group, Keys};
use super::super::store::Event;
use super::super::timeline::JobChange;
use super::super::watch::Watchers;
use super::super::{JobId, TenantId};
use super::scripts;
use super::{ALL_GROUPS, CALL_TIMEOUT};
use crate::topology::{Primary, Target};

/// How long the event listener waits before subscribing again after its connection broke;
/// it doubles while Redis stays away, up to `RESUBSCRIBE_MAX_DELAY` (the dispatcher's own
/// re-check and `wait=true`'s re-read cover the gap).
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(4);

/// What the listener needs: where to subscribe, and whom to tell.
pub(super) struct Listener {
    pub primary: Primary,
    /// The store's channel (`wake:<tag>`, `cancel:<id>`, `end:<id>`).
    pub channel: String,
    pub keys: Keys,
    pub tx: broadcast::Sender<Event>,
    pub live: Arc<AtomicBool>,
    pub watchers: Arc<Watchers>,
    /// The groups whose queue may have work (`RedisStore::pending`): a wake-up sets its
    /// group's bit before the dispatcher hears of it.
    pub pending: Arc<AtomicU64>,
}

/// Reads the store's channel into `tx`, and the watched tenants' channels into `watchers`,
/// for as long as the process lives, on a pub/sub connection of its own: subscribing again
/// after a broken connection or when the primary moved (backing off while Redis is away,
/// logging once per outage), and telling subscribers to re-check (`Resync`) whenever the
/// subscription is live again. `watched` says when the set of watched tenants changed: the
/// tenant channels follow it (subscribed while a watch is held, dropped after the last).
pub(super) async fn listen(l: Listener, mut watched: mpsc::UnboundedReceiver<()>) {
    let mut delay = RESUBSCRIBE_DELAY;
    let mut failing = false;
    let mut moved = l.primary.changes();
    loop {
        moved.mark_unchanged();
        let connected = tokio::time::timeout(CALL_TIMEOUT, async {
            let client = l.primary.client().await?;
            let (mut sink, stream) = client.get_async_pubsub().await?.split();
            sink.subscribe(&l.channel).await?;
            let naming = match l.primary.target() {
                Target::Cluster { .. } => None,
                _ => Some(Naming::new(
                    client.get_multiplexed_async_connection().await?,
                )),
            };
            redis::RedisResult::Ok((sink, stream, naming))
        })
        .await;
        match connected {
            Ok(Ok((mut sink, mut messages, mut naming))) => {
                let mut tenants = HashSet::new();
                let synced = follow_watched(&l, &mut sink, &mut tenants, &mut naming).await;
                if synced.is_ok() {
                    l.live.store(true, Ordering::Release);
                    // A wake-up may have gone by while no subscription was live.
                    l.pending.fetch_or(ALL_GROUPS, Ordering::AcqRel);
                    let _ = l.tx.send(Event::Resync);
                    l.watchers.resync();
                    (delay, failing) = (RESUBSCRIBE_DELAY, false);
                    loop {
                        tokio::select! {
                            msg = messages.next() => match msg {
                                Some(msg) => l.dispatch(&msg),
                                None => break,
                            },
                            Some(()) = watched.recv() => {
                                let followed =
                                    follow_watched(&l, &mut sink, &mut tenants, &mut naming);
                                if followed.await.is_err() {
                                    break;
                                }
                            }
                            () = Naming::due(&naming) => {
                                if name_followed(&l, &tenants, &mut naming).await.is_err() {
                                    break;
                                }
                            }
                            _ = moved.changed() => break,
                        }
                    }
                }
                l.live.store(false, Ordering::Release);
                l.watchers.set_live(HashSet::new());
                l.primary.suspect();
                warn!("the job events subscription broke or the primary moved; subscribing again");
            }
            failed => {
                if let Ok(Err(e)) = &failed {
                    l.primary.failed(e);
                } else {
                    l.primary.suspect();
                }
                if !failing {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "no answer".to_owned(),
                    };
                    warn!(error = %why, "cannot subscribe to job events yet; retrying with backoff");
                    failing = true;
                }
                delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

/// Subscribes `sink` to the channels of the tenants watched now and drops the others
/// (`tenants`: those it is subscribed to), names them to the job library (`naming`), then
/// records them as live: a watcher reads its timeline only after its channel is both
/// subscribed to and named.
async fn follow_watched(
    l: &Listener,
    sink: &mut redis::aio::PubSubSink,
    tenants: &mut HashSet<TenantId>,
    naming: &mut Option<Naming>,
) -> redis::RedisResult<()> {
    let wanted: HashSet<TenantId> = l.watchers.wanted().into_iter().collect();
    let add: Vec<String> = wanted
        .difference(tenants)
        .map(|t| l.keys.tenant_events(t))
        .collect();
    let drop: Vec<String> = tenants
        .difference(&wanted)
        .map(|t| l.keys.tenant_events(t))
        .collect();
    if !add.is_empty() {
        pubsub_bounded(sink.subscribe(&add)).await?;
    }
    if !drop.is_empty() {
        pubsub_bounded(sink.unsubscribe(&drop)).await?;
    }
    *tenants = wanted.clone();
    name_followed(l, tenants, naming).await?;
    l.watchers.set_live(wanted);
    Ok(())
}

/// Names the channels of `tenants` to the job library (`watch` in `lua/prelude.lua`), on a
/// single Redis; tells the watchers to read again when a change may have gone unpublished
/// since they were last named (see `Naming::name`).
async fn name_followed(
    l: &Listener,
    tenants: &HashSet<TenantId>,
    naming: &mut Option<Naming>,
) -> redis::RedisResult<()> {
    let Some(naming) = naming else {
        return Ok(());
    };
    let channels: Vec<String> = tenants.iter().map(|t| l.keys.tenant_events(t)).collect();
    if naming.name(&channels).await? {
        l.watchers.resync();
    }
    Ok(())
}

/// How this listener names the tenant channels it follows to the job library, on a
/// connection of its own to the node it subscribed on: again every third of the time the
/// library counts them as followed (`watch` answers it), and, once it named none, not at all.
struct Naming {
    conn: redis::aio::MultiplexedConnection,
    /// When it named them last, and for how long the library counts them as followed.
    named: Option<(Instant, Duration)>,
    /// The library state's epoch as it answered last (`EPOCH` in the prelude).
    epoch: Option<String>,
}

impl Naming {
    fn new(conn: redis::aio::MultiplexedConnection) -> Self {
        Self {
            conn,
            named: None,
            epoch: None,
        }
    }

    /// Waits until the channels are to be named again (forever when none is named).
    async fn due(naming: &Option<Naming>) {
        match naming.as_ref().and_then(|n| n.named) {
            Some((at, lasting)) => tokio::time::sleep_until(at + lasting / 3).await,
            None => std::future::pending().await,
        }
    }

    /// Names `channels` (none: nothing to name, and nothing to name again). Answers whether
    /// a change may have gone unpublished to them since they were named before: the library's
    /// state was made again in between (a Redis restarted or a library loaded again: its
    /// epoch changed), or this names them later than half the time they counted as followed
    /// (this process stalled, and the library may have dropped them).
    async fn name(&mut self, channels: &[String]) -> redis::RedisResult<bool> {
        if channels.is_empty() {
            self.named = None;
            return Ok(false);
        }
        let call = scripts::watching(channels);
        let (lasting_ms, epoch): (u64, String) =
            tokio::time::timeout(CALL_TIMEOUT, call.invoke_async(&mut self.conn))
                .await
                .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "no answer").into()))?;
        let now = Instant::now();
        let late = self
            .named
            .is_some_and(|(at, lasting)| now.duration_since(at) > lasting / 2);
        let remade = self.epoch.as_ref().is_some_and(|e| *e != epoch);
        self.named = Some((now, Duration::from_millis(lasting_ms)));
        self.epoch = Some(epoch);
        Ok(late || remade)
    }
}

/// A subscribe or unsubscribe, bounded by [`CALL_TIMEOUT`] (no answer breaks the connection).
async fn pubsub_bounded(
    fut: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> redis::RedisResult<()> {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "no answer").into()))
}

impl Listener {
    /// Hands one message to whoever follows its channel.
    fn dispatch(&self, msg: &redis::Msg) {
        let Ok(payload) = msg.get_payload::<String>() else {
            return;
        };
        if msg.get_channel_name() == self.channel {
            if let Some(event) = parse_event(&payload) {
                if event == Event::Wake {
                    self.pending.fetch_or(woken(&payload), Ordering::AcqRel);
                }
                let _ = self.tx.send(event);
            }
        } else if let Ok(change) = serde_json::from_str::<JobChange>(&payload) {
            self.watchers.send(change);
        }
    }
}

/// An event as `lua/*.lua` publish it: `wake:<tag>`, `cancel:<id>`, `end:<id>`; a bare `wake`
/// (a replica of a version before groups) too.
fn parse_event(payload: &str) -> Option<Event> {
    if payload == "wake" || payload.starts_with("wake:") {
        return Some(Event::Wake);
    }
    let (what, id) = payload.split_once(':')?;
    let id = JobId::parse(id).ok()?;
    match what {
        "cancel" => Some(Event::Cancel(id)),
        "end" => Some(Event::Ended(id)),
        _ => None,
    }
}

/// The groups a wake-up names, as `pending` bits: its tag's group, or every group for one that
/// names none it knows.
fn woken(payload: &str) -> u64 {
    match payload.strip_prefix("wake:").and_then(Group::from_tag) {
        Some(group) => 1 << group.index(),
        None => ALL_GROUPS,
    }
}
