//! `CORS_ALLOWED_ORIGINS`'s entries as values: an [`Origin`] is an origin exactly as a
//! browser sends it in its `Origin` header, so the HTTP boundary compares headers to it
//! byte for byte. Knows nothing of how CORS is answered.

use std::fmt;

/// The variable the origins come from, named in every complaint about them.
pub const CORS_VARIABLE: &str = "CORS_ALLOWED_ORIGINS";

/// `http` or `https`, `://`, a lower-case host with an optional port, nothing after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin(String);

impl Origin {
    /// An origin as a browser sends it: no path, no trailing slash, compared exactly (so it
    /// must be lower-case, as browsers send it); the message names the variable.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let bad = || {
            format!("{CORS_VARIABLE}: `{raw}` is not an origin such as https://admin.example.com or http://localhost:8080 (scheme, host and optional port, no path)")
        };
        let rest = raw
            .strip_prefix("https://")
            .or_else(|| raw.strip_prefix("http://"))
            .ok_or_else(bad)?;
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        };
        let host_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
        let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
        if !(host_ok && port_ok) {
            return Err(bad());
        }
        Ok(Self(raw.to_owned()))
    }

    /// The origin as its header spells it (visible ASCII only, by construction).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_a_scheme_a_host_and_an_optional_port() {
        for ok in [
            "https://admin.example.com",
            "http://localhost:8080",
            "http://127.0.0.1:3000",
        ] {
            assert_eq!(Origin::parse(ok).map(|o| o.to_string()), Ok(ok.to_owned()));
        }
        for bad in [
            "admin.example.com",
            "https://admin.example.com/",
            "https://admin.example.com/page",
            "ftp://x.example",
            "https://",
            "http://host:0",
            "http://host:99999",
            "https://Admin.example.com",
            "*",
        ] {
            let message = Origin::parse(bad).unwrap_err();
            assert!(message.contains(CORS_VARIABLE), "{message}");
        }
    }
}
