//! The operator's console through the real server: read-only tokens and `whoami`, the
//! overview (`GET /catalog/stats`) on both stores and across two replicas of the binary,
//! every tenant's jobs, and bulk retry and cancel.

mod bulk;
mod listing;
mod lost;
mod replicas;
mod scopes;
mod stats;
