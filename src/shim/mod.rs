//! The containerd-shim extension: providerConfig, the shim catalog, the shoot bundle and the
//! actuator that the [`crate::gardener`] framework drives.

pub mod config;
pub mod render;
pub mod actuator;
