//! A job's timeline: the events its state changes wrote, each in the same atomic step as the
//! change (kept in the job's own record: the Redis hash, or the embedded store's record), and
//! the ids they are read back after.
//!
//! Event types: `created` (request_id), `started` (attempt, worker), `progress`,
//! `cancel_requested` (by), `released` (given back at shutdown), `requeued` (attempt: its
//! lease expired, it runs again), `lost` (its lease expired on its last attempt and it is
//! left to read `lost`), `restored` (a record the store lost written back), `superseded`
//! (superseded_by: a new job took over its stale lock) and `finished` (status, error class).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// How many events a timeline read answers at most (the newest). A timeline keeps every
/// lifecycle event and at most [`PROGRESS_KEPT`] sampled progress events plus the latest
/// tick, so only a job recovered or restored dozens of times comes near it.
pub const TIMELINE_CAP: usize = 100;

/// How many sampled progress events a timeline keeps (the newest; `PROGRESS_KEPT` in
/// `lua/prelude.lua` is the same number). Every lifecycle event (created, started,
/// cancel_requested, released, requeued, lost, restored, superseded, finished) is kept for
/// the job's life, so a timeline always starts with `created` and `started`.
///
/// The sampling rule: every progress tick the runner writes (at most one per tick interval)
/// goes to live watchers (the tenant's channel, so tenant and job streams) and becomes the
/// job's latest progress, which a timeline read shows after the events before it. A tick is
/// also kept in the timeline when at least [`StoreSettings::progress_sample`] (5 s) passed
/// since the last kept one and its step differs from that one's (the first always does), or
/// when twelve times that (a minute) passed whatever the step. So a ten-minute job keeps at
/// most [`PROGRESS_KEPT`] of its ~120 possible samples, and its timeline about two dozen
/// events; the record holds them in a few hundred bytes.
///
/// [`StoreSettings::progress_sample`]: super::store::StoreSettings::progress_sample
pub const PROGRESS_KEPT: usize = 20;

/// The event types after which a job's timeline gets nothing more.
pub const LAST_TYPES: [&str; 2] = ["finished", "superseded"];

/// A timeline event's id: `<ms>-<seq>`, when it happened (never before the job's previous
/// event, whatever the clock does) and its number in its job's timeline (0, 1, 2, …, counting
/// every event noted, the ticks that were not kept included). Ids of one job only grow, and
/// compare as their two numbers. A parsed id's `ms` is at most [`EventId::MAX_MS`], so every
/// id a client can name has a successor a store can read after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    pub ms: u64,
    pub seq: u64,
}

impl EventId {
    /// The last millisecond of the year 9999, the latest time RFC 3339 can write. Clients name
    /// ids to resume after; one beyond any clock's reach is a mistake, and at `u64::MAX-u64::MAX`
    /// Redis has no next id to read from (`XRANGE` answers "invalid start ID").
    pub const MAX_MS: u64 = 253_402_300_799_999;
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event id is <ms>-<seq>, two whole numbers, <ms> no later than the year 9999 (e.g. 1732960000000-0)")]
pub struct BadEventId;

impl FromStr for EventId {
    type Err = BadEventId;

    /// `<ms>-<seq>`, or `<ms>` alone (sequence 0), as Redis reads them.
    fn from_str(raw: &str) -> Result<Self, BadEventId> {
        let (ms, seq) = raw.split_once('-').unwrap_or((raw, "0"));
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())
                .flatten()
                .ok_or(BadEventId)
        };
        let id = Self {
            ms: number(ms)?,
            seq: number(seq)?,
        };
        (id.ms <= Self::MAX_MS).then_some(id).ok_or(BadEventId)
    }
}

/// One event of a job's timeline: these fields, and those its type adds (`request_id` on
/// `created`; `attempt` and `worker` on `started` and `restored`; `by` on
/// `cancel_requested`; `attempt` on `requeued`; `superseded_by` on `superseded`; `error`, the
/// error class, on a `finished` that failed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TimelineEvent {
    /// `<ms>-<seq>`: ids grow; send one back as `after` or `Last-Event-ID` to resume.
    pub id: String,
    /// `created`, `started`, `progress`, `cancel_requested`, `released`, `requeued`, `lost`,
    /// `restored`, `superseded` or `finished`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it happened, ms since the epoch (the store's clock).
    pub at: u64,
    /// What the job read right after it (`cancelling` once asked to stop).
    pub status: String,
    #[schema(minimum = 0, maximum = 100)]
    pub percent: u8,
    pub step: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TimelineEvent {
    /// The event's id as a number pair (`None` only for an id this service did not write).
    pub fn event_id(&self) -> Option<EventId> {
        self.id.parse().ok()
    }

    /// Whether the job's timeline ends with this event.
    pub fn is_last(&self) -> bool {
        LAST_TYPES.contains(&self.kind.as_str())
    }
}

/// What every timeline write tells the job's tenant's watchers (one message on the tenant's
/// channel), for dashboards and for open job streams to read the timeline again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobChange {
    /// The timeline event's id.
    pub id: String,
    #[serde(rename = "type")]
    pub kind_of_event: String,
    pub job_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub status: String,
    pub percent: u8,
    pub step: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_read_as_redis_writes_them_and_sort_as_numbers() {
        let a: EventId = "1732960000000-9".parse().unwrap();
        let b: EventId = "1732960000000-10".parse().unwrap();
        assert!(a < b);
        assert_eq!(b.to_string(), "1732960000000-10");
        assert_eq!("17".parse::<EventId>().unwrap(), EventId { ms: 17, seq: 0 });
        let latest = format!("{}-{}", EventId::MAX_MS, u64::MAX);
        assert_eq!(latest.parse::<EventId>().unwrap().ms, EventId::MAX_MS);
        let beyond = [
            "18446744073709551615-18446744073709551615",
            "18446744073709551616-0",
            "253402300800000-0",
        ];
        for bad in ["", "-", "x-1", "1-", "1-2-3", "+1-0", " 1-0"]
            .into_iter()
            .chain(beyond)
        {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} was accepted");
        }
    }
}
