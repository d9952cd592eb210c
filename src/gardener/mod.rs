//! A generic Gardener extension framework: what Gardener's Go extension library provides,
//! for Rust extensions. Nothing in here knows about containerd shims.

pub mod api;
pub mod cache;
pub mod decode;
pub mod error_codes;
pub mod extension;
pub mod healthcheck;
pub mod imagevector;
pub mod managed_resource;
pub mod runtime;
pub mod shoot_client;
pub mod shoot_nodes;
pub mod webhook;
