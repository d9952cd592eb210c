//! What makes the controller check an Extension besides its period: a new generation of the
//! Extension, a change of a ManagedResource in its namespace, a change of its Cluster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::Stream;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use tokio::sync::broadcast;

use super::bookkeeping::Bookkeeping;
use super::config::HealthCheckConfig;
use crate::gardener::api::Extension;
use crate::gardener::api::extension::DEFAULT_CLASS;

/// An Extension watch event, filtered to the Extensions the controller handles.
pub(crate) struct Filtered {
    /// The event to apply to the controller's store (`None`: not ours, ignore).
    pub store_event: Option<Event<Extension>>,
    /// The Extensions to check now.
    pub triggers: Vec<ObjectRef<Extension>>,
}

/// Turns the Extension watch into store updates and check triggers.
///
/// The store holds only the Extensions we handle. A check is triggered when an Extension is
/// first seen and when its generation changes, as Gardener's `GenerationChangedPredicate`
/// does: status writes (ours, the lifecycle reconciler's) and annotation changes (gardenlet's)
/// do not trigger a check, so our own writes cannot loop.
pub(crate) struct ExtensionEvents {
    config: Arc<HealthCheckConfig>,
    bookkeeping: Arc<Bookkeeping>,
    generations: HashMap<ObjectRef<Extension>, Option<i64>>,
    /// The objects of a relist in progress, to forget those deleted while the watch was down.
    relisted: Option<HashSet<ObjectRef<Extension>>>,
}

impl ExtensionEvents {
    pub(crate) fn new(
        config: Arc<HealthCheckConfig>,
        bookkeeping: Arc<Bookkeeping>,
    ) -> ExtensionEvents {
        ExtensionEvents {
            config,
            bookkeeping,
            generations: HashMap::new(),
            relisted: None,
        }
    }

    pub(crate) fn on_event(&mut self, event: Event<Extension>) -> Filtered {
        match event {
            Event::Init => {
                self.relisted = Some(HashSet::new());
                self.pass(Event::Init, Vec::new())
            }
            Event::InitApply(ext) => {
                if !self.config.handles(&ext) {
                    return self.ignore();
                }
                let key = ObjectRef::from_obj(&ext);
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(key.clone());
                }
                let triggers = self.observe_generation(key, ext.metadata.generation);
                self.pass(Event::InitApply(ext), triggers)
            }
            Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    self.generations.retain(|key, _| relisted.contains(key));
                    self.bookkeeping.retain(|key| relisted.contains(key));
                }
                self.pass(Event::InitDone, Vec::new())
            }
            Event::Apply(ext) => {
                let key = ObjectRef::from_obj(&ext);
                if !self.config.handles(&ext) {
                    // Drop it from the store in case it was ours before (a class or type
                    // that changed); a no-op otherwise.
                    return if self.generations.contains_key(&key) {
                        self.forget(&key);
                        self.pass(Event::Delete(ext), Vec::new())
                    } else {
                        self.ignore()
                    };
                }
                let triggers = self.observe_generation(key, ext.metadata.generation);
                self.pass(Event::Apply(ext), triggers)
            }
            Event::Delete(ext) => {
                self.forget(&ObjectRef::from_obj(&ext));
                self.pass(Event::Delete(ext), Vec::new())
            }
        }
    }

    fn observe_generation(
        &mut self,
        key: ObjectRef<Extension>,
        generation: Option<i64>,
    ) -> Vec<ObjectRef<Extension>> {
        match self.generations.insert(key.clone(), generation) {
            Some(previous) if previous == generation => Vec::new(),
            _ => vec![key],
        }
    }

    fn forget(&mut self, key: &ObjectRef<Extension>) {
        self.generations.remove(key);
        self.bookkeeping.forget(key);
    }

    fn pass(&self, event: Event<Extension>, triggers: Vec<ObjectRef<Extension>>) -> Filtered {
        Filtered {
            store_event: Some(event),
            triggers,
        }
    }

    fn ignore(&self) -> Filtered {
        Filtered {
            store_event: None,
            triggers: Vec::new(),
        }
    }
}

/// The Extensions (of the controller's store) in `namespace`; with `shoot_only`, only those of
/// class shoot (a Cluster belongs to a shoot namespace and matters only to them).
pub(crate) fn extensions_in(
    extensions: &[Arc<Extension>],
    namespace: &str,
    shoot_only: bool,
) -> Vec<ObjectRef<Extension>> {
    extensions
        .iter()
        .filter(|e| e.namespace().as_deref() == Some(namespace))
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

    use super::*;
    use crate::gardener::api::ExtensionSpec;

    fn config() -> Arc<HealthCheckConfig> {
        Arc::new(HealthCheckConfig::new("containerd-shim"))
    }

    fn ext(ns: &str, name: &str, type_: &str, class: Option<&str>, generation: i64) -> Extension {
        let mut e = Extension::new(
            name,
            ExtensionSpec {
                type_: type_.into(),
                class: class.map(String::from),
                provider_config: None,
                provider_config_error: None,
            },
        );
        e.metadata.namespace = Some(ns.into());
        e.metadata.generation = Some(generation);
        e
    }

    fn ours(ns: &str, generation: i64) -> Extension {
        ext(ns, "containerd-shim", "containerd-shim", None, generation)
    }

    fn names(f: &Filtered) -> Vec<String> {
        f.triggers
            .iter()
            .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name))
            .collect()
    }

    #[test]
    fn first_sight_and_generation_changes_trigger_other_updates_do_not() {
        let mut events = ExtensionEvents::new(config(), Arc::default());
        let first = events.on_event(Event::Apply(ours("a", 1)));
        assert_eq!(names(&first), ["a/containerd-shim"]);
        assert!(matches!(first.store_event, Some(Event::Apply(_))));
        let status_only = events.on_event(Event::Apply(ours("a", 1)));
        assert!(status_only.triggers.is_empty());
        assert!(
            status_only.store_event.is_some(),
            "the store still gets the new status"
        );
        assert_eq!(
            names(&events.on_event(Event::Apply(ours("a", 2)))),
            ["a/containerd-shim"]
        );
    }

    #[test]
    fn other_types_and_classes_never_reach_the_store() {
        let mut events = ExtensionEvents::new(config(), Arc::default());
        for e in [
            ext("a", "x", "other", None, 1),
            ext("a", "y", "containerd-shim", Some("seed"), 1),
        ] {
            let f = events.on_event(Event::Apply(e.clone()));
            assert!(f.store_event.is_none() && f.triggers.is_empty());
            let f = events.on_event(Event::InitApply(e));
            assert!(f.store_event.is_none() && f.triggers.is_empty());
        }
    }

    #[test]
    fn an_extension_that_stops_being_ours_is_removed_from_the_store() {
        let bookkeeping = Arc::new(Bookkeeping::default());
        let mut events = ExtensionEvents::new(config(), bookkeeping.clone());
        events.on_event(Event::Apply(ours("a", 1)));
        bookkeeping.set_known_version(&ObjectRef::from_obj(&ours("a", 1)), Some("1".into()));
        let mut changed = ours("a", 2);
        changed.spec.class = Some("seed".into());
        let f = events.on_event(Event::Apply(changed));
        assert!(matches!(f.store_event, Some(Event::Delete(_))));
        assert!(f.triggers.is_empty());
        assert_eq!(bookkeeping.len(), 0);
    }

    #[test]
    fn a_relist_triggers_only_new_or_changed_objects_and_forgets_vanished_ones() {
        let bookkeeping = Arc::new(Bookkeeping::default());
        let mut events = ExtensionEvents::new(config(), bookkeeping.clone());
        events.on_event(Event::Apply(ours("a", 1)));
        events.on_event(Event::Apply(ours("gone", 1)));
        bookkeeping.set_known_version(&ObjectRef::from_obj(&ours("gone", 1)), Some("5".into()));
        assert!(events.on_event(Event::Init).triggers.is_empty());
        assert!(
            events
                .on_event(Event::InitApply(ours("a", 1)))
                .triggers
                .is_empty()
        );
        assert_eq!(
            names(&events.on_event(Event::InitApply(ours("b", 1)))),
            ["b/containerd-shim"]
        );
        events.on_event(Event::InitDone);
        assert_eq!(
            bookkeeping.len(),
            0,
            "the vanished object's memory is dropped"
        );
        assert_eq!(
            names(&events.on_event(Event::Apply(ours("gone", 1)))),
            ["gone/containerd-shim"],
            "re-created after the relist: seen for the first time again"
        );
    }

    #[test]
    fn delete_forgets_so_a_recreated_object_triggers_again() {
        let mut events = ExtensionEvents::new(config(), Arc::default());
        events.on_event(Event::Apply(ours("a", 1)));
        let deleted = events.on_event(Event::Delete(ours("a", 1)));
        assert!(matches!(deleted.store_event, Some(Event::Delete(_))));
        assert_eq!(
            names(&events.on_event(Event::Apply(ours("a", 1)))),
            ["a/containerd-shim"]
        );
    }

    #[test]
    fn extensions_in_a_namespace() {
        let all: Vec<Arc<Extension>> = vec![
            Arc::new(ours("a", 1)),
            Arc::new(ext("a", "seedy", "containerd-shim", Some("seed"), 1)),
            Arc::new(ours("b", 1)),
        ];
        let refs = |ns, shoot_only| -> Vec<String> {
            extensions_in(&all, ns, shoot_only)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(refs("a", false), ["containerd-shim", "seedy"]);
        assert_eq!(refs("a", true), ["containerd-shim"]);
        assert!(refs("c", false).is_empty());
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
