//! The one integration test binary: real redis-server, real app over real HTTP.

mod catalog;
mod conformance;
mod extract;
mod faults;
mod helpers;
mod http;
mod pairing;
mod runner;
