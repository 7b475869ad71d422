//! The fence a run's final data write passes: the write happens only while the run still
//! holds its job (the record reads `running`, with the run's claim, not superseded), checked
//! in the same atomic step as the write. A run fenced off between its last safe point and
//! its write (recovered, taken over, given back, or a new job took the lock after Redis
//! came back empty) has its write refused and ends as a fenced-off run: not recorded.
//!
//! The runner gives each run a [`StoreFence`] over the job store that runs it. A catalogue
//! in the same Redis as the jobs checks the record inside its own script (`job_key`); the
//! embedded job store runs the write under its own lock (`while_held`).

use std::sync::Arc;

use super::store::{JobStore, RunId};

/// The job record's schema for Lua (its field names, `read_job`, `is_held`): a script on the
/// same Redis that checks a run still holds its job puts it in front of its own body and
/// reads the record by name, as the job scripts do.
pub use super::redis::scripts::RECORD_LUA;

/// Answers, atomically with a write, whether a run still holds its job.
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// The Redis key of the run's job record (`<prefix>:<id>`) and the run's claim, when
    /// the jobs are in Redis: a script on the same Redis checks them inside the write.
    /// `None` when the jobs are elsewhere (the embedded store): then `while_held` checks.
    fn job_record(&self) -> Option<(String, u64)>;

    /// Runs `write` only while the run holds its job, with no claim, recovery or end in
    /// between; answers whether it ran.
    fn while_held(&self, write: &mut dyn FnMut()) -> bool;
}

/// A run's fence over the job store that runs it.
#[derive(Clone)]
pub struct StoreFence {
    store: Arc<dyn JobStore>,
    run: RunId,
}

impl StoreFence {
    pub fn new(store: Arc<dyn JobStore>, run: RunId) -> Self {
        Self { store, run }
    }
}

impl std::fmt::Debug for StoreFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFence")
            .field("run", &self.run)
            .finish()
    }
}

impl Fence for StoreFence {
    fn job_record(&self) -> Option<(String, u64)> {
        self.store
            .job_key(&self.run.id)
            .map(|key| (key, self.run.claim))
    }

    fn while_held(&self, write: &mut dyn FnMut()) -> bool {
        self.store.while_held(&self.run, write)
    }
}

/// The fence of a write made outside any job (tests, benchmarks, tools): nothing to check.
#[derive(Clone, Copy, Debug)]
pub struct Unfenced;

impl Fence for Unfenced {
    fn job_record(&self) -> Option<(String, u64)> {
        None
    }

    fn while_held(&self, write: &mut dyn FnMut()) -> bool {
        write();
        true
    }
}
