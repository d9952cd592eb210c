//! Tests on real nodes: a control plane started with `--nodes` (systemd-nspawn machines with
//! systemd, containerd and a kubelet, see hack/nodes/lib.sh) and the real controller binary.
//! The installer DaemonSet runs on the nodes for real: its init containers stage payloads, it
//! enters the host's mount namespace, edits containerd's configuration, restarts containerd,
//! verifies it and labels the node; pods then run under the installed runtime.
//!
//! `make test` starts that control plane and runs these tests one at a time (they share the
//! nodes). Each test starts from clean nodes and leaves them clean.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod crun_payload;
mod disruption;
mod drift;
mod extension_upgrade;
mod gvisor;
mod install;
mod node_agent;
mod node_agent_scenario;
mod node_selector;
mod nothing_left;
mod prompt_removal;
mod refusal_events;
mod registry;
mod removal;
mod rollout;
mod scenario;
mod upgrade;
mod wasm;
