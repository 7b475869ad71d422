//! The one error a job kind gives for a field the client got wrong, with its code; serde's
//! derived code reports through it too. What status answers it is the HTTP boundary's.

use std::fmt;

use serde::de;

/// The code of a field whose value is not acceptable.
pub const INVALID_FIELD: &str = "invalid_field";
/// The code of a required field that was not given.
pub const MISSING_FIELD: &str = "missing_field";
/// The code of a field the job kind does not take (a typo is refused, not ignored).
pub const UNKNOWN_FIELD: &str = "unknown_field";

/// A parameter a client got wrong; `field` names it, `message` says what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// Snake-case error code (`invalid_field`, `missing_field`, `source_not_allowed`, …).
    pub code: &'static str,
    pub field: String,
    pub message: String,
    pub kind: ParamErrorKind,
}

/// What kind of mistake a `ParamError` is, for the boundary that answers it.
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

    /// `field` is not one of `allowed` (the kind's own fields, named in the message).
    pub fn unknown(field: &str, allowed: &[&str]) -> Self {
        let message = if allowed.is_empty() {
            format!("`{field}` is not a field of this job; it takes only tenant_id and wait")
        } else {
            format!(
                "`{field}` is not a field of this job; it takes tenant_id, wait and {}",
                allowed.join(", ")
            )
        };
        Self {
            code: UNKNOWN_FIELD,
            field: field.to_owned(),
            message,
            kind: ParamErrorKind::Unknown,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// Attributes an error raised without a field (by a type's own `Deserialize`) to `field`.
    pub(super) fn about(mut self, field: &str) -> Self {
        if self.field.is_empty() {
            self.field = field.to_owned();
            self.message = format!("`{field}`: {}", self.message);
        }
        self
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamError {}

/// How serde's derived code reports a mistake: a missing field is `missing_field`, anything
/// else `invalid_field` (attributed to its field by the reader, which knows which it read).
impl de::Error for ParamError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ParamError::invalid("", msg.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        ParamError::missing(field, format!("`{field}` is required"))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        ParamError::unknown(field, expected)
    }
}
