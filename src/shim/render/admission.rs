//! The admission policies that narrow the installer's RBAC grants to its job.
//!
//! - Nodes: RBAC grants `patch` on every Node; the policy lets the installer change only the
//!   Node it runs on (the node name the API server binds into its token), only labels and
//!   annotations under `containerd-shim.extensions.gardener.cloud/`, and nothing of the spec
//!   (taints, unschedulable), the owner references or the finalizers.
//! - Leases: RBAC cannot limit `create` by name; the policy limits it to the restart-budget
//!   slots.
//!
//! Both are written once, as `admissionregistration.k8s.io/v1`, and delivered in the version
//! the Shoot serves ([`PolicyApi`]); the two versions share one schema.

use k8s_openapi::api::admissionregistration::{v1, v1beta1};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::names::{INSTALLER, LEASE_POLICY, NAMESPACE, NODE_POLICY, restart_lease};
use super::rbac::meta;
use crate::desired_shims::READY_LABEL_PREFIX;
use crate::gardener::managed_resource::{Error, Manifest};
use crate::shim::config::admission::PolicyApi;

/// The policies and their bindings, in the API version the Shoot serves.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionPolicies {
    pub api: PolicyApi,
    pub policies: Vec<(
        v1::ValidatingAdmissionPolicy,
        v1::ValidatingAdmissionPolicyBinding,
    )>,
}

/// `slots` = the restart budget's Lease slots.
pub fn policies(api: PolicyApi, slots: u32) -> AdmissionPolicies {
    AdmissionPolicies {
        api,
        policies: vec![
            (node_policy(), binding(NODE_POLICY)),
            (lease_policy(slots), binding(LEASE_POLICY)),
        ],
    }
}

impl AdmissionPolicies {
    pub fn manifests(&self) -> Result<Vec<Manifest>, Error> {
        let mut out = Vec::new();
        for (policy, binding) in &self.policies {
            match self.api {
                PolicyApi::V1 => {
                    out.push(Manifest::from_resource(policy)?);
                    out.push(Manifest::from_resource(binding)?);
                }
                PolicyApi::V1Beta1 => {
                    let policy: v1beta1::ValidatingAdmissionPolicy = same_schema(policy)?;
                    let binding: v1beta1::ValidatingAdmissionPolicyBinding = same_schema(binding)?;
                    out.push(Manifest::from_resource(&policy)?);
                    out.push(Manifest::from_resource(&binding)?);
                }
            }
        }
        Ok(out)
    }
}

/// The same object in another version of its API group whose schema is identical.
fn same_schema<From, To>(object: &From) -> Result<To, Error>
where
    From: Serialize + kube::Resource<DynamicType = ()>,
    To: DeserializeOwned + kube::Resource<DynamicType = ()>,
{
    let to_json = |source| Error::ToJson {
        kind: From::kind(&()).into_owned(),
        name: object.meta().name.clone().unwrap_or_default(),
        source,
    };
    let mut value = serde_json::to_value(object).map_err(to_json)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), To::api_version(&()).into());
    }
    serde_json::from_value(value).map_err(to_json)
}

/// Matches writes by the installer's ServiceAccount only.
fn by_installer() -> Vec<v1::MatchCondition> {
    vec![v1::MatchCondition {
        name: "installer".to_string(),
        expression: format!(
            "request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{INSTALLER}'"
        ),
    }]
}

fn matching(group: &str, resource: &str, operations: &[&str]) -> v1::MatchResources {
    v1::MatchResources {
        resource_rules: Some(vec![v1::NamedRuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec!["v1".to_string()]),
            operations: Some(operations.iter().map(|o| o.to_string()).collect()),
            resources: Some(vec![resource.to_string()]),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn validation(expression: String, message: &str) -> v1::Validation {
    v1::Validation {
        expression,
        message: Some(message.to_string()),
        message_expression: None,
        reason: Some("Forbidden".to_string()),
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

/// CEL: an optional list field of the metadata is the same before and after the write.
fn list_unchanged(field: &str) -> String {
    format!(
        "has(object.metadata.{field}) == has(oldObject.metadata.{field}) && \
         (!has(object.metadata.{field}) || object.metadata.{field} == oldObject.metadata.{field})"
    )
}

fn node_policy() -> v1::ValidatingAdmissionPolicy {
    v1::ValidatingAdmissionPolicy {
        metadata: meta(NODE_POLICY, None),
        spec: Some(v1::ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(matching("", "nodes", &["UPDATE"])),
            match_conditions: Some(by_installer()),
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
                validation(
                    list_unchanged("ownerReferences"),
                    "the containerd-shim installer may not change a Node's owner references",
                ),
                validation(
                    list_unchanged("finalizers"),
                    "the containerd-shim installer may not change a Node's finalizers",
                ),
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

fn lease_policy(slots: u32) -> v1::ValidatingAdmissionPolicy {
    let names: Vec<String> = (0..slots.max(1))
        .map(|slot| format!("'{}'", restart_lease(slot)))
        .collect();
    v1::ValidatingAdmissionPolicy {
        metadata: meta(LEASE_POLICY, None),
        spec: Some(v1::ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(matching("coordination.k8s.io", "leases", &["CREATE"])),
            match_conditions: Some(by_installer()),
            validations: Some(vec![validation(
                // The Role already confines the installer to its namespace.
                format!("object.metadata.name in [{}]", names.join(", ")),
                "the containerd-shim installer may only create its restart-budget Leases",
            )]),
            ..Default::default()
        }),
        status: None,
    }
}

fn binding(policy: &str) -> v1::ValidatingAdmissionPolicyBinding {
    v1::ValidatingAdmissionPolicyBinding {
        metadata: meta(policy, None),
        spec: Some(v1::ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(policy.to_string()),
            validation_actions: Some(vec!["Deny".to_string()]),
            ..Default::default()
        }),
    }
}
