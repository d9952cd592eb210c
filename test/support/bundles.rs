//! The shim bundles in the one shoot API server every test shares: removing what earlier tests
//! left behind (two ManagedResources would fight over the same shoot objects), and waiting for
//! what a bundle delivers.

use gardener_extension_containerd_shim::gardener::api::{
    ConditionStatus, Extension, ManagedResource,
};
use gardener_extension_containerd_shim::gardener::managed_resource;
use gardener_extension_containerd_shim::shim::identity::ORIGIN;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use serde_json::json;

use super::{nodes, poll};

/// A finalizer a test puts on a ManagedResource to stand for a shoot's gardener-resource-manager
/// scaled to zero (a hibernated shoot): its deletion cannot end until the test removes it.
pub const RESOURCE_MANAGER_ASLEEP: &str =
    "test.containerd-shim.extensions.gardener.cloud/resource-manager-asleep";

/// Holds the deletion of the ManagedResource `namespace/name` as a scaled-down
/// gardener-resource-manager would ([`RESOURCE_MANAGER_ASLEEP`]).
pub async fn put_resource_manager_to_sleep(seed: &Client, namespace: &str, name: &str) {
    set_resource_manager_asleep(seed, namespace, name, true).await;
}

/// Lets the deletion of `namespace/name` end again: the shoot woke up.
pub async fn wake_resource_manager(seed: &Client, namespace: &str, name: &str) {
    set_resource_manager_asleep(seed, namespace, name, false).await;
}

/// Adds or removes [`RESOURCE_MANAGER_ASLEEP`]; gardener-resource-manager writes the object's
/// status meanwhile, so a conflict is retried. A ManagedResource that is gone is awake.
async fn set_resource_manager_asleep(seed: &Client, namespace: &str, name: &str, asleep: bool) {
    let api: Api<ManagedResource> = Api::namespaced(seed.clone(), namespace);
    poll::until(
        &format!("the finalizer of the sleeping resource manager set to {asleep}"),
        poll::DEFAULT_TIMEOUT,
        || async {
            let Some(mr) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
                return if asleep {
                    Err("no ManagedResource".to_string())
                } else {
                    Ok(())
                };
            };
            let mut finalizers: Vec<&str> = mr
                .finalizers()
                .iter()
                .map(String::as_str)
                .filter(|f| *f != RESOURCE_MANAGER_ASLEEP)
                .collect();
            if asleep {
                finalizers.push(RESOURCE_MANAGER_ASLEEP);
            }
            let body = json!({"metadata": {"finalizers": finalizers, "resourceVersion": mr.resource_version()}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

/// Deletes every ManagedResource of this extension in the seed (with its shoot objects) and
/// waits until gardener-resource-manager has removed each. All are deleted before the first
/// wait: one still alive would re-create the shoot objects the others are deleting. While
/// waiting, pods bound to nodes that are gone are removed, as a real cluster's pod garbage
/// collector would: they would hold the installer DaemonSet's foreground deletion.
pub async fn remove_shim_bundles(seed: &Client, shoot: &Client) {
    let mrs: Api<ManagedResource> = Api::all(seed.clone());
    let leftovers = mrs
        .list(&ListParams::default().labels(&format!("origin={ORIGIN}")))
        .await
        .expect("list ManagedResources");
    for mr in &leftovers {
        let ns = mr.namespace().unwrap_or_default();
        if mr.finalizers().iter().any(|f| f == RESOURCE_MANAGER_ASLEEP) {
            wake_resource_manager(seed, &ns, &mr.name_any()).await;
        }
        managed_resource::set_keep_objects(seed, &ns, &mr.name_any(), false)
            .await
            .expect("keepObjects=false");
        managed_resource::delete(seed, &ns, &mr.name_any())
            .await
            .expect("delete a leftover ManagedResource");
    }
    let remaining = || async {
        nodes::delete_orphaned_pods(shoot).await;
        let mut left = Vec::new();
        for mr in &leftovers {
            let ns = mr.namespace().unwrap_or_default();
            let api: Api<ManagedResource> = Api::namespaced(seed.clone(), &ns);
            if let Some(current) = api
                .get_opt(&mr.name_any())
                .await
                .map_err(|e| vec![e.to_string()])?
            {
                let applied = current
                    .condition("ResourcesApplied")
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                left.push(format!("{ns}/{}: {applied}", current.name_any()));
            }
        }
        if left.is_empty() { Ok(()) } else { Err(left) }
    };
    poll::until(
        "the leftover ManagedResources to be deleted",
        poll::DEFAULT_TIMEOUT,
        remaining,
    )
    .await;
}

/// Everything earlier tests on this control plane left behind that would share the shoot with
/// the next test: Extensions (removed as admin, without a controller, so that no controller
/// of the next test acts on them), their bundles and the simulated nodes.
pub async fn remove_leftovers(seed: &Client, shoot: &Client) {
    let extensions: Api<Extension> = Api::all(seed.clone());
    for ext in extensions
        .list(&ListParams::default())
        .await
        .expect("list Extensions")
    {
        let api: Api<Extension> =
            Api::namespaced(seed.clone(), &ext.namespace().unwrap_or_default());
        match api
            .patch(
                &ext.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => panic!("removing the finalizers of a leftover Extension: {e}"),
        }
        match api.delete(&ext.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting a leftover Extension: {e}"),
        }
    }
    remove_shim_bundles(seed, shoot).await;
    nodes::delete_simulated_nodes(shoot).await;
}

/// Polls until the shoot has the RuntimeClass `name`.
pub async fn wait_runtime_class(shoot: &Client, name: &str) {
    let api: Api<RuntimeClass> = Api::all(shoot.clone());
    poll::until(
        &format!("RuntimeClass {name} in the shoot"),
        poll::DEFAULT_TIMEOUT,
        || async {
            api.get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
}

/// Polls until the RuntimeClass `name` is gone from the shoot.
pub async fn wait_runtime_class_gone(shoot: &Client, name: &str) {
    let api: Api<RuntimeClass> = Api::all(shoot.clone());
    poll::until(
        &format!("RuntimeClass {name} to be gone"),
        poll::DEFAULT_TIMEOUT,
        || async {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        },
    )
    .await;
}

/// The annotation gardener-resource-manager stamps on every object it applies:
/// `[<cluster id>:]<namespace>/<ManagedResource>`.
pub const ORIGIN_ANNOTATION: &str = "resources.gardener.cloud/origin";

/// An object in the shoot, as [`objects_with_origin`] finds it.
#[derive(Clone, Debug)]
pub struct ShootObject {
    pub kind: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ShootObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind.kind, self.name),
            None => write!(f, "{}/{}", self.kind.kind, self.name),
        }
    }
}

impl ShootObject {
    pub async fn delete(&self, shoot: &Client) {
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(shoot.clone(), ns, &self.kind),
            None => Api::all_with(shoot.clone(), &self.kind),
        };
        match api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting {self}: {e}"),
        }
    }
}

/// The label of ConfigMaps and Secrets that gardener-resource-manager's garbage collector
/// deletes once nothing refers to them (at least ten minutes after their creation).
pub const GARBAGE_COLLECTABLE_LABEL: &str =
    "resources.gardener.cloud/garbage-collectable-reference";

/// Every object in the shoot whose origin is the ManagedResource `namespace/name`, sorted,
/// except garbage-collectable ConfigMaps (the resource manager leaves those to its garbage
/// collector on purpose, whether or not a ManagedResource still lists them). Looks at every
/// kind a shim bundle holds, with a list of its own rather than the extension's, so that it
/// judges the extension instead of repeating it.
pub async fn objects_with_origin(shoot: &Client, namespace: &str, name: &str) -> Vec<ShootObject> {
    let kinds = [
        ApiResource::erase::<RuntimeClass>(&()),
        ApiResource::erase::<DaemonSet>(&()),
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<ServiceAccount>(&()),
        ApiResource::erase::<Role>(&()),
        ApiResource::erase::<RoleBinding>(&()),
        ApiResource::erase::<ClusterRole>(&()),
        ApiResource::erase::<ClusterRoleBinding>(&()),
        ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
        ApiResource::erase::<ValidatingAdmissionPolicyBinding>(&()),
    ];
    let key = format!("{namespace}/{name}");
    let mut found = Vec::new();
    for kind in &kinds {
        let api: Api<DynamicObject> = Api::all_with(shoot.clone(), kind);
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list {} in the shoot: {e}", kind.plural));
        for object in list.items {
            let ours = object
                .annotations()
                .get(ORIGIN_ANNOTATION)
                .is_some_and(|o| *o == key || o.ends_with(&format!(":{key}")));
            let collected = kind.kind == "ConfigMap"
                && object
                    .labels()
                    .get(GARBAGE_COLLECTABLE_LABEL)
                    .is_some_and(|v| v == "true");
            if ours && !collected {
                found.push(ShootObject {
                    kind: kind.clone(),
                    namespace: object.namespace(),
                    name: object.name_any(),
                });
            }
        }
    }
    found.sort_by_key(|o| o.to_string());
    found
}

/// Polls until gardener-resource-manager has applied the current generation of the
/// ManagedResource: `status.observedGeneration` is `metadata.generation` and `ResourcesApplied`
/// is `True` (it writes both in the status update that ends a successful pass).
pub async fn wait_caught_up(seed: &Client, namespace: &str, name: &str) -> ManagedResource {
    let api: Api<ManagedResource> = Api::namespaced(seed.clone(), namespace);
    poll::until(
        &format!("gardener-resource-manager to apply the current generation of {namespace}/{name}"),
        poll::DEFAULT_TIMEOUT,
        || async {
            let mr = api.get(name).await.map_err(|e| e.to_string())?;
            let observed = mr.status.as_ref().and_then(|s| s.observed_generation);
            let applied = mr
                .condition("ResourcesApplied")
                .map(|c| (c.status, c.reason.clone()));
            if observed == mr.metadata.generation
                && applied
                    .as_ref()
                    .is_some_and(|(s, _)| *s == ConditionStatus::True)
            {
                Ok(mr)
            } else {
                Err(format!(
                    "generation {:?}, observed {observed:?}, ResourcesApplied {applied:?}",
                    mr.metadata.generation
                ))
            }
        },
    )
    .await
}
