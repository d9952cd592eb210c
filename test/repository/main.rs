//! Checks of the repository itself: they read its files and run none of its code, so they live in
//! a test crate of their own rather than in the library.
//!
//! - [`contract_refs`]: every reference to the Gardener contract (`§` sections, test ids)
//!   resolves in docs/gardener-contract.md.
//! - [`module_boundaries`]: the library's modules depend in the documented direction and form no
//!   import cycle.
//! - [`release_rules`]: containerd release behaviour is decided in `ContainerdVersion` only.
//! - [`test_doubles`]: the library's test doubles and fault injection are compiled only for tests.

// Tests fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract_refs;
mod module_boundaries;
mod release_rules;
mod test_doubles;
