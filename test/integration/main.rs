//! Integration tests against the embedded control plane (`hack/control-plane.sh`) and the
//! real containerd binaries. `make test` starts everything they need.

#[path = "../support/mod.rs"]
mod support;

mod containerd_config;
mod gardener_runtime;
mod harness;
