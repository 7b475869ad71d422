//! Where a sync source may point: a file inside `FEEDS_DIR` or an http(s) URL on an allowed
//! host (`SYNC_ALLOWED_HOSTS`, parsed once into [`AllowedHost`]s). Absolute paths, `..`,
//! symlinks leaving `FEEDS_DIR`, other hosts, ports and schemes are refused with a
//! `ParamError` naming the `source` field, so nothing outside the allowed places is read.

use std::path::{Component, Path, PathBuf};

use super::CatalogSettings;
use crate::jobs::params::ParamError;

/// Where a source points, once it is known to be allowed.
#[derive(Debug, PartialEq)]
pub enum Resolved {
    File(PathBuf),
    Url(reqwest::Url),
}

fn not_allowed(message: String) -> ParamError {
    ParamError::invalid("source", message).with_code("source_not_allowed")
}

/// Whether some prefix of `path` inside `base` is a symlink whose target lies outside `base`
/// (read without following it, so a target that does not exist counts the same).
fn leaves_feeds_dir(base: &Path, path: &Path) -> bool {
    let mut at = base.to_path_buf();
    for part in path.components() {
        at.push(part);
        if let Ok(target) = std::fs::read_link(&at) {
            let resolved = at.parent().unwrap_or(base).join(target);
            let normal = normalise(&resolved);
            if !normal.starts_with(base) {
                return true;
            }
        }
    }
    false
}

/// `..` and `.` folded away lexically (the target may not exist, so it cannot be canonicalised).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// One `SYNC_ALLOWED_HOSTS` entry: `host` (the scheme's default port only) or `host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    host: String,
    /// `None`: only the URL scheme's default port (80 for http, 443 for https).
    port: Option<u16>,
}

impl AllowedHost {
    /// Parses an entry; the message says what is wrong with it (start-up stops with it).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim().to_ascii_lowercase();
        let bad = |why: &str| {
            Err(format!(
                "SYNC_ALLOWED_HOSTS entry `{entry}`: {why}; write `host` or `host:port`"
            ))
        };
        let (host, port) = match entry.rsplit_once(':') {
            // A bracketed IPv6 address without a port ends in `]`.
            Some((host, port)) if !port.ends_with(']') => match port.parse::<u16>() {
                Ok(p) if p > 0 => (host, Some(p)),
                _ => return bad("the port must be a number from 1 to 65535"),
            },
            _ => (entry.as_str(), None),
        };
        let valid = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => {
                !host.is_empty()
                    && host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
            }
        };
        if !valid {
            return bad("not a host name or address");
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }

    fn allows(&self, url: &reqwest::Url) -> bool {
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        host == self.host
            && match self.port {
                // `Url::port` is `None` exactly when the port is the scheme's default.
                None => url.port().is_none(),
                Some(port) => url.port_or_known_default() == Some(port),
            }
    }
}

/// Resolves a source to a file inside `FEEDS_DIR` or a URL on an allowed host.
pub fn resolve(source: &str, settings: &CatalogSettings) -> Result<Resolved, ParamError> {
    if source.is_empty() {
        return Err(ParamError::invalid("source", "a source must not be empty"));
    }
    // Said first, and without echoing the value: a NUL or a line break would garble the message.
    if source.chars().any(char::is_control) {
        return Err(ParamError::invalid(
            "source",
            "a source must not hold a control character (NUL, tab, a line break): a feed's path \
             or URL has none",
        ));
    }
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let url = reqwest::Url::parse(source)
            .map_err(|_| ParamError::invalid("source", format!("`{source}` is not a valid URL")))?;
        if !settings.allowed_hosts.iter().any(|h| h.allows(&url)) {
            let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
            let port = url.port_or_known_default().unwrap_or_default();
            return Err(not_allowed(format!(
                "`{host}` port {port} is not in SYNC_ALLOWED_HOSTS; feeds are fetched only from listed hosts and ports"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(not_allowed("URLs with credentials are not accepted".into()));
        }
        return Ok(Resolved::Url(url));
    }
    if source.contains("://") || lower.starts_with("file:") {
        return Err(not_allowed(format!(
            "`{source}`: only relative paths inside FEEDS_DIR and http(s) URLs are accepted"
        )));
    }
    let path = Path::new(source);
    let escapes = path.is_absolute()
        || source.starts_with('\\')
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes {
        return Err(not_allowed(format!(
            "`{source}` must be a relative path inside FEEDS_DIR, without `..`"
        )));
    }
    let base = settings.feeds_dir.canonicalize().map_err(|_| {
        ParamError::invalid("source", "FEEDS_DIR does not exist on this server")
            .with_code("source_not_found")
    })?;
    let full = match base.join(path).canonicalize() {
        Ok(p) => p,
        // A dangling symlink says nothing of where it points: refused as leaving FEEDS_DIR
        // whatever it names, so the answer never tells what exists outside.
        Err(_) if leaves_feeds_dir(&base, path) => {
            return Err(not_allowed(format!("`{source}` leads outside FEEDS_DIR")))
        }
        Err(_) => {
            return Err(
                ParamError::invalid("source", format!("no feed `{source}` in FEEDS_DIR"))
                    .with_code("source_not_found"),
            )
        }
    };
    // Canonical paths: a symlink that leads out of FEEDS_DIR is caught here.
    if !full.starts_with(&base) {
        return Err(not_allowed(format!("`{source}` leads outside FEEDS_DIR")));
    }
    if !full.is_file() {
        return Err(
            ParamError::invalid("source", format!("`{source}` is not a file"))
                .with_code("source_not_found"),
        );
    }
    Ok(Resolved::File(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_with_a_control_character_is_refused_for_that_not_as_leaving_feeds_dir() {
        for source in ["demo.jsonl\0x", "demo\n.jsonl", "https://h/feed\t.jsonl"] {
            let e = resolve(source, &CatalogSettings::default()).expect_err(source);
            assert_eq!(
                (e.code, e.field.as_str()),
                ("invalid_field", "source"),
                "{source:?}"
            );
            assert!(
                e.message.contains("control character"),
                "{source:?}: {}",
                e.message
            );
        }
    }
}
