//! How a record reads a job that will not run again: left lost by recovery (`lost_ms`), or
//! taken over by a new job (`superseded_by`).

use super::super::super::store::StoreSettings;
use super::super::super::Snapshot;
use super::{Field, Hash};

impl Hash {
    /// The snapshot as a reader sees it at `now_ms`: one a new job took over
    /// (`superseded_by`) as it ended then (`Snapshot::superseded`), any other derived.
    pub(super) fn read_at(&self, s: Snapshot, now_ms: u64, settings: &StoreSettings) -> Snapshot {
        match self.get(Field::SupersededBy) {
            Some(_) => {
                let at = self.opt_num(Field::EventMs).unwrap_or(s.created_at);
                s.superseded(at)
            }
            None => s.read_at(now_ms, settings.stale_ms()),
        }
    }

    /// The runs the job gets: MAX_ATTEMPTS, or the runs it had once recovery left it lost
    /// (`lost_ms`): it reads `lost` whatever MAX_ATTEMPTS the reader runs with.
    pub(super) fn max_attempts(&self, settings: &StoreSettings) -> u32 {
        match self.get(Field::LostMs) {
            Some(_) => self.opt_num(Field::Attempt).unwrap_or(1).max(1) as u32,
            None => settings.max_attempts,
        }
    }
}
