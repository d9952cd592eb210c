//! The installer's view of the Kubernetes API: its own Node's labels and the cluster-wide
//! restart budget. [`crate::installer::node::KubeCluster`] is the real one; an in-memory one
//! (module `memory`, tests and the `test-util` feature only) stands in for host-only tests.

use std::collections::BTreeMap;
use std::future::Future;

use crate::desired_shims::READY_LABEL_PREFIX;

use super::error::InstallerError;

/// Label changes: `Some(value)` sets, `None` removes.
#[cfg(any(test, feature = "test-util"))]
mod memory;
#[cfg(any(test, feature = "test-util"))]
pub use memory::{ClusterEvent, MemoryCluster, MemorySlot};

pub type LabelChanges = BTreeMap<String, Option<String>>;

/// What the installer needs from the API server.
pub trait Cluster: Send + Sync {
    /// Proof of holding a restart slot.
    type Slot: Send;

    /// The current labels of this node.
    fn node_labels(
        &self,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, InstallerError>> + Send;

    /// Sets or removes labels of this node (only keys under our prefix).
    fn patch_labels(
        &self,
        changes: LabelChanges,
    ) -> impl Future<Output = Result<(), InstallerError>> + Send;

    /// Sets this node's [`crate::desired_shims::FAILURES_ANNOTATION`] (`None` removes it).
    fn publish_failures(
        &self,
        failures: Option<String>,
    ) -> impl Future<Output = Result<(), InstallerError>> + Send;

    /// Waits until this node holds one of `slots` restart slots.
    fn acquire_restart_slot(
        &self,
        slots: u32,
    ) -> impl Future<Output = Result<Self::Slot, InstallerError>> + Send;

    /// Gives a slot back.
    fn release_restart_slot(
        &self,
        slot: Self::Slot,
    ) -> impl Future<Output = Result<(), InstallerError>> + Send;
}

/// Keeps only changes to our own labels: the admission policy would refuse others anyway.
pub fn own_labels_only(changes: LabelChanges) -> LabelChanges {
    changes
        .into_iter()
        .filter(|(key, _)| key.starts_with(READY_LABEL_PREFIX))
        .collect()
}

/// No API server (the manual `uninstall` with `--no-api`): no labels to read or set, and a
/// restart slot is always granted. The operator answers for pacing restarts by hand.
#[derive(Clone, Default)]
pub struct LocalCluster;

impl Cluster for LocalCluster {
    type Slot = ();

    async fn node_labels(&self) -> Result<BTreeMap<String, String>, InstallerError> {
        Ok(BTreeMap::new())
    }

    async fn patch_labels(&self, changes: LabelChanges) -> Result<(), InstallerError> {
        if !changes.is_empty() {
            tracing::warn!(?changes, "no API access: change these node labels by hand");
        }
        Ok(())
    }

    async fn publish_failures(&self, failures: Option<String>) -> Result<(), InstallerError> {
        if let Some(failures) = failures {
            tracing::warn!(%failures, "no API access: the node's failures are not published");
        }
        Ok(())
    }

    async fn acquire_restart_slot(&self, _slots: u32) -> Result<(), InstallerError> {
        Ok(())
    }

    async fn release_restart_slot(&self, _slot: ()) -> Result<(), InstallerError> {
        Ok(())
    }
}
