//! What makes the controller check an Extension besides its period: a new generation of the
//! Extension, a change of a ManagedResource in its namespace, a change of its Cluster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::Stream;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast;

use super::bookkeeping::Bookkeeping;
use super::config::HealthCheckConfig;
use crate::gardener::api::Extension;
use crate::gardener::api::extension::DEFAULT_CLASS;
use crate::gardener::cache::ExtensionEvent;

/// Turns the shared Extension cache's changes into check triggers.
///
/// A check is triggered when an Extension of ours is first seen and when its generation
/// changes, as Gardener's `GenerationChangedPredicate` does: status writes (ours, the lifecycle
/// reconciler's) and annotation changes (gardenlet's) do not trigger a check, so our own writes
/// cannot loop. Every version the cache shows is reported to the bookkeeping, which learns
/// from it when the cache has caught up with our own last write.
pub(crate) struct ExtensionEvents {
    config: Arc<HealthCheckConfig>,
    bookkeeping: Arc<Bookkeeping>,
    store: Store<Extension>,
    generations: HashMap<ObjectRef<Extension>, Option<i64>>,
    /// The objects of a relist in progress.
    relisted: Vec<ObjectRef<Extension>>,
}

impl ExtensionEvents {
    pub(crate) fn new(
        config: Arc<HealthCheckConfig>,
        bookkeeping: Arc<Bookkeeping>,
        store: Store<Extension>,
    ) -> ExtensionEvents {
        ExtensionEvents {
            config,
            bookkeeping,
            store,
            generations: HashMap::new(),
            relisted: Vec::new(),
        }
    }

    /// Everything the store holds now, as if it had just been listed: the controller starts
    /// with this, then follows the changes.
    pub(crate) fn start(&mut self) -> Vec<ObjectRef<Extension>> {
        let all: Vec<Arc<Extension>> = self.store.state();
        all.iter().filter_map(|ext| self.seen(ext)).collect()
    }

    pub(crate) fn on_event(&mut self, event: ExtensionEvent) -> Vec<ObjectRef<Extension>> {
        match event {
            ExtensionEvent::Applied { new, .. } => {
                let key = ObjectRef::from_obj(new.as_ref());
                if !self.config.handles(&new) {
                    // Forget it in case it was ours before (a class or type that changed).
                    self.forget(&key);
                    return Vec::new();
                }
                self.seen(&new).into_iter().collect()
            }
            ExtensionEvent::Deleted(old) => {
                self.forget(&ObjectRef::from_obj(old.as_ref()));
                Vec::new()
            }
            ExtensionEvent::RelistStarted => {
                self.relisted.clear();
                Vec::new()
            }
            ExtensionEvent::Relisted { key, .. } => {
                self.relisted.push(key);
                Vec::new()
            }
            ExtensionEvent::RelistDone => {
                let relisted: HashSet<ObjectRef<Extension>> =
                    std::mem::take(&mut self.relisted).into_iter().collect();
                // Forget what vanished while the watch was down.
                let vanished: Vec<ObjectRef<Extension>> = self
                    .generations
                    .keys()
                    .filter(|key| !relisted.contains(key))
                    .cloned()
                    .collect();
                for key in &vanished {
                    self.forget(key);
                }
                self.bookkeeping.retain(|key| relisted.contains(key));
                let mut triggers = Vec::new();
                for key in &relisted {
                    match self.store.get(key) {
                        Some(ext) if self.config.handles(&ext) => {
                            triggers.extend(self.seen(&ext));
                        }
                        _ => self.forget(key),
                    }
                }
                triggers
            }
        }
    }

    /// Notes a version of one of our Extensions; its key when it is new or of a new
    /// generation.
    fn seen(&mut self, ext: &Extension) -> Option<ObjectRef<Extension>> {
        if !self.config.handles(ext) {
            return None;
        }
        let key = ObjectRef::from_obj(ext);
        self.bookkeeping
            .observe_version(&key, ext.metadata.resource_version.as_deref());
        match self
            .generations
            .insert(key.clone(), ext.metadata.generation)
        {
            Some(previous) if previous == ext.metadata.generation => None,
            _ => Some(key),
        }
    }

    fn forget(&mut self, key: &ObjectRef<Extension>) {
        if self.generations.remove(key).is_some()
            && let Some(namespace) = &key.namespace
        {
            self.config.release(namespace);
        }
        self.bookkeeping.forget(key);
    }
}

/// Those of the Extensions of one namespace that the controller handles; with `shoot_only`,
/// only those of class shoot (a Cluster belongs to a shoot namespace and matters only to them).
pub(crate) fn extensions_in(
    in_namespace: &[Arc<Extension>],
    config: &HealthCheckConfig,
    shoot_only: bool,
) -> Vec<ObjectRef<Extension>> {
    in_namespace
        .iter()
        .filter(|e| config.handles(e))
        .filter(|e| !shoot_only || e.class_or_default() == DEFAULT_CLASS)
        .map(|e| ObjectRef::from_obj(e.as_ref()))
        .collect()
}

/// A notification from a cache.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change<T> {
    Changed(T),
    /// Notifications were lost (the subscriber fell behind): anything may have changed.
    Missed,
}

/// The notifications of a broadcast as a stream; it ends when the cache is gone.
pub(crate) fn changes<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl Stream<Item = Change<T>> + Send {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(value) => Some((Change::Changed(value), rx)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((Change::Missed, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::gardener::api::extension::test_extension;
    use crate::gardener::healthcheck::bookkeeping::PendingWrite;

    fn config() -> Arc<HealthCheckConfig> {
        Arc::new(HealthCheckConfig::new("containerd-shim"))
    }

    fn ext(ns: &str, name: &str, type_: &str, class: Option<&str>, generation: i64) -> Extension {
        let mut e = test_extension(ns, name, type_, class);
        e.metadata.generation = Some(generation);
        e
    }

    fn ours(ns: &str, generation: i64) -> Extension {
        ext(ns, "containerd-shim", "containerd-shim", None, generation)
    }

    /// A store and the events the shared cache would publish for changes applied to it.
    struct Cache {
        store: Store<Extension>,
        writer: reflector::store::Writer<Extension>,
    }

    impl Cache {
        fn new() -> Cache {
            let (store, writer) = reflector::store();
            Cache { store, writer }
        }

        fn apply(&mut self, e: Extension) -> ExtensionEvent {
            let old = self.store.get(&ObjectRef::from_obj(&e));
            self.writer.apply_watcher_event(&Event::Apply(e.clone()));
            ExtensionEvent::Applied {
                old,
                new: Arc::new(e),
            }
        }

        fn delete(&mut self, e: Extension) -> ExtensionEvent {
            self.writer.apply_watcher_event(&Event::Delete(e.clone()));
            ExtensionEvent::Deleted(Arc::new(e))
        }

        fn relist(&mut self, objects: Vec<Extension>) -> Vec<ExtensionEvent> {
            let mut events = vec![ExtensionEvent::RelistStarted];
            self.writer.apply_watcher_event(&Event::Init);
            for e in objects {
                events.push(ExtensionEvent::Relisted {
                    old: self.store.get(&ObjectRef::from_obj(&e)),
                    key: ObjectRef::from_obj(&e),
                });
                self.writer.apply_watcher_event(&Event::InitApply(e));
            }
            self.writer.apply_watcher_event(&Event::InitDone);
            events.push(ExtensionEvent::RelistDone);
            events
        }
    }

    fn names(refs: &[ObjectRef<Extension>]) -> Vec<String> {
        let mut names: Vec<String> = refs
            .iter()
            .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn first_sight_and_generation_changes_trigger_other_updates_do_not() {
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), Arc::default(), cache.store.clone());
        let first = events.on_event(cache.apply(ours("a", 1)));
        assert_eq!(names(&first), ["a/containerd-shim"]);
        assert!(events.on_event(cache.apply(ours("a", 1))).is_empty());
        assert_eq!(
            names(&events.on_event(cache.apply(ours("a", 2)))),
            ["a/containerd-shim"]
        );
    }

    #[test]
    fn the_start_triggers_everything_of_ours_in_the_store() {
        let mut cache = Cache::new();
        for e in [
            ours("a", 1),
            ours("b", 3),
            ext("a", "x", "other", None, 1),
            ext("a", "y", "containerd-shim", Some("seed"), 1),
        ] {
            cache.apply(e);
        }
        let mut events = ExtensionEvents::new(config(), Arc::default(), cache.store.clone());
        assert_eq!(
            names(&events.start()),
            ["a/containerd-shim", "b/containerd-shim"]
        );
        assert!(events.on_event(cache.apply(ours("b", 3))).is_empty());
    }

    #[test]
    fn other_types_and_classes_never_trigger() {
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), Arc::default(), cache.store.clone());
        for e in [
            ext("a", "x", "other", None, 1),
            ext("a", "y", "containerd-shim", Some("seed"), 1),
        ] {
            assert!(events.on_event(cache.apply(e.clone())).is_empty());
            let relist = cache.relist(vec![e]);
            assert!(relist.into_iter().all(|ev| events.on_event(ev).is_empty()));
        }
    }

    fn pending(version: &str) -> Option<PendingWrite> {
        Some(PendingWrite {
            version: version.into(),
            conditions: Vec::new(),
            at: std::time::Instant::now(),
        })
    }

    #[test]
    fn an_extension_that_stops_being_ours_is_forgotten() {
        let bookkeeping = Arc::new(Bookkeeping::default());
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), bookkeeping.clone(), cache.store.clone());
        events.on_event(cache.apply(ours("a", 1)));
        bookkeeping.set_pending(&ObjectRef::from_obj(&ours("a", 1)), pending("1"));
        let mut changed = ours("a", 2);
        changed.spec.class = Some("seed".into());
        assert!(events.on_event(cache.apply(changed)).is_empty());
        assert_eq!(bookkeeping.len(), 0);
    }

    #[test]
    fn the_cache_showing_our_write_ends_it_being_pending() {
        let bookkeeping = Arc::new(Bookkeeping::default());
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), bookkeeping.clone(), cache.store.clone());
        let key = ObjectRef::from_obj(&ours("a", 1));
        events.on_event(cache.apply(ours("a", 1)));
        bookkeeping.set_pending(&key, pending("8"));
        let mut older = ours("a", 1);
        older.metadata.resource_version = Some("7".into());
        events.on_event(cache.apply(older));
        assert!(bookkeeping.pending(&key).is_some());
        let mut ours_written = ours("a", 1);
        ours_written.metadata.resource_version = Some("8".into());
        events.on_event(cache.apply(ours_written));
        assert_eq!(bookkeeping.pending(&key), None);
    }

    #[test]
    fn a_relist_triggers_only_new_or_changed_objects_and_forgets_vanished_ones() {
        let bookkeeping = Arc::new(Bookkeeping::default());
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), bookkeeping.clone(), cache.store.clone());
        events.on_event(cache.apply(ours("a", 1)));
        events.on_event(cache.apply(ours("gone", 1)));
        bookkeeping.set_pending(&ObjectRef::from_obj(&ours("gone", 1)), pending("5"));
        let mut triggered = Vec::new();
        for ev in cache.relist(vec![ours("a", 1), ours("b", 1)]) {
            triggered.extend(events.on_event(ev));
        }
        assert_eq!(names(&triggered), ["b/containerd-shim"]);
        assert_eq!(
            bookkeeping.len(),
            0,
            "the vanished object's memory is dropped"
        );
        assert_eq!(
            names(&events.on_event(cache.apply(ours("gone", 1)))),
            ["gone/containerd-shim"],
            "re-created after the relist: seen for the first time again"
        );
    }

    #[test]
    fn delete_forgets_so_a_recreated_object_triggers_again() {
        let mut cache = Cache::new();
        let mut events = ExtensionEvents::new(config(), Arc::default(), cache.store.clone());
        events.on_event(cache.apply(ours("a", 1)));
        assert!(events.on_event(cache.delete(ours("a", 1))).is_empty());
        assert_eq!(
            names(&events.on_event(cache.apply(ours("a", 1)))),
            ["a/containerd-shim"]
        );
    }

    #[test]
    fn the_handled_extensions_of_a_namespace() {
        let in_namespace: Vec<Arc<Extension>> = vec![
            Arc::new(ours("a", 1)),
            Arc::new(ext("a", "seedy", "containerd-shim", Some("seed"), 1)),
            Arc::new(ext("a", "other", "other-type", None, 1)),
        ];
        let mut config = HealthCheckConfig::new("containerd-shim");
        config.classes = vec!["shoot".into(), "seed".into()];
        let refs = |shoot_only| -> Vec<String> {
            extensions_in(&in_namespace, &config, shoot_only)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(refs(false), ["containerd-shim", "seedy"]);
        assert_eq!(refs(true), ["containerd-shim"]);
        assert!(extensions_in(&[], &config, false).is_empty());
    }

    #[tokio::test]
    async fn broadcast_changes_report_lag_and_end_with_the_sender() {
        let (tx, rx) = broadcast::channel(2);
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        drop(tx);
        let seen: Vec<_> = changes(rx).collect().await;
        assert_eq!(
            seen,
            [Change::Missed, Change::Changed(1), Change::Changed(2)]
        );
    }
}
