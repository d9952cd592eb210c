//! The node installer: puts shim binaries on a node, registers their runtime handlers with
//! containerd, restarts containerd within a cluster-wide budget, verifies, and labels the node.
//! It shares only [`crate::desired_shims`] with the controller.
//!
//! - [`host`]: the one trait through which everything touches the node, with the real node and
//!   a temporary-directory test host;
//! - [`containerd`]: the containerd configuration engine (pure planning of config edits);
//! - [`digest`]: sha256 of bytes and of files, shared by everything that hashes;
//! - [`payload`]: versioned shim directories, downloads, the stable symlink, garbage collection;
//! - [`state`]: the on-host state file every run resumes from;
//! - [`plan`]: the pure decision of which steps a node needs;
//! - [`converge`]: executing those steps, journaled, with rollback;
//! - [`cluster`] and [`node`]: node labels and the Lease-slot restart budget;
//! - [`daemon`] and [`status`]: the loop, the status file and the readiness probe;
//! - [`host_watch`]: what wakes the loop on the node (file changes, containerd's restarts).

pub mod cluster;
pub mod containerd;
pub mod converge;
pub mod daemon;
pub mod digest;
pub mod download;
pub mod error;
pub mod host;
pub mod host_watch;
pub mod node;
pub mod payload;
pub mod plan;
pub mod state;
pub mod status;

pub use error::InstallerError;
