//! The one Extension cache of the process: a single watch whose store both the lifecycle and
//! the health-check controller read, and whose changes each of them receives with the state
//! the object had before, so that each applies its own event filter.
//!
//! One watch instead of one per controller halves the objects held in memory, the start-up
//! lists and the watch traffic. A seed holds the Extensions of every extension type (no server
//! side filter can select `spec.type`); only those of the configured type are kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use super::{AbortOnDrop, trim_managed_fields};
use crate::gardener::api::Extension;

/// A change of the cache, delivered after the store holds it.
#[derive(Clone, Debug)]
pub enum ExtensionEvent {
    /// Created or changed; `old` is the state the cache held before (`None`: first seen).
    Applied {
        old: Option<Arc<Extension>>,
        new: Arc<Extension>,
    },
    /// Deleted (the last state the cache held).
    Deleted(Arc<Extension>),
    /// The watch starts over with a complete list: `Relisted` follow for every object, then
    /// `RelistDone`. The store switches to the new list at `RelistDone`, so the new state of a
    /// relisted object is read from the store then.
    RelistStarted,
    Relisted {
        old: Option<Arc<Extension>>,
        key: ObjectRef<Extension>,
    },
    RelistDone,
}

/// The watched Extensions of one namespace or of all.
#[derive(Clone)]
pub struct ExtensionCache {
    store: Store<Extension>,
    ready: tokio::sync::watch::Receiver<bool>,
    subscribers: Arc<Mutex<Vec<mpsc::Sender<ExtensionEvent>>>>,
    by_namespace: Arc<RwLock<NamespaceIndex>>,
    _task: Arc<AbortOnDrop>,
}

impl ExtensionCache {
    /// Starts the watch (kube's default backoff on errors) in a task that lives as long as any
    /// clone of the cache. With `extension_type`, Extensions of other types are dropped as they
    /// arrive.
    pub fn spawn(
        api: Api<Extension>,
        config: watcher::Config,
        extension_type: Option<String>,
    ) -> ExtensionCache {
        let (store, mut writer) = reflector::store::<Extension>();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let subscribers: Arc<Mutex<Vec<mpsc::Sender<ExtensionEvent>>>> = Arc::default();
        let by_namespace: Arc<RwLock<NamespaceIndex>> = Arc::default();
        let task = {
            let (store, subscribers, by_namespace) =
                (store.clone(), subscribers.clone(), by_namespace.clone());
            tokio::spawn(async move {
                let mut events = watcher::watcher(api, config)
                    .default_backoff()
                    .modify(trim_managed_fields::<Extension>)
                    .boxed();
                while let Some(event) = events.next().await {
                    let event = match event {
                        Ok(event) => event,
                        Err(e) => {
                            tracing::warn!(error = %e, "Extension watch failed; retrying with backoff");
                            continue;
                        }
                    };
                    let Some(event) = keep(event, extension_type.as_deref(), &store) else {
                        continue;
                    };
                    let old = match &event {
                        Event::Apply(obj) | Event::InitApply(obj) | Event::Delete(obj) => {
                            store.get(&ObjectRef::from_obj(obj))
                        }
                        Event::Init | Event::InitDone => None,
                    };
                    writer.apply_watcher_event(&event);
                    by_namespace
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .follow(&event, &store);
                    let change = match event {
                        Event::Apply(obj) => {
                            let new = store
                                .get(&ObjectRef::from_obj(&obj))
                                .unwrap_or_else(|| Arc::new(obj));
                            ExtensionEvent::Applied { old, new }
                        }
                        Event::Delete(obj) => {
                            ExtensionEvent::Deleted(old.unwrap_or_else(|| Arc::new(obj)))
                        }
                        Event::Init => ExtensionEvent::RelistStarted,
                        Event::InitApply(obj) => ExtensionEvent::Relisted {
                            old,
                            key: ObjectRef::from_obj(&obj),
                        },
                        Event::InitDone => {
                            ready_tx.send_replace(true);
                            ExtensionEvent::RelistDone
                        }
                    };
                    publish(&subscribers, change).await;
                }
            })
        };
        ExtensionCache {
            store,
            ready,
            subscribers,
            by_namespace,
            _task: Arc::new(AbortOnDrop(task.abort_handle())),
        }
    }

    /// The latest state of the watched Extensions in `namespace`: a lookup, where filtering
    /// [`Store::state`] would copy every Extension of the seed for each ManagedResource or
    /// Cluster change.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<Extension>> {
        let keys = self
            .by_namespace
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys(namespace)
            .to_vec();
        keys.iter().filter_map(|key| self.store.get(key)).collect()
    }

    /// The latest state of every watched Extension.
    pub fn store(&self) -> &Store<Extension> {
        &self.store
    }

    /// The changes from now on. The watch waits for a subscriber that falls `buffer` events
    /// behind (nothing is dropped); a dropped receiver unsubscribes.
    pub fn subscribe(&self, buffer: usize) -> mpsc::Receiver<ExtensionEvent> {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    /// Waits until the first complete list is in the store.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        // The sender lives as long as the watch task, which lives as long as this cache.
        let _ = ready.wait_for(|r| *r).await;
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }
}

/// The keys of the store's objects by namespace. Follows the same events as the store, after
/// it: a relist replaces the store's contents at `InitDone`, so the index is rebuilt then.
#[derive(Default)]
struct NamespaceIndex {
    keys: HashMap<String, Vec<ObjectRef<Extension>>>,
}

impl NamespaceIndex {
    fn follow(&mut self, event: &Event<Extension>, store: &Store<Extension>) {
        match event {
            Event::Apply(obj) => {
                let key = ObjectRef::from_obj(obj);
                let keys = self
                    .keys
                    .entry(key.namespace.clone().unwrap_or_default())
                    .or_default();
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            Event::Delete(obj) => {
                let key = ObjectRef::from_obj(obj);
                let namespace = key.namespace.clone().unwrap_or_default();
                if let Some(keys) = self.keys.get_mut(&namespace) {
                    keys.retain(|k| k != &key);
                    if keys.is_empty() {
                        self.keys.remove(&namespace);
                    }
                }
            }
            Event::InitDone => {
                self.keys.clear();
                for obj in store.state() {
                    let key = ObjectRef::from_obj(obj.as_ref());
                    self.keys
                        .entry(key.namespace.clone().unwrap_or_default())
                        .or_default()
                        .push(key);
                }
            }
            Event::Init | Event::InitApply(_) => {}
        }
    }

    fn keys(&self, namespace: &str) -> &[ObjectRef<Extension>] {
        self.keys.get(namespace).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// The event as the cache sees it when only `extension_type` is kept: another type's object is
/// dropped, or deleted from the store if it is there (its type changed).
fn keep(
    event: Event<Extension>,
    extension_type: Option<&str>,
    store: &Store<Extension>,
) -> Option<Event<Extension>> {
    let Some(wanted) = extension_type else {
        return Some(event);
    };
    match event {
        Event::Apply(obj) | Event::InitApply(obj) | Event::Delete(obj)
            if obj.spec.type_ != wanted =>
        {
            store
                .get(&ObjectRef::from_obj(&obj))
                .is_some()
                .then_some(Event::Delete(obj))
        }
        other => Some(other),
    }
}

/// Sends `change` to every subscriber, in subscription order, and forgets those that are gone.
async fn publish(subscribers: &Mutex<Vec<mpsc::Sender<ExtensionEvent>>>, change: ExtensionEvent) {
    let current: Vec<_> = subscribers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if current.is_empty() {
        return;
    }
    let mut gone = false;
    for subscriber in &current {
        gone |= subscriber.send(change.clone()).await.is_err();
    }
    if gone {
        subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| !s.is_closed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::extension::test_extension;

    fn ext(name: &str, type_: &str) -> Extension {
        test_extension("ns", name, type_, None)
    }

    #[test]
    fn only_the_configured_type_is_kept() {
        let (store, mut writer) = reflector::store::<Extension>();
        let ours = Some("containerd-shim");
        assert!(keep(Event::Apply(ext("a", "other")), ours, &store).is_none());
        assert!(keep(Event::InitApply(ext("a", "other")), ours, &store).is_none());
        assert!(keep(Event::Delete(ext("a", "other")), ours, &store).is_none());
        assert!(matches!(
            keep(Event::Apply(ext("b", "containerd-shim")), ours, &store),
            Some(Event::Apply(_))
        ));
        assert!(matches!(
            keep(Event::Apply(ext("b", "other")), None, &store),
            Some(Event::Apply(_))
        ));
        // Held as ours, now of another type: removed from the store.
        writer.apply_watcher_event(&Event::Apply(ext("c", "containerd-shim")));
        assert!(matches!(
            keep(Event::Apply(ext("c", "other")), ours, &store),
            Some(Event::Delete(_))
        ));
    }

    fn keys_in(index: &NamespaceIndex, namespace: &str) -> Vec<String> {
        index
            .keys(namespace)
            .iter()
            .map(|k| k.name.clone())
            .collect()
    }

    #[test]
    fn the_namespace_index_follows_applies_deletes_and_relists() {
        let (store, mut writer) = reflector::store::<Extension>();
        let mut index = NamespaceIndex::default();
        let mut step = |event: Event<Extension>, index: &mut NamespaceIndex| {
            writer.apply_watcher_event(&event);
            index.follow(&event, &store);
        };
        step(Event::Apply(ext("a", "containerd-shim")), &mut index);
        step(Event::Apply(ext("a", "containerd-shim")), &mut index);
        step(Event::Apply(ext("b", "containerd-shim")), &mut index);
        assert_eq!(
            keys_in(&index, "ns"),
            ["a", "b"],
            "an update is not a second key"
        );
        assert!(keys_in(&index, "other").is_empty());
        step(Event::Delete(ext("a", "containerd-shim")), &mut index);
        assert_eq!(keys_in(&index, "ns"), ["b"]);
        // A relist in which b is gone and c is new: the old keys stay until it is complete.
        step(Event::Init, &mut index);
        step(Event::InitApply(ext("c", "containerd-shim")), &mut index);
        assert_eq!(keys_in(&index, "ns"), ["b"]);
        step(Event::InitDone, &mut index);
        assert_eq!(keys_in(&index, "ns"), ["c"]);
        step(Event::Delete(ext("c", "containerd-shim")), &mut index);
        assert!(index.keys.is_empty(), "an emptied namespace is dropped");
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_change_and_closed_ones_are_dropped() {
        let subscribers: Mutex<Vec<mpsc::Sender<ExtensionEvent>>> = Mutex::default();
        let (a_tx, mut a) = mpsc::channel(4);
        let (b_tx, b) = mpsc::channel(4);
        subscribers.lock().unwrap().extend([a_tx, b_tx]);
        drop(b);
        publish(&subscribers, ExtensionEvent::RelistStarted).await;
        publish(&subscribers, ExtensionEvent::RelistDone).await;
        assert!(matches!(
            a.recv().await,
            Some(ExtensionEvent::RelistStarted)
        ));
        assert!(matches!(a.recv().await, Some(ExtensionEvent::RelistDone)));
        assert_eq!(subscribers.lock().unwrap().len(), 1);
    }
}
