//! Feed servers a test controls, on loopback ports of their own: `HeldFeeds`, whose feeds
//! answer only when the test releases them (a sync of one is a long job whose end the test
//! decides), and `serve`, for a test's own stand-in server.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use tokio::sync::Semaphore;

/// Rows in each held feed.
pub const HELD_ROWS: usize = 40;
/// Between two keep-alives of a held feed: well inside the service's 30-second read timeout.
const HELD_KEEP_ALIVE: Duration = Duration::from_secs(5);
/// A held or trickling feed's keep-alive: blank lines (no row), 1 KiB of them, so each keeps
/// the feed above the service's slow-feed rule (1 KiB in every `SYNC_SLOW_FEED_SECONDS`, 60 s
/// by default) as well as inside its read timeout.
fn keep_alive() -> String {
    "\n".repeat(1024)
}

/// Serves `router` on a loopback port of its own until the test binary ends.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// Feeds held until the test releases them, and a feed that never ends.
pub struct HeldFeeds {
    addr: SocketAddr,
    gates: Gates,
}

type Gates = Arc<Mutex<HashMap<String, Arc<Semaphore>>>>;

impl HeldFeeds {
    pub async fn start() -> HeldFeeds {
        let gates = Gates::default();
        let shared = gates.clone();
        let router = axum::Router::new()
            .route(
                "/held/{name}",
                get(move |Path(name): Path<String>| held(gate_of(&shared, &name), name)),
            )
            .route("/trickle/{name}", get(trickle));
        let addr = serve(router).await;
        HeldFeeds { addr, gates }
    }

    /// A JSON Lines feed of `HELD_ROWS` rows (`{name}.jsonl-0`, …), sent once released.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/held/{name}.jsonl", self.addr)
    }

    /// A feed that never ends: one row, then 1 KiB of blank lines every 200 ms.
    pub fn trickle_url(&self, name: &str) -> String {
        format!("http://{}/trickle/{name}.jsonl", self.addr)
    }

    /// The `SYNC_ALLOWED_HOSTS` entry that lets a service read these feeds (host and port).
    pub fn allowed(&self) -> String {
        self.addr.to_string()
    }

    /// Lets every read of the feed `name` (now and later) be answered.
    pub fn release(&self, name: &str) {
        gate_of(&self.gates, &format!("{name}.jsonl")).add_permits(1000);
    }
}

/// The answer of a held feed: its headers at once, then a `keep_alive` every `HELD_KEEP_ALIVE`
/// until the test releases the feed, then its rows. The blank lines keep a sync's reader inside
/// the service's read timeout and slow-feed rule however long the test holds the feed (a JSON
/// Lines reader skips blank lines, and they count as no row).
async fn held(gate: Arc<Semaphore>, name: String) -> axum::body::Body {
    let chunks = futures_util::stream::unfold(Some(gate), move |gate| {
        let name = name.clone();
        async move {
            let gate = gate?;
            let released = tokio::select! {
                permit = gate.acquire() => permit.is_ok(),
                () = tokio::time::sleep(HELD_KEEP_ALIVE) => false,
            };
            Some(if released {
                (Ok::<_, std::io::Error>(held_rows(&name)), None)
            } else {
                (Ok(keep_alive()), Some(gate))
            })
        }
    });
    axum::body::Body::from_stream(chunks)
}

/// The rows of the held feed `name`.
fn held_rows(name: &str) -> String {
    (0..HELD_ROWS)
        .map(|i| {
            format!("{{\"product_key\":\"{name}-{i}\",\"name\":\"Held Product {i} Black - M\"}}\n")
        })
        .collect()
}

async fn trickle() -> axum::body::Body {
    let chunks = futures_util::stream::unfold(0u64, |n| async move {
        let chunk = if n == 0 {
            "{\"product_key\":\"trickled-0\",\"name\":\"Trickled Product\"}\n".to_owned()
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            keep_alive()
        };
        Some((Ok::<_, std::io::Error>(chunk), n + 1))
    });
    axum::body::Body::from_stream(chunks)
}

fn gate_of(gates: &Mutex<HashMap<String, Arc<Semaphore>>>, name: &str) -> Arc<Semaphore> {
    gates
        .lock()
        .expect("the gate map is never poisoned")
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}
