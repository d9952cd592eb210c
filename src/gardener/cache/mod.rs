//! In-memory caches of the resources the controllers read, kept current by watches, so that a
//! reconcile reads from memory instead of sending a GET or LIST.
//!
//! Start-up lists are paged ([`LIST_PAGE_SIZE`]): the peak memory of a start-up is one page,
//! not one list of every object of the seed.
//!
//! Every cache trims what no controller reads (managed fields, large embedded objects) before
//! it stores an object: a seed holds one Cluster per shoot, and each embeds a CloudProfile that
//! can be hundreds of kilobytes.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use super::api::{Cluster, Extension, ManagedResource, SHOOT_ROLE_LABEL, SHOOT_ROLE_VALUE};

mod extensions;

pub use extensions::{ExtensionCache, ExtensionEvent};

/// Objects per page of a start-up list (client-go's default is 500). A page of Clusters
/// embedding large CloudProfiles is several megabytes before it is trimmed.
pub const LIST_PAGE_SIZE: u32 = 50;

/// How many change notifications a slow subscriber may fall behind before it is told it lagged
/// (and should then treat everything as changed).
const CHANGE_BUFFER: usize = 1024;

/// One watched resource kind: a store that always holds the latest state the watch delivered,
/// and a broadcast of the objects that changed.
pub struct Cache<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    changes: broadcast::Sender<ObjectRef<K>>,
    /// Becomes true with the first complete list. kube's own `Store::wait_until_ready` wakes
    /// only one of several concurrent waiters, and several controllers wait on these caches.
    ready: tokio::sync::watch::Receiver<bool>,
    task: Arc<AbortOnDrop>,
}

impl<K: Resource + 'static> Clone for Cache<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Cache {
            store: self.store.clone(),
            changes: self.changes.clone(),
            ready: self.ready.clone(),
            task: self.task.clone(),
        }
    }
}

struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    /// Starts watching `api` in a background task that lives as long as any clone of the
    /// cache. `trim` removes what nobody reads before the object is stored. Watch errors are
    /// retried with kube's default backoff (800 ms to 30 s), so a restarted API server is
    /// picked up again without a restart of the process.
    pub fn spawn(api: Api<K>, config: watcher::Config, trim: fn(&mut K)) -> Cache<K> {
        let (store, mut writer) = reflector::store::<K>();
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let sender = changes.clone();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let handle = tokio::spawn(async move {
            let mut events = watcher::watcher(api, config)
                .default_backoff()
                .modify(trim)
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        writer.apply_watcher_event(&event);
                        if matches!(event, Event::InitDone) {
                            ready_tx.send_replace(true);
                        }
                        for changed in changed_refs(&event) {
                            // No subscriber is not an error: nobody is interested yet.
                            let _ = sender.send(changed);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "watch failed; retrying with backoff"),
                }
            }
        });
        Cache {
            store,
            changes,
            ready,
            task: Arc::new(AbortOnDrop(handle.abort_handle())),
        }
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The latest state of every watched object.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Notifications of objects that were added, changed or deleted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ObjectRef<K>> {
        self.changes.subscribe()
    }

    /// Waits until the first complete list has been stored.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        // The sender lives in the watch task for as long as this cache does, so the only error
        // (sender dropped) cannot happen while we hold the cache.
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Whether the first complete list has been stored.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }
}

fn changed_refs<K>(event: &Event<K>) -> Vec<ObjectRef<K>>
where
    K: Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    match event {
        Event::Apply(obj) | Event::Delete(obj) | Event::InitApply(obj) => {
            vec![ObjectRef::from_obj(obj)]
        }
        Event::Init | Event::InitDone => Vec::new(),
    }
}

/// Clears `metadata.managedFields`, which no controller reads and which is often the largest
/// part of an object.
pub fn trim_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Keeps of a shoot namespace only what says it is one: its name and the role label.
pub fn trim_namespace(namespace: &mut PartialObjectMeta<Namespace>) {
    let role = namespace
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SHOOT_ROLE_LABEL))
        .cloned();
    namespace.metadata = kube::api::ObjectMeta {
        name: namespace.metadata.name.take(),
        resource_version: namespace.metadata.resource_version.take(),
        labels: role.map(|r| [(SHOOT_ROLE_LABEL.to_string(), r)].into()),
        ..Default::default()
    };
}

/// Keeps only the decoded Shoot of a Cluster ([`Cluster::keep_only_shoot_view`]): extensions
/// never read the embedded CloudProfile or Seed, and a whole Shoot per shoot of the seed would
/// be most of the process's memory.
pub fn trim_cluster(cluster: &mut Cluster) {
    trim_managed_fields(cluster);
    cluster.keep_only_shoot_view();
}

/// A watch configuration with the paged start-up list.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// The caches every controller of an extension shares.
#[derive(Clone)]
pub struct SharedCaches {
    /// The Extensions (of every type: each controller filters), for the lifecycle and the
    /// health-check controller alike.
    pub extensions: ExtensionCache,
    /// All Clusters (one per shoot), trimmed to the Shoot.
    pub clusters: Cache<Cluster>,
    /// Metadata of the shoot namespaces (`gardener.cloud/role=shoot`). A namespace absent here
    /// is not a shoot namespace.
    pub shoot_namespaces: Cache<PartialObjectMeta<Namespace>>,
    /// The ManagedResources this extension created (selected by their origin label).
    pub managed_resources: Cache<ManagedResource>,
}

impl SharedCaches {
    /// Starts the watches. `origin` is the value of the `origin` label on this extension's
    /// ManagedResources; the Extension cache holds every type.
    pub fn spawn(client: &Client, origin: &str) -> SharedCaches {
        SharedCaches::spawn_in(client, origin, None, None)
    }

    /// Like [`SharedCaches::spawn`], with the Extensions of one type only (what an extension's
    /// controllers read), and of one namespace only (tests, deployments limited to one
    /// namespace).
    pub fn spawn_in(
        client: &Client,
        origin: &str,
        extension_type: Option<&str>,
        extension_namespace: Option<&str>,
    ) -> SharedCaches {
        let extensions: Api<Extension> = match extension_namespace {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        };
        SharedCaches {
            extensions: ExtensionCache::spawn(
                extensions,
                watch_config(),
                extension_type.map(String::from),
            ),
            clusters: Cache::spawn(Api::all(client.clone()), watch_config(), trim_cluster),
            shoot_namespaces: Cache::spawn(
                Api::all(client.clone()),
                watch_config().labels(&format!("{SHOOT_ROLE_LABEL}={SHOOT_ROLE_VALUE}")),
                trim_namespace,
            ),
            managed_resources: Cache::spawn(
                Api::all(client.clone()),
                watch_config().labels(&format!("origin={origin}")),
                trim_managed_fields,
            ),
        }
    }

    /// Waits until every cache holds its first complete list.
    pub async fn wait_until_ready(&self) {
        self.extensions.wait_until_ready().await;
        self.clusters.wait_until_ready().await;
        self.shoot_namespaces.wait_until_ready().await;
        self.managed_resources.wait_until_ready().await;
    }

    /// Whether `namespace` is a shoot control-plane namespace.
    pub fn is_shoot_namespace(&self, namespace: &str) -> bool {
        self.shoot_namespaces
            .store()
            .get(&ObjectRef::new(namespace))
            .is_some_and(|ns| {
                ns.labels().get(SHOOT_ROLE_LABEL).map(String::as_str) == Some(SHOOT_ROLE_VALUE)
            })
    }

    /// The Cluster of a shoot namespace (named like the namespace).
    pub fn cluster(&self, namespace: &str) -> Option<Arc<Cluster>> {
        self.clusters.store().get(&ObjectRef::new(namespace))
    }

    /// A ManagedResource by namespace and name.
    pub fn managed_resource(&self, namespace: &str, name: &str) -> Option<Arc<ManagedResource>> {
        self.managed_resources
            .store()
            .get(&ObjectRef::new(name).within(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::ClusterSpec;

    #[test]
    fn a_trimmed_cluster_keeps_only_the_typed_shoot() {
        let shoot = serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p", "uid": "u", "labels": {"a": "b"}},
            "spec": {
                "hibernation": {"enabled": true},
                "kubernetes": {"version": "1.33.2", "kubeAPIServer": {"x": 1}},
                "provider": {"type": "local", "workers": [{"name": "a", "maximum": 3}]},
                "networking": {"type": "calico"}
            },
            "status": {"isHibernated": true, "technicalID": "shoot--p--s", "conditions": [{}],
                       "lastOperation": {"type": "Reconcile", "state": "Failed", "progress": 10,
                                         "description": "d", "lastUpdateTime": "2026-01-01T00:00:00Z"}}
        });
        let mut cluster = Cluster::new(
            "shoot--p--s",
            ClusterSpec {
                cloud_profile: serde_json::json!({"kind": "CloudProfile"}),
                seed: Some(serde_json::json!({"kind": "Seed"})),
                shoot,
                shoot_view: None,
            },
        );
        let before = cluster.shoot().expect("decodes");
        trim_cluster(&mut cluster);
        assert_eq!(cluster.shoot().expect("decodes"), before);
        assert!(cluster.spec.shoot.is_null(), "only the typed view is kept");
        assert!(cluster.spec.cloud_profile.is_null() && cluster.spec.seed.is_none());

        let mut broken = Cluster::new(
            "x",
            ClusterSpec {
                shoot: serde_json::json!({"spec": {"provider": {"workers": "nope"}}}),
                ..ClusterSpec::default()
            },
        );
        trim_cluster(&mut broken);
        assert!(broken.shoot().is_err(), "the error stays to be reported");
        let mut empty = Cluster::new("y", ClusterSpec::default());
        trim_cluster(&mut empty);
        assert_eq!(empty.shoot().expect("no Shoot"), None);
    }
}
