//! The node installer: puts shim binaries on a node, registers their runtime handlers with
//! containerd, restarts containerd within a cluster-wide budget, verifies, and labels the node.
//! It shares only [`crate::desired_shims`] with the controller.

pub mod containerd;
