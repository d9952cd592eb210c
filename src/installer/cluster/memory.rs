//! An in-memory [`Cluster`] for tests that need no API server: a node's labels and the restart
//! budget's slots, shared by clones, with everything it saw recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Cluster, LabelChanges, own_labels_only};
use crate::installer::error::InstallerError;

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
