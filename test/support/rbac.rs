//! Granting the controller's own identity (the audited user of the control plane's
//! `SEED_CONTROLLER_KUBECONFIG`) exactly the seed rules a test means to hold it to.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The user the control plane's controller kubeconfig authenticates as.
pub const CONTROLLER_USER: &str = "containerd-shim-controller";

/// One RBAC rule: `verbs` on `resources` of API group `group` (`""` for the core group).
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// What the controller's shared caches list and watch cluster-wide besides Extensions.
pub fn cache_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            "extensions.gardener.cloud",
            &["clusters"],
            &["list", "watch"],
        ),
        rule(
            "resources.gardener.cloud",
            &["managedresources"],
            &["list", "watch"],
        ),
        rule("", &["namespaces"], &["list", "watch"]),
    ]
}

/// Binds `cluster_rules` cluster-wide (nothing when empty) and `namespace_rules` in `ns` to the
/// controller's user, each as a role and a binding named `name`. RBAC takes a moment to reach
/// the authorizer: the caller polls a request the rules allow before relying on them.
pub async fn grant_controller(
    seed: &Client,
    name: &str,
    ns: &str,
    cluster_rules: Vec<PolicyRule>,
    namespace_rules: Vec<PolicyRule>,
) {
    let subject = Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: CONTROLLER_USER.into(),
        ..Default::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.to_string(),
    };
    let meta = || ObjectMeta {
        name: Some(name.to_string()),
        ..Default::default()
    };
    if !cluster_rules.is_empty() {
        let role = ClusterRole {
            metadata: meta(),
            rules: Some(cluster_rules),
            ..Default::default()
        };
        let binding = ClusterRoleBinding {
            metadata: meta(),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject.clone()]),
        };
        create(&Api::all(seed.clone()), &role, name).await;
        create(&Api::all(seed.clone()), &binding, name).await;
    }
    let role = Role {
        metadata: meta(),
        rules: Some(namespace_rules),
    };
    let binding = RoleBinding {
        metadata: meta(),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject]),
    };
    create(&Api::namespaced(seed.clone(), ns), &role, name).await;
    create(&Api::namespaced(seed.clone(), ns), &binding, name).await;
}

async fn create<K>(api: &Api<K>, object: &K, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
}
