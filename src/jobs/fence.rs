//! The fence every catalogue write passes: a run's write happens only while the run still
//! holds its job (its record reads `running`, with the run's claim, not superseded), and an
//! import's only while its tenant was not deleted after it began — checked in the same
//! atomic step as the write. A refused write changes nothing, and its writer stops.
//!
//! A delete leaves the tenant's tombstone (`Keys::gone`), so a run whose record was removed
//! with its tenant stays refused, while a job or import begun after the delete writes as
//! usual. A catalogue in the same Redis as the jobs checks inside its own script
//! (`FENCE_LUA`, with the keys `fence_keys` names); the embedded job store runs the write
//! under its own lock (`while_held`).

use std::sync::Arc;

use super::store::{JobStore, RunId};
use super::TenantId;

/// The job record's schema for Lua (its field names, `read_job`, `is_held`) and `fence_at`
/// (lua/fence.lua): a catalogue script on the same Redis puts it in front of its own body.
pub static FENCE_LUA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{}\n{}",
        super::redis::scripts::RECORD_LUA,
        include_str!("lua/fence.lua")
    )
});

/// Who writes, and what must still hold for the write to happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Writer {
    /// A run of a job: it writes while it holds its job. Once its record is gone, it waits
    /// for its heartbeat to write the record back, unless its tenant was deleted since the
    /// job was created (`created_at`, the store's clock; a delete in the same millisecond
    /// counts as since): then it is refused.
    Run {
        run: RunId,
        tenant: TenantId,
        created_at: u64,
    },
    /// A write outside any job (an import): refused once its tenant was deleted after it
    /// began. `seen` is the tombstone it saw then (`JobStore::tombstone`; 0 for none): each
    /// delete leaves a later one.
    Import { tenant: TenantId, seen: u64 },
}

impl Writer {
    pub fn tenant(&self) -> &TenantId {
        match self {
            Writer::Run { tenant, .. } | Writer::Import { tenant, .. } => tenant,
        }
    }

    /// The earliest tombstone that refuses this writer.
    pub fn since(&self) -> u64 {
        match self {
            Writer::Run { created_at, .. } => *created_at,
            Writer::Import { seen, .. } => seen + 1,
        }
    }
}

/// Whether a fenced write may happen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// It may (and, under `while_held`, it did).
    Held,
    /// Refused for good: the run no longer holds its job, or the tenant was deleted since.
    Fenced,
    /// A run's record is gone and nothing says why (the store lost it): its heartbeat writes
    /// it back, and the write may be tried again then.
    Missing,
}

/// What a script on the same Redis reads to check a fence inside its write (`fence_at` in
/// lua/fence.lua): the tenant's tombstone, and a run's job record and claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptFence {
    pub gone: String,
    /// The earliest tombstone that refuses the writer (`Writer::since`).
    pub since: u64,
    /// The run's job record key and claim; `None` for an import.
    pub run: Option<(String, u64)>,
}

/// Answers, atomically with a write, whether its writer may still write.
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// The keys and values a script on the same Redis checks inside the write, when the
    /// jobs are in Redis; `None` when they are elsewhere (then `while_held` checks).
    fn in_script(&self) -> Option<ScriptFence>;

    /// Runs `write` only while the fence holds, with no claim, recovery, end or delete in
    /// between; answers whether it ran (`Held`) or why not.
    fn while_held(&self, write: &mut dyn FnMut()) -> Hold;
}

/// A writer's fence over the job store that knows its job and its tenant's tombstone.
#[derive(Clone)]
pub struct StoreFence {
    store: Arc<dyn JobStore>,
    writer: Writer,
}

impl StoreFence {
    pub fn new(store: Arc<dyn JobStore>, writer: Writer) -> Self {
        Self { store, writer }
    }

    /// The fence of a run of a job of `tenant` created at `created_at` (the store's clock).
    pub fn run(store: Arc<dyn JobStore>, run: RunId, tenant: TenantId, created_at: u64) -> Self {
        Self::new(
            store,
            Writer::Run {
                run,
                tenant,
                created_at,
            },
        )
    }
}

impl std::fmt::Debug for StoreFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFence")
            .field("writer", &self.writer)
            .finish()
    }
}

impl Fence for StoreFence {
    fn in_script(&self) -> Option<ScriptFence> {
        self.store.fence_keys(&self.writer)
    }

    fn while_held(&self, write: &mut dyn FnMut()) -> Hold {
        self.store.while_held(&self.writer, write)
    }
}

/// The fence of a write made outside any job and any import (tests, benchmarks, tools):
/// nothing to check.
#[derive(Clone, Copy, Debug)]
pub struct Unfenced;

impl Fence for Unfenced {
    fn in_script(&self) -> Option<ScriptFence> {
        None
    }

    fn while_held(&self, write: &mut dyn FnMut()) -> Hold {
        write();
        Hold::Held
    }
}
