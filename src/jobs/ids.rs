//! Job identities: a job's id, its tenant's and its kind's names, each checked where it is
//! parsed, and why one was refused.

use std::fmt;

use serde::Serialize;
use utoipa::ToSchema;

use super::keys;

/// A job's id: a UUID, only ever built by [`JobId::for_tenant`], [`JobId::new`] or
/// [`JobId::parse`].
///
/// An id made for a tenant names the tenant's slot group (`keys::Group`), so a job is found
/// from its id alone wherever its tenant's keys live: it is a version-8 UUID (RFC 9562's
/// custom version: `xxxxxxxx-xxxx-8xxx-yxxx-xxxxxxxxxxGG`, `y` one of 8 9 a b) whose last
/// byte `GG` is the group, every other bit random. Any other id (a v4 id made before groups)
/// names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema)]
#[schema(value_type = String, format = "uuid", description = "A job's id: a UUID.")]
pub struct JobId(uuid::Uuid);

impl JobId {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4())
    }

    /// A new id for a job of `tenant`: random, with the tenant's slot group in its last byte.
    pub fn for_tenant(tenant: &TenantId) -> Self {
        let mut bytes = *uuid::Uuid::new_v4().as_bytes();
        bytes[15] = keys::Group::of(tenant).index() as u8;
        Self(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// The slot group the id names, when it is a version-8 id (see the type's doc).
    pub fn group(&self) -> Option<u8> {
        (self.0.get_version_num() == 8).then(|| self.0.as_bytes()[15])
    }

    /// The id's last 64 bits (random for a new id): a cheap source of jitter.
    pub fn low_bits(&self) -> u64 {
        self.0.as_u64_pair().1
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidId> {
        uuid::Uuid::parse_str(raw)
            .map(Self)
            .map_err(|_| InvalidId::JobId)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why an identifier was refused; the message says what a valid one looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    #[error("a job id is a UUID such as 4f1c2d3e-0000-4000-8000-000000000000")]
    JobId,
    #[error(
        "tenant_id must be 1–128 characters of A-Z a-z 0-9 _ . -, and not `.` or `..` \
         (browsers and URL libraries resolve such a path segment away, escaped or not)"
    )]
    TenantId,
    #[error("a job kind is 1–32 characters of a-z 0-9 _")]
    Kind,
}

/// `raw` when it is 1 to `max` bytes, each one `allowed`; else `refused`.
fn checked_name(
    raw: &str,
    max: usize,
    allowed: impl Fn(u8) -> bool,
    refused: InvalidId,
) -> Result<String, InvalidId> {
    if (1..=max).contains(&raw.len()) && raw.bytes().all(allowed) {
        Ok(raw.to_owned())
    } else {
        Err(refused)
    }
}

/// The names no URL can carry as a path segment (`/catalog/tenants/{tenant_id}`,
/// `/catalog/products/{key}`): a browser or URL library resolves `.` and `..` away, escaped
/// or not. Tenant ids and product keys refuse them.
pub const DOT_SEGMENTS: [&str; 2] = [".", ".."];

// One line: the admin page shows this doc (the schema's description) as the tenant rule.
/// A tenant: 1–128 characters of `A-Z a-z 0-9 _ . -` (safe in a Redis key), not `.` or `..`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(raw: &str) -> Result<Self, InvalidId> {
        if DOT_SEGMENTS.contains(&raw) {
            return Err(InvalidId::TenantId);
        }
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
        checked_name(raw, 128, allowed, InvalidId::TenantId).map(Self)
    }
}

/// A job kind's name (`sync`, `enrich`, `pair`, or a test kind): 1–32 of `a-z 0-9 _`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(transparent)]
pub struct Kind(String);

impl Kind {
    pub fn parse(raw: &str) -> Result<Self, InvalidId> {
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
        checked_name(raw, 32, allowed, InvalidId::Kind).map(Self)
    }
}

/// What a checked name (`TenantId`, `Kind`) is as text: `as_str`, and `Display` as it.
macro_rules! name_text {
    ($($name:ident),*) => {$(
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )*};
}

name_text!(TenantId, Kind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_id_is_never_a_path_segment_a_url_resolves_away() {
        for refused in [".", "..", "", "a b", "a:b"] {
            assert_eq!(
                TenantId::parse(refused),
                Err(InvalidId::TenantId),
                "{refused:?}"
            );
        }
        for kept in ["...", ".a", "a..b", "acme.eu", "-_-"] {
            assert_eq!(TenantId::parse(kept).unwrap().as_str(), kept);
        }
    }
}
