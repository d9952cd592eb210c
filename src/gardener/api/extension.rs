//! `extensions.gardener.cloud/v1alpha1` `Extension`.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::{Condition, LastError, LastOperation};

/// `Extension.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "Extension",
    plural = "extensions",
    namespaced,
    status = "ExtensionStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionSpec {
    /// The extension type (`containerd-shim`).
    #[serde(rename = "type")]
    pub type_: String,
    /// `shoot`, `seed` or `garden`; unset means `shoot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The shoot owner's configuration, copied verbatim from `Shoot.spec.extensions[]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<serde_json::Value>,
}

/// `Extension.status` (the `DefaultStatus` of every extension resource).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Opaque state persisted into the ShootState for control-plane migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<serde_json::Value>,
}

/// The class of an extension with the default applied (`GetExtensionClassOrDefault`).
pub const DEFAULT_CLASS: &str = "shoot";

impl Extension {
    /// `spec.class`, with nil meaning `shoot`.
    pub fn class_or_default(&self) -> &str {
        self.spec.class.as_deref().unwrap_or(DEFAULT_CLASS)
    }
}
