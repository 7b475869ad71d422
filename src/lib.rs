//! catalog-jobs: runs a product catalogue's long jobs — sync, enrich, pair — per tenant,
//! hands out a job id at once, and lets anyone poll an honest status and a percentage that
//! never goes backwards. Job state lives in Redis (or an embedded store without it).
//!
//! # Layout
//! Floors, top first; a room imports only rooms on the floors below it (checked by
//! `tests/api/layers.rs`, whose table is this list):
//! 1. the binary (`main.rs`): parses the command line, then serves or runs a subcommand; its
//!    own module `allocator.rs` sets the global allocator (mimalloc) and imports no room.
//! 2. [`startup`]: `App::build` wires the stores, the runner, the metrics and the router.
//! 3. the two boundaries, which know nothing of each other: [`api`], the HTTP boundary and
//!    the only room that knows status codes; [`cli`], the subcommands, an HTTP client of the
//!    service (never the store).
//! 4. [`config`]: the settings, read from flags and the environment and parsed into the
//!    values the rooms below use.
//! 5. [`metrics`]: Prometheus metrics; it observes the runner through `jobs`' seams.
//! 6. [`catalog`]: the domain — products, the one feed reader, and the sync, enrich and pair
//!    functions. Knows nothing of HTTP or of job keys.
//! 7. [`jobs`]: the coordination core (ids, lifecycle, the seam job kinds plug into, store
//!    seam, Redis and memory stores, runner). Knows nothing of HTTP or catalogues.
//! 8. the ground floor, each knowing no other room: [`strict_json`] (JSON parsing that
//!    refuses a repeated key), [`nearest`] (did-you-mean), [`telemetry`] (log set-up),
//!    [`topology`] (how Redis is reached: one node, sentinels, or a cluster).

pub mod api;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod jobs;
pub mod metrics;
pub mod nearest;
pub mod startup;
pub mod strict_json;
pub mod telemetry;
pub mod topology;
