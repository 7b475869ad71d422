//! catalog-jobs: runs a product catalogue's long jobs — sync, enrich, pair — per tenant,
//! hands out a job id at once, and lets anyone poll an honest status and a percentage that
//! never goes backwards. Job state lives in Redis (or an embedded store without it).
//!
//! # Layout
//! - [`jobs`]: the coordination core (ids, lifecycle, store seam, Redis and memory stores,
//!   runner). Knows nothing of HTTP or catalogues.
//! - [`catalog`]: the domain — products, the one feed reader, and the sync, enrich and pair
//!   functions. Knows nothing of HTTP or of job keys.
//! - [`api`]: the HTTP boundary, the only module that knows status codes.
//! - [`cli`]: the client subcommands, an HTTP client of the service (never the store).
//! - [`config`], [`startup`], [`telemetry`], [`metrics`]: configuration, wiring, logging,
//!   Prometheus metrics.
//! - [`strict_json`]: JSON parsing that refuses a repeated key (request bodies, feed rows).

pub mod api;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod jobs;
pub mod metrics;
pub mod startup;
pub mod strict_json;
pub mod telemetry;
pub mod topology;
