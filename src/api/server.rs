//! The accept loop: hyper's HTTP/1 connections under our limits, so no client can hold a
//! connection for ever.
//!
//! Headers must arrive within `REQUEST_TIMEOUT_SECONDS` (hyper's header-read timer, which also
//! runs while a keep-alive connection waits for its next request); a connection on which no
//! byte moves for `IDLE_TIMEOUT_SECONDS` is closed once its request in flight (if any) is
//! answered; at most `MAX_CONNECTIONS` are open, and [`PROBE_CONNECTIONS`] more are kept for
//! the probes (the rest wait in the kernel's backlog); at shutdown open connections get a
//! bounded drain, then are closed. Bodies are timed by the extractors that read them (408).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// Longest the open connections are waited for at shutdown, once the jobs have stopped. What
/// is still in flight then is reads and answers to waiting clients, which take milliseconds;
/// a connection still busy after this is a slow client, and closing it is what it risked.
pub const DRAIN_MAX: Duration = Duration::from_secs(5);
/// Largest request head (request line and headers) read; beyond it hyper answers 431.
/// Generous for any real client, small enough that a connection costs little memory.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Pause after a failed accept (out of file descriptors, most likely), so the loop does not
/// spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How often a connection checks whether it has been idle too long: a fraction of the idle
/// timeout, so a connection closes at most this much later than its deadline.
const IDLE_CHECKS_PER_TIMEOUT: u32 = 4;

/// Connections kept beyond `MAX_CONNECTIONS` for `/healthz`, `/readyz` and `/metrics`, so a
/// full instance (held streams, slow clients) still answers its health checks and scrapes.
/// Each serves one request (no keep-alive) on the probe router: anything else is answered
/// 503 `overloaded` at once. A handful is plenty for probes that come one at a time.
pub const PROBE_CONNECTIONS: usize = 16;
/// How long a kept connection may take to send its request head: probes send theirs at
/// once, so a silent client cannot hold the probes' places for `REQUEST_TIMEOUT_SECONDS`.
const PROBE_HEADER_READ: Duration = Duration::from_secs(2);

/// The connection limits, from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub header_read: Duration,
    pub idle: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `stop` is cancelled, then drains open connections for
/// at most [`DRAIN_MAX`] and closes the rest. A connection accepted while `MAX_CONNECTIONS`
/// are open takes one of the [`PROBE_CONNECTIONS`] places and is served `probes`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    probes: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let probe_slots = Arc::new(Semaphore::new(PROBE_CONNECTIONS));
    let connections = TaskTracker::new();
    let force_close = CancellationToken::new();
    loop {
        let place = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => Place::Full(slot.expect("the connection semaphore is never closed")),
            slot = probe_slots.clone().acquire_owned() => Place::Probe(slot.expect("the probe semaphore is never closed")),
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    warn!(error = %e, "accept failed; retrying shortly");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        // A full place may have come free while this one waited for a client.
        let place = match place {
            Place::Probe(probe) => slots
                .clone()
                .try_acquire_owned()
                .map_or(Place::Probe(probe), Place::Full),
            full => full,
        };
        let (slot, probe) = match place {
            Place::Full(slot) => (slot, false),
            Place::Probe(slot) => (slot, true),
        };
        let conn = Connection {
            router: if probe {
                probes.clone()
            } else {
                router.clone()
            },
            limits,
            stop: stop.clone(),
            force_close: force_close.clone(),
            probe,
            _slot: slot,
        };
        connections.spawn(conn.run(stream));
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(DRAIN_MAX, connections.wait())
        .await
        .is_err()
    {
        info!(
            open = connections.len(),
            "closing connections still open after the drain"
        );
        force_close.cancel();
        connections.wait().await;
    }
}

/// Which count an accepted connection is held in.
enum Place {
    /// One of `MAX_CONNECTIONS`: served every route.
    Full(OwnedSemaphorePermit),
    /// One of [`PROBE_CONNECTIONS`]: served the probes, one request.
    Probe(OwnedSemaphorePermit),
}

/// One accepted connection and what it needs.
struct Connection {
    router: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
    force_close: CancellationToken,
    /// Held in one of the probes' places: served the probes, one request.
    probe: bool,
    /// Held for the connection's life: `MAX_CONNECTIONS` (or the probes' places) count these.
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(self, stream: TcpStream) {
        let activity = Activity::new();
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        // Malformed framing (two different Content-Lengths, a NUL or invalid byte in a header,
        // an invalid request line) cannot get our JSON envelope: hyper 1.x's parser answers
        // it itself (proto/h1/conn.rs `on_parse_error` writes `Server::on_error`'s fixed head,
        // a bare 400 with no body) and closes the connection before any service is called,
        // and neither `http1::Builder` nor hyper-util offers a hook for that answer; the
        // error only reaches us afterwards, as the `Err` of the connection future below.
        // Answering it ourselves would mean reading and validating the head before hyper
        // does, a second HTTP parser of our own. Pinned by the test
        // `malformed_framing_gets_hyper_s_bare_400_and_starts_nothing`.
        let probe = self.probe;
        let header_read = match probe {
            true => self.limits.header_read.min(PROBE_HEADER_READ),
            false => self.limits.header_read,
        };
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_read)
            .max_header_size(MAX_HEAD_BYTES)
            .keep_alive(!probe);
        let conn = builder.serve_connection(io, TowerToHyperService::new(self.router));
        let mut conn = std::pin::pin!(conn);
        let mut closing = false;
        let mut check = tokio::time::interval(self.limits.idle / IDLE_CHECKS_PER_TIMEOUT);
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = self.stop.cancelled(), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = check.tick(), if !closing => {
                    if activity.idle_for() >= self.limits.idle {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                () = self.force_close.cancelled() => return,
            }
        }
    }
}

/// When bytes last moved on a connection.
#[derive(Clone)]
struct Activity {
    since: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last)
    }
}

/// A stream that records each read and write in its `Activity`.
struct Tracked {
    inner: TcpStream,
    activity: Activity,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
