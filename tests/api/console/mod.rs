//! The operator's console through the real server: read-only tokens and `whoami`, and the
//! overview (`GET /catalog/stats`) on both stores and across two replicas of the binary.

mod listing;
mod replicas;
mod scopes;
mod stats;
