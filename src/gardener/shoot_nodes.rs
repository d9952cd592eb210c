//! Whether the labels of a shoot's nodes changed, without asking the shoot on every health
//! check: one metadata watch of the Nodes per shoot, which remembers a hash of each node's
//! labels and annotations and reports the namespace whenever a node comes, goes or gets other
//! labels or annotations.
//!
//! Nothing but the hashes is kept (a node carries a few dozen labels, a seed thousands of
//! nodes); a check that learns of a change lists the nodes once. Status updates of the nodes
//! (kubelets write them every few minutes) change no label and report nothing. The cost is one
//! long-running request per shoot, renewed every few minutes, instead of a list per shoot and
//! check period.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;

use crate::gardener::cache::watch_config;
use crate::gardener::shoot_client::ShootClient;

/// How many change notifications a slow subscriber may fall behind.
const CHANGE_BUFFER: usize = 256;

/// What a check learns about a shoot's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeLabels {
    /// Nothing changed since the last [`ShootNodes::mark_read`] of this namespace.
    Unchanged,
    /// Something changed (or nobody has looked yet): read the nodes.
    Changed,
    /// The watch failed (a refused token, an unreachable server): the client is suspect.
    Failed,
}

struct Watch {
    /// The client it runs with (`ShootClient::source`).
    source: String,
    changed: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The node watches, by shoot namespace.
#[derive(Clone)]
pub struct ShootNodes {
    watches: Arc<Mutex<HashMap<String, Watch>>>,
    changes: broadcast::Sender<String>,
}

impl Default for ShootNodes {
    fn default() -> Self {
        ShootNodes {
            watches: Arc::default(),
            changes: broadcast::channel(CHANGE_BUFFER).0,
        }
    }
}

impl ShootNodes {
    fn watches(&self) -> MutexGuard<'_, HashMap<String, Watch>> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The namespaces whose nodes' labels changed, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Whether the labels of the nodes of `namespace` changed since they were last read,
    /// starting a watch with `client` when none runs with it yet.
    pub fn state(&self, namespace: &str, client: &ShootClient) -> NodeLabels {
        let mut watches = self.watches();
        if let Some(watch) = watches.get(namespace)
            && watch.source == client.source
        {
            if watch.failed.load(Ordering::SeqCst) {
                return NodeLabels::Failed;
            }
            return if watch.changed.load(Ordering::SeqCst) {
                NodeLabels::Changed
            } else {
                NodeLabels::Unchanged
            };
        }
        let changed = Arc::new(AtomicBool::new(true));
        let failed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(watch_labels(
            client.client.clone(),
            namespace.to_string(),
            changed.clone(),
            failed.clone(),
            self.changes.clone(),
        ));
        watches.insert(
            namespace.to_string(),
            Watch {
                source: client.source.clone(),
                changed,
                failed,
                task: task.abort_handle(),
            },
        );
        NodeLabels::Changed
    }

    /// The caller is about to read the nodes of `namespace`: changes from now on count again.
    pub fn mark_read(&self, namespace: &str) {
        if let Some(watch) = self.watches().get(namespace) {
            watch.changed.store(false, Ordering::SeqCst);
        }
    }

    /// Stops watching `namespace`.
    pub fn forget(&self, namespace: &str) {
        self.watches().remove(namespace);
    }
}

fn labels_hash(node: &PartialObjectMeta<Node>) -> u64 {
    let mut hasher = DefaultHasher::new();
    node.labels().hash(&mut hasher);
    // The installers report failures in an annotation, which the count shows too.
    node.annotations().hash(&mut hasher);
    hasher.finish()
}

/// Watches the nodes' metadata until the first error (which leaves `failed` set: the owner
/// decides when to try again, with a client built from a fresh secret).
async fn watch_labels(
    client: Client,
    namespace: String,
    changed: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    changes: broadcast::Sender<String>,
) {
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let mut events = watcher::watcher(api, watch_config()).boxed();
    let mut hashes: HashMap<String, u64> = HashMap::new();
    let mut relisted: Option<HashMap<String, u64>> = None;
    // A change nobody has read yet is reported once.
    let report = |changed: &AtomicBool| {
        if !changed.swap(true, Ordering::SeqCst) {
            // Nobody listening only means no controller runs yet.
            let _ = changes.send(namespace.clone());
        }
    };
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                // Not reported: the next periodic check finds it, reads the secret again and
                // starts over; reporting would retry an unreachable shoot in a tight loop.
                tracing::debug!(%namespace, error = %e, "watching the shoot's nodes failed");
                failed.store(true, Ordering::SeqCst);
                return;
            }
        };
        match event {
            Event::Apply(node) => {
                let hash = labels_hash(&node);
                if hashes.insert(node.name_any(), hash) != Some(hash) {
                    report(&changed);
                }
            }
            Event::Delete(node) => {
                if hashes.remove(&node.name_any()).is_some() {
                    report(&changed);
                }
            }
            Event::Init => relisted = Some(HashMap::new()),
            Event::InitApply(node) => {
                if let Some(list) = &mut relisted {
                    list.insert(node.name_any(), labels_hash(&node));
                }
            }
            Event::InitDone => {
                if let Some(list) = relisted.take()
                    && list != hashes
                {
                    hashes = list;
                    report(&changed);
                }
            }
        }
    }
}
