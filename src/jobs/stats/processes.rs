//! The overview's processes (replicas): the registry's names for them, their last heartbeats,
//! and the list the overview answers — each with the jobs it runs and whether it still
//! answers (a missed run of `SILENT_BEATS` heartbeats). Nothing here reads the store.

use serde::Serialize;
use utoipa::ToSchema;

use super::super::{now_ms, ser_time, worker_name, JobId, Kind, Snapshot, Status, TenantId};

/// Heartbeat intervals a process may miss before the overview says it is not answering: one
/// late beat is a busy store or a loaded machine, three in a row a process that stopped (it
/// stays listed, marked, until its entry goes stale).
pub const SILENT_BEATS: u64 = 3;

/// A process (replica) of the service as the store's registry names it: its worker name
/// (`host/pid`, as jobs' `worker` reads) and when it started. A store is built once per
/// process, so it carries its process and renews its entry with every heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub worker: String,
    /// When the process started, on its own clock (ms since the epoch).
    pub started_at: u64,
}

impl Process {
    /// This process, starting now.
    pub fn this() -> Self {
        Self {
            worker: worker_name(),
            started_at: now_ms(),
        }
    }

    /// The registry's name for it: `<started_at>:<worker>` (a worker name may hold `:` only
    /// after the first, so the two read apart; a restarted process with the same pid is a
    /// new entry).
    pub fn member(&self) -> String {
        format!("{}:{}", self.started_at, self.worker)
    }

    /// Reads a registry name back; `None` for one this service did not write.
    pub fn from_member(raw: &str) -> Option<Self> {
        let (started, worker) = raw.split_once(':')?;
        Some(Self {
            worker: worker.to_owned(),
            started_at: started.parse().ok()?,
        })
    }
}

/// A live process and its last heartbeat (on the store's clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat {
    pub process: Process,
    pub heartbeat_at: u64,
}

/// A job a process runs now, and how far it got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct ProcessJob {
    pub job_id: JobId,
    pub tenant_id: TenantId,
    pub kind: Kind,
    pub status: Status,
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    pub step: String,
}

/// A live process of the service and the jobs it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct ProcessView {
    /// `host/pid`, as a job's `worker` reads.
    pub worker: String,
    pub host: String,
    pub pid: Option<u32>,
    /// When it started, on its own clock.
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: u64,
    /// Its last heartbeat, on the store's clock.
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub heartbeat_at: u64,
    /// False once its last heartbeat is older than `not_answering_after_seconds`: it stopped
    /// answering at `heartbeat_at` (killed, hung, cut off from the store) and leaves the
    /// list when that is `stale_after_seconds` old.
    pub answering: bool,
    pub jobs: Vec<ProcessJob>,
}

/// The heartbeat's measures the overview reads a process's last beat by (ms).
#[derive(Clone, Copy, Debug)]
pub struct Beats {
    /// How often a process beats.
    pub heartbeat_ms: u64,
    /// How old a beat is when its process (and its runs) are gone.
    pub stale_ms: u64,
}

/// The processes, each `answering` as `answers` says of its last beat.
pub(super) fn process_views(
    mut beats: Vec<Beat>,
    active: &[Snapshot],
    answers: impl Fn(u64) -> bool,
) -> Vec<ProcessView> {
    beats.sort_by_key(|b| std::cmp::Reverse(b.process.started_at));
    beats
        .into_iter()
        .map(|beat| {
            let Process { worker, started_at } = beat.process;
            let (host, pid) = match worker.rsplit_once('/') {
                Some((host, pid)) => (host.to_owned(), pid.parse().ok()),
                None => (worker.clone(), None),
            };
            let jobs = active
                .iter()
                .filter(|s| matches!(s.status, Status::Running | Status::Cancelling))
                .filter(|s| s.worker.as_deref() == Some(worker.as_str()))
                .map(|s| ProcessJob {
                    job_id: s.job_id,
                    tenant_id: s.tenant_id.clone(),
                    kind: s.kind.clone(),
                    status: s.status,
                    percent: s.percent,
                    step: s.step.clone(),
                })
                .collect();
            ProcessView {
                worker,
                host,
                pid,
                started_at,
                heartbeat_at: beat.heartbeat_at,
                answering: answers(beat.heartbeat_at),
                jobs,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_member_reads_back_whatever_its_host_holds() {
        let p = Process {
            worker: "host:a/42".into(),
            started_at: 1_796_032_800_123,
        };
        assert_eq!(Process::from_member(&p.member()), Some(p));
        assert_eq!(Process::from_member("no-start"), None);
    }
}
