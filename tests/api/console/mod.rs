//! The operator's console through the real server: read-only tokens and `whoami`.

mod scopes;
