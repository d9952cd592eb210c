//! `resources.gardener.cloud/v1alpha1` `ManagedResource`.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// `ManagedResource.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "resources.gardener.cloud",
    version = "v1alpha1",
    kind = "ManagedResource",
    plural = "managedresources",
    namespaced,
    status = "ManagedResourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceSpec {
    /// Unset: the shoot's gardener-resource-manager applies into the shoot. `seed`: the seed's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default)]
    pub secret_refs: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_labels: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_annotations: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_objects: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_persistent_volume_claims: Option<bool>,
}

/// A reference to a Secret in the ManagedResource's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalObjectReference {
    pub name: String,
}

/// `ManagedResource.status`, written by gardener-resource-manager.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_data_checksum: Option<String>,
}

/// Condition types gardener-resource-manager writes on a ManagedResource.
pub mod conditions {
    pub const RESOURCES_APPLIED: &str = "ResourcesApplied";
    pub const RESOURCES_HEALTHY: &str = "ResourcesHealthy";
    pub const RESOURCES_PROGRESSING: &str = "ResourcesProgressing";
}
