//! The installer's identity and the smallest set of permissions it works with.
//!
//! - Nodes: the installer reads its own Node (labels decide which shims apply) and sets the
//!   readiness labels on it. RBAC cannot name "the caller's own node" or "only these labels",
//!   so the grant is `get/list/watch/patch` on nodes and a ValidatingAdmissionPolicy narrows
//!   writes to the caller's own Node (the node name bound into its service-account token) and
//!   to labels and annotations under `containerd-shim.extensions.gardener.cloud/`.
//! - Leases in its own namespace: the cluster-wide containerd restart budget. Creating cannot
//!   be limited by name; reading and updating is limited to the budget's slot names.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;

use crate::desired_shims::READY_LABEL_PREFIX;

use super::names::{self, CLUSTER_ROLE, INSTALLER, NAMESPACE, NODE_POLICY};

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
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

/// CEL: the entries of `field` (labels or annotations) outside our prefix are the same before
/// and after the write.
fn foreign_entries_unchanged(field: &str) -> String {
    let prefix = READY_LABEL_PREFIX;
    format!(
        "(has(oldObject.metadata.{field}) ? oldObject.metadata.{field}.filter(k, !k.startsWith('{prefix}')).all(k, has(object.metadata.{field}) && k in object.metadata.{field} && object.metadata.{field}[k] == oldObject.metadata.{field}[k]) : true) && \
         (has(object.metadata.{field}) ? object.metadata.{field}.filter(k, !k.startsWith('{prefix}')).all(k, has(oldObject.metadata.{field}) && k in oldObject.metadata.{field}) : true)"
    )
}

fn validation(expression: String, message: &str) -> Validation {
    Validation {
        expression,
        message: Some(message.to_string()),
        message_expression: None,
        reason: Some("Forbidden".to_string()),
    }
}

pub fn node_policy() -> ValidatingAdmissionPolicy {
    let user = format!("system:serviceaccount:{NAMESPACE}:{INSTALLER}");
    ValidatingAdmissionPolicy {
        metadata: meta(NODE_POLICY, None),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec![String::new()]),
                    api_versions: Some(vec!["v1".to_string()]),
                    operations: Some(vec!["UPDATE".to_string()]),
                    resources: Some(vec!["nodes".to_string()]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "installer".to_string(),
                expression: format!("request.userInfo.username == '{user}'"),
            }]),
            validations: Some(vec![
                validation(
                    "'authentication.kubernetes.io/node-name' in request.userInfo.extra && \
                     request.userInfo.extra['authentication.kubernetes.io/node-name'].exists(n, n == object.metadata.name)"
                        .to_string(),
                    "the containerd-shim installer may only change the Node it runs on",
                ),
                validation(
                    "object.spec == oldObject.spec".to_string(),
                    "the containerd-shim installer may not change a Node's spec",
                ),
                validation(
                    foreign_entries_unchanged("labels"),
                    "the containerd-shim installer may only change labels under containerd-shim.extensions.gardener.cloud/",
                ),
                validation(
                    foreign_entries_unchanged("annotations"),
                    "the containerd-shim installer may only change annotations under containerd-shim.extensions.gardener.cloud/",
                ),
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn node_policy_binding() -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: meta(NODE_POLICY, None),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(NODE_POLICY.to_string()),
            validation_actions: Some(vec!["Deny".to_string()]),
            ..Default::default()
        }),
    }
}
