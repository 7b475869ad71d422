//! A job's snapshot as JSON, written field by field into the answer's buffer: the same bytes
//! as serde_json's derived `Serialize` (a test holds every field, set and unset, to them),
//! without its per-field machinery. The 202 of every create writes one; through serde it was
//! ~10k instructions of a create-burst job (each key escaped, the id through `collect_str`'s
//! escaping adapter, each time through a `serialize_with`).

use std::io::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::jobs::{time_text, JobId, Snapshot};

/// Appends `snapshot` as compact JSON to `out`, as `serde_json::to_writer` would.
pub(crate) fn write_snapshot(out: &mut Vec<u8>, s: &Snapshot) {
    out.extend_from_slice(b"{\"job_id\":");
    id(out, &s.job_id);
    out.extend_from_slice(b",\"tenant_id\":");
    text(out, s.tenant_id.as_str());
    out.extend_from_slice(b",\"kind\":");
    text(out, s.kind.as_str());
    out.extend_from_slice(b",\"status\":");
    text(out, s.status.as_str());
    out.extend_from_slice(b",\"percent\":");
    number(out, u64::from(s.percent));
    out.extend_from_slice(b",\"step\":");
    text(out, &s.step);
    out.extend_from_slice(b",\"params\":");
    value(out, &s.params);
    out.extend_from_slice(b",\"result\":");
    value(out, &s.result);
    out.extend_from_slice(b",\"error\":");
    opt_text(out, s.error.as_deref());
    out.extend_from_slice(b",\"created_at\":");
    time(out, s.created_at);
    out.extend_from_slice(b",\"started_at\":");
    opt_time(out, s.started_at);
    out.extend_from_slice(b",\"updated_at\":");
    time(out, s.updated_at);
    out.extend_from_slice(b",\"heartbeat_at\":");
    time(out, s.heartbeat_at);
    out.extend_from_slice(b",\"finished_at\":");
    opt_time(out, s.finished_at);
    out.extend_from_slice(b",\"cancel_requested_at\":");
    opt_time(out, s.cancel_requested_at);
    out.extend_from_slice(b",\"attempt\":");
    number(out, u64::from(s.attempt));
    out.extend_from_slice(b",\"max_attempts\":");
    number(out, u64::from(s.max_attempts));
    out.extend_from_slice(b",\"worker\":");
    opt_text(out, s.worker.as_deref());
    out.extend_from_slice(b",\"recovered_at\":");
    opt_time(out, s.recovered_at);
    out.extend_from_slice(b",\"created_by\":");
    opt_text(out, s.created_by.as_deref());
    out.extend_from_slice(b",\"cancelled_by\":");
    opt_text(out, s.cancelled_by.as_deref());
    out.extend_from_slice(b",\"retried_by\":");
    opt_text(out, s.retried_by.as_deref());
    out.extend_from_slice(b",\"retried_as\":");
    opt_id(out, s.retried_as.as_ref());
    out.extend_from_slice(b",\"request_id\":");
    opt_text(out, s.request_id.as_deref());
    out.extend_from_slice(b",\"retry_of\":");
    opt_id(out, s.retry_of.as_ref());
    out.extend_from_slice(b",\"eta_seconds\":");
    match s.eta_seconds {
        Some(n) => number(out, n),
        None => null(out),
    }
    out.extend_from_slice(b",\"waiting_for\":");
    opt_id(out, s.waiting_for.as_ref());
    out.extend_from_slice(b",\"pipeline_id\":");
    opt_id(out, s.pipeline_id.as_ref());
    out.extend_from_slice(b",\"steps\":");
    serde_value(out, &s.steps);
    out.push(b'}');
}

fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"null");
}

/// `n`'s decimal digits, written from the end of a buffer of a `u64`'s most.
fn number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// A JSON string of `s`: copied as it is when it holds nothing JSON escapes (a control
/// character, `"` or `\`; serde_json writes every other character as itself), else through
/// serde_json's escaping.
fn text(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_value(out, s);
    }
}

fn opt_text(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => text(out, s),
        None => null(out),
    }
}

/// A job id: hyphenated hex, nothing to escape.
fn id(out: &mut Vec<u8>, id: &JobId) {
    out.push(b'"');
    // Writing to a `Vec` never fails.
    let _ = write!(out, "{id}");
    out.push(b'"');
}

fn opt_id(out: &mut Vec<u8>, i: Option<&JobId>) {
    match i {
        Some(i) => id(out, i),
        None => null(out),
    }
}

/// A time as the snapshot's `serialize_with` writes it (`jobs::format_time`'s text).
fn time(out: &mut Vec<u8>, ms: u64) {
    match time_text(ms) {
        Some(text) => {
            out.push(b'"');
            out.extend_from_slice(&text);
            out.push(b'"');
        }
        None => text(out, &crate::jobs::format_time(ms)),
    }
}

fn opt_time(out: &mut Vec<u8>, ms: Option<u64>) {
    match ms {
        Some(ms) => time(out, ms),
        None => null(out),
    }
}

/// A JSON value; `null` without serde's call.
fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => null(out),
        v => serde_value(out, v),
    }
}

/// Anything else, through serde_json (a pipeline's steps, a string to escape, parameters).
fn serde_value<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing a `Serialize` of these types to a `Vec` never fails (no map with non-string
    // keys, no I/O error).
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::pipeline::StepView;
    use crate::jobs::{Kind, Status, TenantId};

    fn written(s: &Snapshot) -> String {
        let mut out = Vec::new();
        write_snapshot(&mut out, s);
        String::from_utf8(out).expect("the writer writes UTF-8")
    }

    fn serde(s: &Snapshot) -> String {
        serde_json::to_string(s).expect("a snapshot serializes")
    }

    fn bare() -> Snapshot {
        Snapshot {
            job_id: JobId::for_tenant(&TenantId::parse("t-1").expect("a tenant id")),
            tenant_id: TenantId::parse("t-1").expect("a tenant id"),
            kind: Kind::parse("enrich").expect("a kind"),
            status: Status::Queued,
            percent: 0,
            step: "queued".into(),
            params: serde_json::json!({"force": false}),
            result: Value::Null,
            error: None,
            created_at: 1_764_496_800_123,
            started_at: None,
            updated_at: 1_764_496_800_123,
            heartbeat_at: 1_764_496_800_123,
            finished_at: None,
            cancel_requested_at: None,
            attempt: 0,
            max_attempts: 3,
            worker: None,
            recovered_at: None,
            created_by: None,
            cancelled_by: None,
            retried_by: None,
            retried_as: None,
            request_id: None,
            retry_of: None,
            eta_seconds: None,
            waiting_for: None,
            pipeline_id: None,
            steps: None,
        }
    }

    #[test]
    fn a_snapshot_is_written_as_serde_writes_it_with_every_field_unset_or_set() {
        let unset = bare();
        assert_eq!(written(&unset), serde(&unset));
        let id = JobId::new();
        let set = Snapshot {
            status: Status::Cancelling,
            percent: 100,
            step: "a \"quoted\" step\\ with\ta tab, é and \u{1}".into(),
            result: serde_json::json!({"enriched": 3, "note": "x\ny"}),
            error: Some("SourceUnreachable".into()),
            started_at: Some(0),
            finished_at: Some(253_402_300_799_999),
            // Past year 9999: the wide format.
            cancel_requested_at: Some(253_402_300_800_000),
            attempt: 2,
            max_attempts: u32::MAX,
            worker: Some("host/1234".into()),
            recovered_at: Some(951_782_400_000),
            created_by: Some("ops\"team".into()),
            cancelled_by: Some("anonymous".into()),
            retried_by: Some("bulk".into()),
            retried_as: Some(id),
            request_id: Some("req-ü-1".into()),
            retry_of: Some(id),
            eta_seconds: Some(u64::MAX),
            waiting_for: Some(id),
            pipeline_id: Some(id),
            steps: Some(vec![StepView {
                kind: Kind::parse("sync").expect("a kind"),
                job_id: id,
                status: Status::Done,
                percent: 40,
                step: "finished".into(),
                share: 40,
            }]),
            ..bare()
        };
        assert_eq!(written(&set), serde(&set));
        for status in [Status::Running, Status::Done, Status::Failed, Status::Lost] {
            let s = Snapshot { status, ..bare() };
            assert_eq!(written(&s), serde(&s));
        }
        let soon = Snapshot {
            eta_seconds: Some(0),
            percent: 7,
            ..bare()
        };
        assert_eq!(written(&soon), serde(&soon));
    }
}
