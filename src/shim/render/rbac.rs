//! The installer's identity and the smallest set of permissions it works with.
//!
//! - Nodes: the installer reads its own Node (labels decide which shims apply) and sets the
//!   readiness labels on it. RBAC cannot name "the caller's own node" or "only these labels",
//!   so the grant is `get/list/watch/patch` on nodes and an admission policy
//!   ([`super::admission`]) narrows writes to the caller's own Node and our labels.
//! - Leases in its own namespace: the cluster-wide containerd restart budget. Reading and
//!   updating is limited to the budget's slot names; RBAC cannot limit creating by name, so the
//!   admission policy does.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;

use super::names::{self, CLUSTER_ROLE, INSTALLER, NAMESPACE};

pub(super) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(names::labels("installer")),
        ..Default::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[String]) -> PolicyRule {
    let strings = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        resource_names: (!names.is_empty()).then(|| names.to_vec()),
        non_resource_urls: None,
    }
}

fn installer_subject() -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".to_string(),
        name: INSTALLER.to_string(),
        namespace: Some(NAMESPACE.to_string()),
        api_group: None,
    }]
}

pub fn service_account() -> ServiceAccount {
    ServiceAccount {
        metadata: meta(INSTALLER, Some(NAMESPACE)),
        // Pods mount the token themselves, into the one container that talks to the
        // API server; nothing else that runs as this account should get one implicitly.
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

pub fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: meta(CLUSTER_ROLE, None),
        rules: Some(vec![rule(
            &[""],
            &["nodes"],
            &["get", "list", "watch", "patch"],
            &[],
        )]),
        aggregation_rule: None,
    }
}

pub fn cluster_role_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(CLUSTER_ROLE, None),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "ClusterRole".to_string(),
            name: CLUSTER_ROLE.to_string(),
        },
        subjects: Some(installer_subject()),
    }
}

/// `slots` = how many nodes may restart containerd at the same time.
pub fn role(slots: u32) -> Role {
    let leases: Vec<String> = (0..slots).map(names::restart_lease).collect();
    Role {
        metadata: meta(INSTALLER, Some(NAMESPACE)),
        rules: Some(vec![
            rule(&["coordination.k8s.io"], &["leases"], &["create"], &[]),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["get", "update", "patch"],
                &leases,
            ),
        ]),
    }
}

pub fn role_binding() -> RoleBinding {
    RoleBinding {
        metadata: meta(INSTALLER, Some(NAMESPACE)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: INSTALLER.to_string(),
        },
        subjects: Some(installer_subject()),
    }
}
