//! Tests against a garden: gardener-apiserver (Gardener's own API server, from the same Gardener
//! module as the other tools) with its etcd, registered behind the control plane's
//! kube-apiserver by APIServices, as `hack/control-plane.sh run --garden` starts it. Shoots are
//! created through the kube-apiserver's address, and gardener-apiserver calls the admission
//! webhooks registered there.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/helm.rs"]
mod helm;

mod admission;
mod world;
