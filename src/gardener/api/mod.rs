//! Typed views of the Gardener resources an extension reads and writes.
//!
//! The CRDs are Gardener's (installed from the gardener module, never generated from these
//! types), so every struct here is a client-side view: fields we do not use are not modelled
//! and are ignored on read. We never write whole objects back; writes are patches of the
//! fields we own.

pub mod cluster;
pub mod common;
pub mod extension;
pub mod managed_resource;
pub mod operating_system_config;

pub use cluster::{Cluster, ClusterSpec, Shoot, WorkerPool};
pub use common::{
    Condition, ConditionStatus, ErrorCode, LastError, LastOperation, OperationState, OperationType,
};
pub use extension::{Extension, ExtensionSpec, ExtensionStatus};
pub use managed_resource::{ManagedResource, ManagedResourceSpec, ManagedResourceStatus};
pub use operating_system_config::{OperatingSystemConfig, OperatingSystemConfigSpec};

/// Decodes one of these types from YAML. It goes through a JSON value: `providerConfig` and the
/// Cluster's embedded objects are held as raw JSON, which only serde_json's own deserializers
/// produce; a YAML deserializer fails on them with "invalid type: newtype struct".
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    use crate::gardener::decode::{PathStyle, value_typed, yaml_value};
    let value = yaml_value(text, &PathStyle::MANIFEST).map_err(|p| p.to_string())?;
    value_typed(&value, &PathStyle::MANIFEST).map_err(|p| p.to_string())
}

/// Annotation that asks an extension to act (`reconcile`, `migrate`, `restore`, `wait-for-state`).
pub const OPERATION_ANNOTATION: &str = "gardener.cloud/operation";
/// Freshness marker gardenlet writes with each request; never removed by extensions.
pub const TIMESTAMP_ANNOTATION: &str = "gardener.cloud/timestamp";
/// Operation annotation values.
pub mod operation {
    pub const RECONCILE: &str = "reconcile";
    pub const MIGRATE: &str = "migrate";
    pub const RESTORE: &str = "restore";
    pub const WAIT_FOR_STATE: &str = "wait-for-state";
}
/// Namespace label that marks a shoot's control-plane namespace in the seed.
pub const SHOOT_ROLE_LABEL: &str = "gardener.cloud/role";
/// Value of [`SHOOT_ROLE_LABEL`] on shoot namespaces.
pub const SHOOT_ROLE_VALUE: &str = "shoot";
/// Shoot annotation that confirms a forced deletion.
pub const FORCE_DELETION_ANNOTATION: &str = "confirmation.gardener.cloud/force-deletion";
/// Annotation gardenlet sets before deleting extension resources.
pub const DELETION_CONFIRMATION_ANNOTATION: &str = "confirmation.gardener.cloud/deletion";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_extensions_and_clusters_decode_with_their_raw_json_fields() {
        let ext: Extension = from_yaml(
            "apiVersion: extensions.gardener.cloud/v1alpha1\n\
             kind: Extension\n\
             metadata: {name: containerd-shim, namespace: shoot--a--b}\n\
             spec:\n  type: containerd-shim\n  providerConfig:\n    shims: [{name: spin}]\n",
        )
        .expect("Extension decodes");
        assert_eq!(
            ext.spec.provider_config,
            Some(json!({"shims": [{"name": "spin"}]}))
        );
        assert_eq!(ext.spec.provider_config_error, None);

        let cluster: Cluster = from_yaml(
            "apiVersion: extensions.gardener.cloud/v1alpha1\n\
             kind: Cluster\n\
             metadata: {name: shoot--a--b}\n\
             spec:\n  cloudProfile: {}\n  seed: {}\n  shoot:\n    spec:\n      kubernetes: {version: 1.33.1}\n",
        )
        .expect("Cluster decodes");
        assert_eq!(
            cluster.spec.shoot["spec"]["kubernetes"]["version"],
            json!("1.33.1")
        );
    }

    #[test]
    fn decode_errors_name_the_field_the_value_and_what_is_allowed() {
        let err =
            from_yaml::<Extension>("kind: Extension\nmetadata: {name: x}\nspec: {class: shoot}\n")
                .expect_err("spec.type is required");
        assert_eq!(err, "spec.type: is required but missing");
        let err = from_yaml::<Extension>(
            "kind: Extension\nmetadata: {name: x, namespace: [a]}\nspec: {type: t}\n",
        )
        .expect_err("a namespace is a string");
        assert_eq!(err, "metadata.namespace: expected a string, got a list");
        let err = from_yaml::<Extension>("kind: Extension\nspec:\n  type: a\n  type: b\n")
            .expect_err("a key twice");
        assert_eq!(err, "spec: key \"type\" appears twice (again at line 4)");
    }
}
