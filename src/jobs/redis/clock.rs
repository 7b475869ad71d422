//! The store's clock as this process reads it. Every replica judges a job's staleness (`lost`)
//! and its ETA on Redis's clock, not its own: a read learns Redis's `TIME` at most once every
//! [`CLOCK_REFRESH`] and carries it forward on this process's monotonic clock in between, so a
//! poll of a job is one `HGETALL` and nothing more. The reading is dated at the middle of its
//! round trip: it is off by at most half a round trip (and a second's drift), far below any
//! stale threshold (seconds).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long Redis's time, once read, is carried forward before a read asks for it again.
pub const CLOCK_REFRESH: Duration = Duration::from_secs(1);

/// Redis's time (ms) and when, on this process's monotonic clock, it was read.
#[derive(Default)]
pub struct StoreClock(Mutex<Option<(Instant, u64)>>);

impl StoreClock {
    /// The store's time now (ms), when it was read less than [`CLOCK_REFRESH`] ago.
    pub fn now_ms(&self) -> Option<u64> {
        let (at, ms) = (*self.0.lock().unwrap_or_else(PoisonError::into_inner))?;
        let since = at.elapsed();
        (since < CLOCK_REFRESH).then(|| ms + since.as_millis() as u64)
    }

    /// Learns that the store's time was `ms` in the answer to a call sent at `sent`.
    pub fn learn(&self, sent: Instant, ms: u64) {
        let mid = sent + sent.elapsed() / 2;
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((mid, ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_store_time_is_carried_forward_until_it_must_be_read_again() {
        let clock = StoreClock::default();
        assert_eq!(clock.now_ms(), None, "never read: ask Redis");
        let sent = Instant::now();
        clock.learn(sent, 1_000_000);
        std::thread::sleep(Duration::from_millis(20));
        let now = clock.now_ms().expect("fresh");
        assert!((1_000_020..1_000_000 + CLOCK_REFRESH.as_millis() as u64).contains(&now));
        // Sent two refreshes ago, answered now: read a refresh ago.
        clock.learn(Instant::now() - 2 * CLOCK_REFRESH, 1_000_000);
        assert_eq!(clock.now_ms(), None, "read a refresh ago: ask Redis again");
    }
}
