//! The garden-side admission of Shoots: a validating webhook the Gardener API server calls on
//! every create and update of a Shoot that lists the `containerd-shim` extension. It refuses a
//! providerConfig the seed controller would refuse, with the same code and catalog, and the
//! mistakes only the whole Shoot shows, at `kubectl apply` rather than minutes later in the
//! Shoot's status.
//!
//! - [`shoot_view`]: the Shoot fields the checks read;
//! - [`checks`], [`runtime_collisions`], [`field_paths`]: the checks, pure;
//! - [`decision`]: create and update semantics, pure;
//! - [`review`]: the `admission.k8s.io/v1` AdmissionReview in and out;
//! - [`server`]: the HTTPS endpoint (TLS from [`crate::gardener::webhook::tls`]) and its
//!   lifecycle.

pub mod checks;
pub mod decision;
pub mod field_paths;
pub mod review;
pub mod runtime_collisions;
pub mod server;
pub mod shoot_view;
