//! The containerd-shim extension: providerConfig, the shim catalog, the shoot bundle and the
//! actuator that the [`crate::gardener`] framework drives.

pub mod actuator;
pub mod bundle_kinds;
pub mod config;
pub mod controllers;
pub mod error;
pub mod health;
pub mod identity;
pub mod installer_rollout;
pub mod node_events;
pub mod offline;
pub mod osc;
pub mod osc_webhook;
pub mod plan;
pub mod render;
pub mod runtime_class_removal;
pub mod shoot_cleanup;

#[cfg(test)]
mod hostile_test;
