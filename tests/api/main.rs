//! The one integration test binary: real redis-server, real app over real HTTP.

mod catalog;
mod conformance;
mod extract;
mod faults;
mod feeds;
mod ha;
mod helpers;
mod http;
mod replicas;
mod runner;
