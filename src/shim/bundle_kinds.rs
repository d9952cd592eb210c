//! The kinds of objects a shoot bundle of this extension can hold: where the uninstall and the
//! restore look for objects that gardener-resource-manager applied from our ManagedResource
//! and then lost track of.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

use crate::gardener::managed_resource::leftovers::TrackedKind;

/// Every kind [`crate::shim::render`] produces, RuntimeClasses first: they are what a dropped
/// shim leaves behind.
pub fn tracked() -> Vec<TrackedKind> {
    vec![
        TrackedKind::of::<RuntimeClass>(),
        TrackedKind::of::<DaemonSet>(),
        TrackedKind::of::<ConfigMap>(),
        TrackedKind::of::<ServiceAccount>(),
        TrackedKind::of::<Role>(),
        TrackedKind::of::<RoleBinding>(),
        TrackedKind::of::<ClusterRole>(),
        TrackedKind::of::<ClusterRoleBinding>(),
        TrackedKind::of::<ValidatingAdmissionPolicy>(),
        TrackedKind::of::<ValidatingAdmissionPolicyBinding>(),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::shim::config::{self, images, test_support};
    use crate::shim::render::{self, BundleInput};

    #[test]
    fn every_kind_the_bundle_can_hold_is_tracked() {
        let shoot = test_support::single_pool_shoot();
        let provider_config = test_support::config(serde_json::json!([{"name": "wasmtime"}]));
        let validated = config::load(Some(&provider_config), &test_support::catalog(), &shoot)
            .expect("a valid configuration");
        let images = images::embedded().expect("images");
        let input = BundleInput::install(&validated, &images, "installer", &shoot)
            .expect("the desired shims");
        let rendered: BTreeSet<(String, String)> = render::render(&input)
            .into_manifests()
            .expect("manifests")
            .iter()
            .map(|m| {
                let object = m.value();
                let field = |name: &str| object[name].as_str().unwrap_or_default().to_string();
                (field("apiVersion"), field("kind"))
            })
            .collect();
        let tracked: BTreeSet<(String, String)> = tracked()
            .into_iter()
            .map(|k| (k.resource.api_version, k.resource.kind))
            .collect();
        assert_eq!(rendered, tracked);
    }
}
