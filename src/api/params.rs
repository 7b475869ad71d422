//! The request vocabulary: the fields of a start request (`Fields`), the error a job kind's
//! `prepare` gives for a field the client got wrong (`ParamError`, mapped to a status once, in
//! `api/error.rs`), and the shared field readers (`only_fields`, `bool_field`, `parse_bool`).
//! Moved here from `jobs/registry.rs` so that `jobs/` knows nothing of request fields; the
//! catalogue's `prepare` functions use it through `api::extract`, which re-exports it.

use std::collections::BTreeMap;

use serde_json::Value;

/// The code of a field whose value is not acceptable.
pub const INVALID_FIELD: &str = "invalid_field";
/// The code of a required field that was not given.
pub const MISSING_FIELD: &str = "missing_field";
/// The code of a field the route or job kind does not take (a typo is refused, not ignored).
pub const UNKNOWN_FIELD: &str = "unknown_field";

/// A parameter a client got wrong; `field` names it, `message` says what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// Snake-case error code (`invalid_field`, `missing_field`, `source_not_allowed`, …).
    pub code: &'static str,
    pub field: String,
    pub message: String,
    /// An HTTP-agnostic hint: `Unprocessable` for values the client must change.
    pub kind: ParamErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamErrorKind {
    /// The request names something this kind does not take.
    Unknown,
    /// The value is missing or not acceptable.
    Unprocessable,
}

impl ParamError {
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self {
            code: INVALID_FIELD,
            field: field.to_owned(),
            message: message.into(),
            kind: ParamErrorKind::Unprocessable,
        }
    }

    pub fn missing(field: &str, message: impl Into<String>) -> Self {
        Self {
            code: MISSING_FIELD,
            field: field.to_owned(),
            message: message.into(),
            kind: ParamErrorKind::Unprocessable,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }
}

/// The fields of a start request other than `tenant_id` and `wait`: each name with the
/// values given for it, in order (a repeated form field or a JSON array gives several).
pub type Fields = BTreeMap<String, Vec<Value>>;

/// Refuses any field: for kinds that take no parameters.
pub fn no_fields(fields: &Fields) -> Result<(), ParamError> {
    only_fields(fields, &[])
}

/// Refuses fields other than `allowed`, so a typo is a clear 4xx rather than silently ignored.
pub fn only_fields(fields: &Fields, allowed: &[&str]) -> Result<(), ParamError> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(name) => Err(ParamError {
            code: UNKNOWN_FIELD,
            field: name.clone(),
            message: if allowed.is_empty() {
                format!("`{name}` is not a field of this job; it takes only tenant_id and wait")
            } else {
                format!(
                    "`{name}` is not a field of this job; it takes tenant_id, wait and {}",
                    allowed.join(", ")
                )
            },
            kind: ParamErrorKind::Unknown,
        }),
    }
}

/// Reads a boolean field given at most once: `true/false/1/0/yes/no/on/off` or a JSON bool.
pub fn bool_field(fields: &Fields, name: &str) -> Result<Option<bool>, ParamError> {
    match fields.get(name).map(Vec::as_slice) {
        None | Some([]) => Ok(None),
        Some([v]) => parse_bool(v).map(Some).ok_or_else(|| {
            ParamError::invalid(
                name,
                format!("`{name}` must be one of true, false, 1, 0, yes, no, on, off"),
            )
        }),
        Some(_) => Err(ParamError::invalid(
            name,
            format!("`{name}` was given more than once"),
        )),
    }
}

/// Parses a boolean as forms, query strings and JSON spell it.
pub fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}
