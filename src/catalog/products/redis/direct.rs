//! The calling thread's own connections to a fixed Redis (`REDIS_URL`). A catalogue call is
//! made from a blocking thread (a job function's, or a handler's `spawn_blocking`); through
//! the runtime's multiplexed connection it costs two cross-thread hand-offs besides Redis's
//! answer — the call handed to the connection's task, the answer handed back to the parked
//! thread. Over a connection of its own the thread writes the call and reads the answer
//! itself. Each thread keeps its connection between calls, and it closes when the thread
//! ends (a blocking thread ends after a few idle seconds): an idle service holds none, and
//! what it holds never outgrows its threads.
//!
//! Through sentinels or on a cluster the calls keep the runtime's connection, which follows
//! the primary and the slots (`topology`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::{Connection, RedisResult};

use super::Resend;
use crate::topology::Target;

/// How long connecting may take before Redis counts as unreachable (the runtime's
/// connection's too).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

thread_local! {
    /// This thread's connection of each `Direct` that it called through, by the `Direct`'s
    /// id; closed with the thread.
    static OWN: RefCell<Vec<(usize, Connection)>> = const { RefCell::new(Vec::new()) };
}

/// Tells one `Direct` from another (several catalogues may live in one process).
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// Connections to one Redis, one a calling thread.
pub(super) struct Direct {
    id: usize,
    client: redis::Client,
    io_timeout: Duration,
}

impl Direct {
    /// The pool for `target` when it is one fixed Redis; `None` through sentinels or on a
    /// cluster. Connects lazily.
    pub(super) fn open(target: &Target, io_timeout: Duration) -> RedisResult<Option<Self>> {
        let Target::Url(url) = target else {
            return Ok(None);
        };
        Ok(Some(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            client: redis::Client::open(url.as_str())?,
            io_timeout,
        }))
    }

    /// Runs `call` on this thread's connection (or a new one). A connection found dropped
    /// (Redis restarted while it was idle: only the next call learns it) is replaced, and the
    /// call sent once more on the new connection when `resend` allows.
    /// A connection whose call failed in any way is closed, never reused: its next answer
    /// might be the late one of this call.
    pub(super) fn call<T>(
        &self,
        resend: Resend,
        call: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let (mut conn, reused) = match self.take() {
            Some(conn) => (conn, true),
            None => (self.connect()?, false),
        };
        match call(&mut conn) {
            Ok(v) => {
                self.put(conn);
                Ok(v)
            }
            Err(e) if reused && e.is_connection_dropped() => {
                if resend == Resend::No {
                    return Err(e);
                }
                let mut conn = self.connect()?;
                let v = call(&mut conn)?;
                self.put(conn);
                Ok(v)
            }
            Err(e) => Err(e),
        }
    }

    fn connect(&self) -> RedisResult<Connection> {
        let conn = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        conn.set_read_timeout(Some(self.io_timeout))?;
        conn.set_write_timeout(Some(self.io_timeout))?;
        Ok(conn)
    }

    fn take(&self) -> Option<Connection> {
        OWN.with_borrow_mut(|own| {
            let at = own.iter().position(|(id, _)| *id == self.id)?;
            Some(own.swap_remove(at).1)
        })
    }

    fn put(&self, conn: Connection) {
        OWN.with_borrow_mut(|own| own.push((self.id, conn)));
    }
}
