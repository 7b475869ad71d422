//! API tokens as configured (`API_TOKENS_FILE`, `API_TOKENS`): `<scope> <name> sha256:<hex>`
//! entries, parsed once at start-up into [`Tokens`]. A scope is a tenant or `*`, optionally
//! `read:`-prefixed for a token that may read but change nothing. Only digests are held,
//! compared in constant time; a token is never logged. Knows nothing of how a request
//! presents one.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::jobs::TenantId;

/// How a digest is spelled in a token entry.
const DIGEST_PREFIX: &str = "sha256:";
/// The scope of an operator token: every tenant.
const OPERATOR_SCOPE: &str = "*";
/// What a read-only scope starts with (`read:*`, `read:acme`): tenant ids cannot contain
/// `:`, so a tenant is never mistaken for it.
const READ_ONLY_PREFIX: &str = "read:";

/// Whose data a caller may touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every tenant (an operator token, or any caller of a service without tokens).
    All,
    Tenant(TenantId),
}

/// What a caller may do with the data its scope covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read and change (start, cancel, retry, import, remove).
    ReadWrite,
    /// Read only: every change is refused.
    ReadOnly,
}

/// Who holds a token, whose data it may touch, and whether it may change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub scope: Scope,
    pub access: Access,
    pub name: String,
}

impl Holder {
    /// The scope as a token entry spells it: `*`, `acme`, `read:*`, `read:acme`.
    pub fn scope_label(scope: &Scope, access: Access) -> String {
        let target = match scope {
            Scope::All => OPERATOR_SCOPE,
            Scope::Tenant(t) => t.as_str(),
        };
        match access {
            Access::ReadWrite => target.to_owned(),
            Access::ReadOnly => format!("{READ_ONLY_PREFIX}{target}"),
        }
    }
}

/// One configured token: its scope, its holder and the SHA-256 of the token.
#[derive(Clone)]
struct Entry {
    scope: Scope,
    access: Access,
    name: String,
    digest: [u8; 32],
}

/// The configured tokens; empty means the service runs open.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<Entry>,
}

/// A token entry that cannot be read: start-up stops with this.
#[derive(Debug, thiserror::Error)]
#[error("{source_name} line {line}: {why}; an entry is `<tenant_id, *, read:<tenant_id> or read:*> <name> sha256:<64 hex digits>`")]
pub struct TokenFileError {
    pub source_name: String,
    pub line: usize,
    pub why: String,
}

impl Tokens {
    /// Reads entries, one per line (`API_TOKENS_FILE`); blank lines and `#` comments are skipped.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TokenFileError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let refuse = |why: String| TokenFileError {
                source_name: source_name.to_owned(),
                line: i + 1,
                why,
            };
            let entry = parse_entry(line).map_err(refuse)?;
            // One token with two scopes would make the caller's rights depend on line order.
            if entries.iter().any(|e: &Entry| e.digest == entry.digest) {
                return Err(refuse(
                    "this digest is already given on an earlier line".into(),
                ));
            }
            entries.push(entry);
        }
        Ok(Self { entries })
    }

    /// Reads `API_TOKENS` entries separated by `;` (numbered as lines from 1).
    pub fn parse_inline(text: &str) -> Result<Self, TokenFileError> {
        Self::parse(&text.replace(';', "\n"), "API_TOKENS entry")
    }

    /// Both sources together; a token in both is refused as it is within one.
    pub fn combine(mut self, other: Tokens) -> Result<Self, TokenFileError> {
        for (i, entry) in other.entries.into_iter().enumerate() {
            if self.entries.iter().any(|e| e.digest == entry.digest) {
                return Err(TokenFileError {
                    source_name: "API_TOKENS entry".into(),
                    line: i + 1,
                    why: "this digest is already given in API_TOKENS_FILE".into(),
                });
            }
            self.entries.push(entry);
        }
        Ok(self)
    }

    pub fn is_open(&self) -> bool {
        self.entries.is_empty()
    }

    /// Who holds a presented token. Every entry is compared, in constant time, so the
    /// answer's timing says nothing about which digest nearly matched.
    pub fn holder(&self, token: &str) -> Option<Holder> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.digest.ct_eq(&digest)) && found.is_none() {
                found = Some(Holder {
                    scope: entry.scope.clone(),
                    access: entry.access,
                    name: entry.name.clone(),
                });
            }
        }
        found
    }
}

fn parse_entry(line: &str) -> Result<Entry, String> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    let [scope, name, digest] = parts.as_slice() else {
        return Err(format!("expected 3 fields, found {}", parts.len()));
    };
    let (access, target) = match scope.strip_prefix(READ_ONLY_PREFIX) {
        Some(target) => (Access::ReadOnly, target),
        None => (Access::ReadWrite, *scope),
    };
    let scope = if target == OPERATOR_SCOPE {
        Scope::All
    } else {
        Scope::Tenant(TenantId::parse(target).map_err(|e| {
            format!("the scope is not a tenant id, `*`, `read:<tenant id>` or `read:*` ({e})")
        })?)
    };
    let hex = digest
        .strip_prefix(DIGEST_PREFIX)
        .ok_or_else(|| "the digest must start with `sha256:`".to_owned())?;
    let digest = decode_digest(hex).ok_or_else(|| "the digest must be 64 hex digits".to_owned())?;
    Ok(Entry {
        scope,
        access,
        name: (*name).to_owned(),
        digest,
    })
}

fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The tokens of `API_TOKENS_FILE` and `API_TOKENS` together; the message names the file
/// or entry and the line of an entry that cannot be read.
pub fn load(file: Option<&Path>, inline: Option<&str>) -> Result<Tokens, String> {
    let mut tokens = Tokens::default();
    // Set but blank (`API_TOKENS=` in a compose file): a mistake, never a way to run open
    // (a blank API_TOKENS_FILE is refused by the argument parser already, naming it).
    if inline.is_some_and(|entries| entries.trim().is_empty()) {
        return Err(
            "API_TOKENS is set but blank: give entries `<tenant_id or *> <name> sha256:<hex>` \
             separated by `;`, or unset it (and API_TOKENS_FILE) to run open"
                .to_owned(),
        );
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("API_TOKENS_FILE {}: {e}", path.display()))?;
        let name = format!("API_TOKENS_FILE {}", path.display());
        tokens = Tokens::parse(&text, &name).map_err(|e| e.to_string())?;
    }
    if let Some(inline) = inline {
        let more = Tokens::parse_inline(inline).map_err(|e| e.to_string())?;
        tokens = tokens.combine(more).map_err(|e| e.to_string())?;
    }
    Ok(tokens)
}

/// The `sha256:<hex>` form of a token, as an entry spells it.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{DIGEST_PREFIX}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_its_scope_holder_and_digest() {
        let text = format!(
            "# operators\n\n* ops {}\nacme ci-bot {}\n",
            hash_token("op-secret"),
            hash_token("acme-secret")
        );
        let tokens = Tokens::parse(&text, "tokens.txt").unwrap();
        let op = tokens.holder("op-secret").unwrap();
        assert_eq!(op.scope, Scope::All);
        assert_eq!(op.name, "ops");
        let acme = tokens.holder("acme-secret").unwrap();
        assert_eq!(acme.scope, Scope::Tenant(TenantId::parse("acme").unwrap()));
        assert!(tokens.holder("guess").is_none());
    }

    #[test]
    fn a_read_prefix_makes_a_read_only_token_for_a_tenant_or_every_tenant() {
        let text = format!(
            "read:* dashboards {}\nread:acme viewer {}\nacme bot {}\n",
            hash_token("r-all"),
            hash_token("r-acme"),
            hash_token("w-acme")
        );
        let tokens = Tokens::parse(&text, "tokens.txt").unwrap();
        let acme = Scope::Tenant(TenantId::parse("acme").unwrap());
        let cases = [
            ("r-all", Scope::All, Access::ReadOnly, "read:*"),
            ("r-acme", acme.clone(), Access::ReadOnly, "read:acme"),
            ("w-acme", acme, Access::ReadWrite, "acme"),
        ];
        for (token, scope, access, label) in cases {
            let h = tokens.holder(token).unwrap();
            assert_eq!((&h.scope, h.access), (&scope, access), "{token}");
            assert_eq!(Holder::scope_label(&h.scope, h.access), label);
        }
    }

    #[test]
    fn a_malformed_entry_is_refused_naming_its_line() {
        for bad in [
            "acme bot",
            "acme bot sha1:00",
            "acme bot sha256:zz",
            "ac:me bot sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "acme bot sha256:00 extra",
            "read: bot sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "write:acme bot sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "read:read:acme bot sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            let text = format!("# ok\n{bad}\n");
            let e = Tokens::parse(&text, "tokens.txt").err().expect(bad);
            assert_eq!(e.line, 2, "{bad}");
            assert!(e.to_string().contains("tokens.txt line 2"), "{e}");
        }
    }

    #[test]
    fn a_token_given_twice_is_refused() {
        let text = format!("acme a {}\nbeta b {}\n", hash_token("x"), hash_token("x"));
        assert_eq!(Tokens::parse(&text, "f").err().map(|e| e.line), Some(2));
        let file = Tokens::parse(&format!("acme a {}", hash_token("x")), "f").unwrap();
        let inline = Tokens::parse_inline(&format!("* ops {}", hash_token("x"))).unwrap();
        assert!(file.combine(inline).is_err());
    }

    #[test]
    fn inline_entries_are_separated_by_semicolons() {
        let text = format!("acme a {};beta b {}", hash_token("x"), hash_token("y"));
        let tokens = Tokens::parse_inline(&text).unwrap();
        assert_eq!(tokens.holder("y").unwrap().name, "b");
        assert!(Tokens::parse_inline("").unwrap().is_open());
    }

    #[test]
    fn the_digest_is_sha256_in_lower_hex() {
        assert_eq!(
            hash_token("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
