//! Integration tests against the embedded control plane (`hack/control-plane.sh`) and the
//! real containerd binaries. `make test` starts everything they need.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod admission_chart;
mod admission_policies_1_29;
mod admission_server;
mod chart;
mod chart_oci;
mod containerd_config;
mod examples;
mod gardener_extension;
mod gardener_healthcheck;
mod gardener_managed_resource;
mod gardener_runtime;
mod harness;
mod healthcheck_backlog;
mod installer_budget;
mod installer_download;
mod installer_follow;
mod installer_handover;
mod installer_host;
mod osc_webhook;
mod release;
mod request_budget;
mod shim_force_delete;
mod shim_lifecycle;
mod shim_removal_races;
mod shim_shoot_cleanup;
