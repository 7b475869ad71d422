//! The one integration test binary: real redis-server, real app over real HTTP.

mod auth;
mod bad_input;
mod catalog;
mod cli;
mod conformance;
mod cors;
mod events;
mod extract;
mod faults;
mod feeds;
mod ha;
mod helpers;
mod http;
mod idempotency;
mod limits;
mod observability;
mod openapi;
mod pairing;
mod readiness;
mod replicas;
mod runner;
mod search;
mod service;
mod tenants;
