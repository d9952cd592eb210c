//! End-to-end tests of the real controller binary against a control plane of their own:
//! `make test` starts a second control plane for this crate and runs its tests one at a time,
//! because the binary reconciles every Extension in the seed.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod controller;
mod faults;
mod hostile_delete;
mod rbac;
