//! A job's timeline: the events its state changes wrote, each in the same atomic step as the
//! change (a Redis Stream per job, or a capped list in the embedded store), and the ids they
//! are read back after.
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

/// How many events a job's timeline keeps, newest last: enough for a long job's coalesced
/// progress writes (one every few hundred ms at most) around its start and end. Redis trims
/// with `MAXLEN ~` (whole nodes, cheaper), so a stream may hold a few more; a read answers
/// at most this many, the newest. `TIMELINE_CAP` in `lua/prelude.lua` is the same number.
pub const TIMELINE_CAP: usize = 100;

/// The event types after which a job's timeline gets nothing more.
pub const LAST_TYPES: [&str; 2] = ["finished", "superseded"];

/// A timeline event's id: `<ms>-<seq>`, as Redis Stream ids are; ids of one job's timeline
/// only grow, and compare as their two numbers. A parsed id's `ms` is at most
/// [`EventId::MAX_MS`], so every id a client can name has a successor a store can read after.
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

    /// The id that follows `self` at `now_ms`: a later millisecond starts at 0, the same (or
    /// an earlier: the clock stepped back) one counts on.
    pub fn next(self, now_ms: u64) -> Self {
        if now_ms > self.ms {
            Self { ms: now_ms, seq: 0 }
        } else {
            Self {
                ms: self.ms,
                seq: self.seq + 1,
            }
        }
    }
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

    /// Reads an event from a stream entry's field/value pairs (numbers arrive as text; the
    /// type-specific `attempt` is a number too).
    pub fn from_fields(id: String, pairs: &[(String, String)]) -> Option<Self> {
        let mut event = Self {
            id,
            kind: String::new(),
            at: 0,
            status: String::new(),
            percent: 0,
            step: String::new(),
            extra: Map::new(),
        };
        for (name, value) in pairs {
            match name.as_str() {
                "type" => event.kind.clone_from(value),
                "at" => event.at = value.parse().ok()?,
                "status" => event.status.clone_from(value),
                "percent" => event.percent = value.parse::<f64>().ok()?.clamp(0.0, 100.0) as u8,
                "step" => event.step.clone_from(value),
                "attempt" => {
                    event
                        .extra
                        .insert(name.clone(), value.parse::<u64>().ok()?.into());
                }
                _ => {
                    event.extra.insert(name.clone(), value.clone().into());
                }
            }
        }
        (!event.kind.is_empty()).then_some(event)
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

    #[test]
    fn the_next_id_counts_on_within_a_millisecond_and_when_the_clock_steps_back() {
        let id = EventId { ms: 10, seq: 3 };
        assert_eq!(id.next(11), EventId { ms: 11, seq: 0 });
        assert_eq!(id.next(10), EventId { ms: 10, seq: 4 });
        assert_eq!(id.next(9), EventId { ms: 10, seq: 4 });
    }
}
