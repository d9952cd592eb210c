//! The installer's view of the Kubernetes API: its own Node's labels and the cluster-wide
//! restart budget. [`crate::installer::node::KubeCluster`] is the real one; [`MemoryCluster`]
//! stands in for host-only tests.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::desired_shims::READY_LABEL_PREFIX;

use super::error::InstallerError;

/// Label changes: `Some(value)` sets, `None` removes.
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

/// What a [`MemoryCluster`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    Label { key: String, value: Option<String> },
    Failures(Option<String>),
    Acquired(u32),
    Released(u32),
}

#[derive(Default)]
struct Inner {
    labels: BTreeMap<String, String>,
    holders: BTreeMap<u32, String>,
    events: Vec<ClusterEvent>,
}

/// An in-memory node and restart budget, shareable between several installers (clones share
/// state) for tests that need no API server.
#[derive(Clone)]
pub struct MemoryCluster {
    node: String,
    inner: Arc<Mutex<Inner>>,
}

/// A slot of a [`MemoryCluster`].
#[derive(Debug)]
pub struct MemorySlot(pub u32);

impl MemoryCluster {
    pub fn new(node: &str, labels: BTreeMap<String, String>) -> Self {
        MemoryCluster {
            node: node.to_string(),
            inner: Arc::new(Mutex::new(Inner {
                labels,
                ..Inner::default()
            })),
        }
    }

    /// The same budget seen from another node.
    pub fn for_node(&self, node: &str) -> Self {
        MemoryCluster {
            node: node.to_string(),
            inner: self.inner.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        self.lock().labels.clone()
    }

    /// Changes a label as an operator or Gardener would (any key).
    pub fn set_label(&self, key: &str, value: Option<&str>) {
        let mut inner = self.lock();
        match value {
            Some(value) => inner.labels.insert(key.to_string(), value.to_string()),
            None => inner.labels.remove(key),
        };
    }

    pub fn events(&self) -> Vec<ClusterEvent> {
        self.lock().events.clone()
    }

    /// Slots currently held, by slot.
    pub fn holders(&self) -> BTreeMap<u32, String> {
        self.lock().holders.clone()
    }
}

impl Cluster for MemoryCluster {
    type Slot = MemorySlot;

    async fn node_labels(&self) -> Result<BTreeMap<String, String>, InstallerError> {
        Ok(self.labels())
    }

    async fn patch_labels(&self, changes: LabelChanges) -> Result<(), InstallerError> {
        let mut inner = self.lock();
        for (key, value) in own_labels_only(changes) {
            match &value {
                Some(v) => inner.labels.insert(key.clone(), v.clone()),
                None => inner.labels.remove(&key),
            };
            inner.events.push(ClusterEvent::Label { key, value });
        }
        Ok(())
    }

    async fn publish_failures(&self, failures: Option<String>) -> Result<(), InstallerError> {
        self.lock().events.push(ClusterEvent::Failures(failures));
        Ok(())
    }

    async fn acquire_restart_slot(&self, slots: u32) -> Result<MemorySlot, InstallerError> {
        loop {
            {
                let mut inner = self.lock();
                let free = (0..slots.max(1)).find(|slot| {
                    inner
                        .holders
                        .get(slot)
                        .is_none_or(|holder| *holder == self.node)
                });
                if let Some(slot) = free {
                    inner.holders.insert(slot, self.node.clone());
                    inner.events.push(ClusterEvent::Acquired(slot));
                    return Ok(MemorySlot(slot));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn release_restart_slot(&self, slot: MemorySlot) -> Result<(), InstallerError> {
        let mut inner = self.lock();
        if inner.holders.get(&slot.0) == Some(&self.node) {
            inner.holders.remove(&slot.0);
        }
        inner.events.push(ClusterEvent::Released(slot.0));
        Ok(())
    }
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
