//! Log limiting: a failure that repeats — a store outage seen by every heartbeat, progress
//! write and claim — is logged at most once per window, saying how many lines it held back.
//! Knows nothing of what it limits.

use std::fmt::Display;
use std::time::{Duration, Instant};

use tracing::warn;

/// Lets a repeated failure be logged at most once per window, counting what it held back.
#[derive(Default)]
pub(super) struct LogLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    const WINDOW: Duration = Duration::from_secs(10);

    /// `Some(n)` when a line may be logged now, `n` being how many were held back since.
    pub(super) fn ready(&mut self) -> Option<u64> {
        match self.last {
            Some(at) if at.elapsed() < Self::WINDOW => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(Instant::now());
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Warns `what` with its `error`, when a line may be logged now.
    pub(super) fn warn(&mut self, error: &dyn Display, what: &str) {
        if let Some(suppressed) = self.ready() {
            warn!(error = %error, suppressed, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_limiter_holds_back_repeats_within_its_window() {
        let mut l = LogLimiter::default();
        assert_eq!(l.ready(), Some(0));
        assert_eq!(l.ready(), None);
        assert_eq!(l.ready(), None);
        assert_eq!(l.suppressed, 2);
    }
}
