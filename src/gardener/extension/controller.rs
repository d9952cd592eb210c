//! Wiring of the Extension reconciler: the shared Extension cache, Gardener's event filters, the
//! work queue.
//!
//! The cache is watched on every replica, so it is warm and `/readyz` can pass while a replica
//! waits for leadership. Only the leader turns changes into reconciles. Becoming leader replays
//! the cache through the create filter — what controller-runtime does when a controller starts
//! after leader election — so nothing that happened before is missed.
//!
//! The queue is kube-runtime's: it never runs two reconciles of one object at once, merges
//! repeated triggers, honours requeue delays and bounds concurrency.

use std::future::Future;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use kube::ResourceExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::gardener::api::{Extension, OperationState};
use crate::gardener::cache::{ExtensionEvent, SharedCaches};
use crate::gardener::managed_resource::catch_up;

use super::actuator::Actuator;
use super::context::{Context, ReconcilerConfig};
use super::error::ReconcileError;
use super::predicate::{TriggerMode, admit_create, admit_update, is_ours, shoot_not_failed};
use super::reconciler::reconcile;

/// How many admitted events may wait for the queue before the filter waits for it (and the
/// shared cache for the filter).
const TRIGGER_BUFFER: usize = 1024;

/// Runs the Extension controller until `shutdown` completes.
///
/// `leader` completes when this replica may reconcile; `synced` is called once the shared
/// caches (the Extensions among them) hold their first complete lists.
pub async fn run<A: Actuator>(
    ctx: Arc<Context<A>>,
    leader: impl Future<Output = ()> + Send,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    synced: impl FnOnce() + Send,
) {
    let config = ctx.config.clone();
    let store = ctx.caches.extensions.store().clone();
    ctx.caches.wait_until_ready().await;
    synced();

    leader.await;
    // Subscribe before the replay reads the store: a change in between is seen twice at most
    // (the queue merges it), never missed.
    let changes = ctx.caches.extensions.subscribe(TRIGGER_BUFFER);
    let (triggers, queue) = mpsc::channel::<Extension>(TRIGGER_BUFFER);
    let filter = tokio::spawn(filter_changes(
        changes,
        store.clone(),
        ctx.caches.clone(),
        config.clone(),
        triggers.clone(),
    ));
    let _filter_guard = AbortOnDrop(filter);
    // The replay runs beside the workers: it may admit more objects than the trigger buffer
    // holds, and only the running controller drains it.
    let replay = tokio::spawn({
        let (store, caches, config) = (store.clone(), ctx.caches.clone(), config.clone());
        async move { replay_cache(&store, &caches, &config, triggers).await }
    });
    let _replay_guard = AbortOnDrop(replay);
    tracing::info!(controller = "extension", "starting workers");

    let cluster_triggers = cluster_changes(&ctx);
    let trigger_stream = futures::stream::select(
        queue.map(Ok),
        futures::stream::select(cluster_triggers, deletion_progress(&ctx)).map(Ok),
    );
    Controller::for_stream(trigger_stream, store)
        .with_config(controller::Config::default().concurrency(config.max_concurrent))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) => {}
                Err(controller::Error::ObjectNotFound(obj)) => {
                    tracing::debug!(object = %obj, "object gone before its reconcile");
                }
                Err(controller::Error::ReconcilerFailed(e, obj)) => {
                    tracing::debug!(object = %obj, error = %e, category = e.category(), "reconcile failed; retrying with backoff");
                }
                Err(e) => tracing::warn!(error = %e, "controller error"),
            }
        })
        .await;
    tracing::info!(controller = "extension", "stopped");
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn error_policy<A: Actuator>(
    ext: Arc<Extension>,
    _error: &ReconcileError,
    ctx: Arc<Context<A>>,
) -> Action {
    Action::requeue(ctx.next_backoff(&ObjectRef::from_obj(&*ext)))
}

/// Forwards the changes Gardener's filters admit. A relist's objects are admitted once the
/// relist is complete, so the queue never looks for an object the store does not hold yet.
async fn filter_changes(
    mut changes: tokio::sync::mpsc::Receiver<ExtensionEvent>,
    store: Store<Extension>,
    caches: SharedCaches,
    config: ReconcilerConfig,
    mut triggers: mpsc::Sender<Extension>,
) {
    let mut relisted: Vec<(Option<Arc<Extension>>, ObjectRef<Extension>)> = Vec::new();
    while let Some(change) = changes.recv().await {
        let mut admitted = Vec::new();
        match change {
            ExtensionEvent::Applied { old, new } => {
                admitted.extend(admit(old.as_deref(), &new, &caches, &config));
            }
            ExtensionEvent::RelistStarted => relisted.clear(),
            ExtensionEvent::Relisted { old, key } => relisted.push((old, key)),
            ExtensionEvent::RelistDone => {
                for (old, key) in std::mem::take(&mut relisted) {
                    if let Some(new) = store.get(&key) {
                        admitted.extend(admit(old.as_deref(), &new, &caches, &config));
                    }
                }
            }
            ExtensionEvent::Deleted(_) => {}
        }
        for ext in admitted {
            if triggers.send(ext).await.is_err() {
                return;
            }
        }
    }
}

/// Gardener's predicate chain for one create or update event: type, class, then the default
/// filter (operation annotation or generation), then the shoot-not-failed check.
fn admit(
    old: Option<&Extension>,
    new: &Extension,
    caches: &SharedCaches,
    config: &ReconcilerConfig,
) -> Option<Extension> {
    if !in_scope(new, config) {
        return None;
    }
    let admitted = match old {
        Some(old) => admit_update(old, new, config.trigger),
        None => admit_create(new, config.trigger),
    };
    (admitted && shoot_ok(caches, new)).then(|| new.clone())
}

/// Our type and class, and the configured namespace if there is one.
fn in_scope(ext: &Extension, config: &ReconcilerConfig) -> bool {
    is_ours(ext, &config.extension_type, &config.classes)
        && config
            .namespace
            .as_deref()
            .is_none_or(|ns| ext.namespace().as_deref() == Some(ns))
}

/// `ShootNotFailedPredicate`. Deliberate difference from Gardener: a Cluster missing from the
/// cache admits the event instead of dropping it; the reconcile then reads the Cluster from the
/// API server and, if it really is missing, fails with backoff and retries until it appears.
fn shoot_ok(caches: &SharedCaches, ext: &Extension) -> bool {
    let namespace = ext.namespace().unwrap_or_default();
    if !caches.is_shoot_namespace(&namespace) {
        return true;
    }
    let Some(cluster) = caches.cluster(&namespace) else {
        return true;
    };
    let shoot = cluster.shoot();
    shoot_not_failed(Some(shoot.as_ref().map(Option::as_ref)))
}

/// After gaining leadership: every cached object passes the create filter, like the initial
/// list of a freshly started controller.
async fn replay_cache(
    store: &Store<Extension>,
    caches: &SharedCaches,
    config: &ReconcilerConfig,
    mut triggers: mpsc::Sender<Extension>,
) {
    for ext in store.state() {
        if in_scope(&ext, config)
            && admit_create(&ext, config.trigger)
            && shoot_ok(caches, &ext)
            && triggers.send((*ext).clone()).await.is_err()
        {
            return;
        }
    }
}

/// With `--ignore-operation-annotation`, a changed Cluster reconciles the Extensions of its
/// namespace (Gardener wires the same watch but its predicates drop every such event, §1.3 ⚠;
/// we implement the intent). In the default mode Cluster changes trigger nothing.
fn cluster_changes<A: Actuator>(
    ctx: &Arc<Context<A>>,
) -> futures::stream::BoxStream<'static, Extension> {
    if ctx.config.trigger != TriggerMode::GenerationChanged {
        return futures::stream::pending().boxed();
    }
    let changes = ctx.caches.clusters.subscribe();
    let extensions = ctx.caches.extensions.clone();
    let config = ctx.config.clone();
    futures::stream::unfold(changes, |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(cluster) => return Some((cluster.name, changes)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |namespace| {
        let matching: Vec<Extension> = extensions
            .in_namespace(&namespace)
            .into_iter()
            .filter(|e| in_scope(e, &config))
            .map(|e| (*e).clone())
            .collect();
        futures::stream::iter(matching)
    })
    .boxed()
}

/// A deletion waits for gardener-resource-manager (the nodes to report clean through the
/// DaemonSet, then the ManagedResource to be gone), and so may an operation in progress (a
/// bundle written in steps, the next written once the last is applied): a change of a
/// ManagedResource reconciles the Extensions being deleted in its namespace at once, and, once
/// gardener-resource-manager has applied the ManagedResource's generation, those whose
/// operation is in progress, rather than at their next requeue, which stays as the safety net.
/// (An operation in progress is not woken by the changes before: the first reconcile of a new
/// Extension would be run again for each of them.)
fn waits_for_managed_resource(ext: &Extension, applied: bool) -> bool {
    let in_progress = ext
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|op| op.state == OperationState::Processing);
    ext.metadata.deletion_timestamp.is_some() || (applied && in_progress)
}

fn deletion_progress<A: Actuator>(
    ctx: &Arc<Context<A>>,
) -> futures::stream::BoxStream<'static, Extension> {
    let changes = ctx.caches.managed_resources.subscribe();
    let managed_resources = ctx.caches.managed_resources.store().clone();
    let extensions = ctx.caches.extensions.clone();
    let config = ctx.config.clone();
    futures::stream::unfold(changes, |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(mr) => match mr.namespace.clone() {
                    Some(namespace) => return Some(((namespace, mr), changes)),
                    None => continue,
                },
                // A missed change is caught by the requeue.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |(namespace, mr)| {
        let applied = managed_resources
            .get(&mr)
            .is_some_and(|mr| catch_up::check(&mr).is_ok());
        let waiting: Vec<Extension> = extensions
            .in_namespace(&namespace)
            .into_iter()
            .filter(|e| waits_for_managed_resource(e, applied) && in_scope(e, &config))
            .map(|e| (*e).clone())
            .collect();
        futures::stream::iter(waiting)
    })
    .boxed()
}
