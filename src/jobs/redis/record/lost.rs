//! What a record says of a job that will not run again: left lost by recovery (`lost_ms`).

use super::super::super::store::StoreSettings;
use super::{Field, Hash};

impl Hash {
    /// The runs the job gets: MAX_ATTEMPTS, or the runs it had once recovery left it lost
    /// (`lost_ms`): it reads `lost` whatever MAX_ATTEMPTS the reader runs with.
    pub(super) fn max_attempts(&self, settings: &StoreSettings) -> u32 {
        match self.get(Field::LostMs) {
            Some(_) => self.opt_num(Field::Attempt).unwrap_or(1).max(1) as u32,
            None => settings.max_attempts,
        }
    }
}
