//! The one integration test binary: real redis-server, real app over real HTTP.

mod conformance;
mod helpers;
mod http;
mod runner;
