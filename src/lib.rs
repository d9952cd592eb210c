//! Gardener extension `containerd-shim`: installs extra containerd runtimes (WebAssembly shims
//! such as Spin, wasmtime and WasmEdge, sandboxes such as gVisor and Kata) on the nodes of
//! Gardener shoots and publishes a RuntimeClass for each.
//!
//! Three parts share this crate, with a one-way dependency direction:
//!
//! - [`gardener`]: a generic Gardener extension framework (the `Extension` reconciler contract,
//!   ManagedResources, health checks, the runtime). It knows nothing about shims.
//! - [`shim`]: the containerd-shim extension built on it: providerConfig, catalog, the shoot
//!   bundle and the actuator.
//! - [`installer`]: the node installer that runs in the shoot. It uses neither of the above;
//!   it shares only [`desired_shims`], the data the controller hands to it, and
//!   [`user_agent`], how every client of the crate names itself to the API server.
//!
//! [`admission`], the garden-side webhook for Shoots, runs the extension's own validation
//! ([`shim`]) on the whole Shoot.

pub mod admission;
pub mod desired_shims;
pub mod gardener;
pub mod installer;
pub mod shim;
pub mod user_agent;
