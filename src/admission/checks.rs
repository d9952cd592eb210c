//! Every check of one Shoot: each `containerd-shim` entry's providerConfig through the
//! controller's own decode and validation (which resolves `workerPools` against the Shoot's
//! pools, their CRI and architectures), then the runtime collisions only the garden can see.
//! Pure: the Shoot and the catalog in, the problems out, each with its path in the Shoot.

use super::field_paths::in_shoot;
use super::runtime_collisions::collisions;
use super::shoot_view::ShootView;
use crate::shim::config::error::FieldError;
use crate::shim::config::{self, Catalog, decode};

/// Every problem of the Shoot's `containerd-shim` entries, in the order of `spec.extensions`.
pub fn check(view: &ShootView, catalog: &Catalog) -> Vec<FieldError> {
    let mut errors: Vec<FieldError> = Vec::new();
    for (index, extension) in view.ours() {
        // Exactly what the controller runs on the Extension gardenlet makes of this entry.
        let found = match config::load_spec(&extension.spec, catalog, &view.shoot) {
            Err(invalid) => invalid.errors,
            Ok(validated) => match decode::decode(extension.spec.provider_config.as_ref()) {
                Ok(decoded) => collisions(&decoded, &validated, &view.pools),
                Err(invalid) => invalid.errors,
            },
        };
        for error in found {
            let error = in_shoot(index, error);
            // A Shoot field (the Kubernetes version) is reported once, not once per entry.
            if !errors.contains(&error) {
                errors.push(error);
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn catalog() -> Catalog {
        Catalog::builtin().unwrap()
    }

    /// A Shoot with pools `amd` (amd64, containerd by default), `arm` (arm64) and `sandboxed`
    /// (amd64, with gVisor from the runtime extension), and these extensions.
    fn shoot(extensions: Value) -> ShootView {
        let shoot = json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p"},
            "spec": {
                "extensions": extensions,
                "kubernetes": {"version": "1.33.2"},
                "provider": {"type": "local", "workers": [
                    {"name": "amd", "machine": {"type": "m", "architecture": "amd64"}},
                    {"name": "arm", "machine": {"type": "m", "architecture": "arm64"},
                     "cri": {"name": "containerd"}},
                    {"name": "sandboxed", "machine": {"type": "m"},
                     "cri": {"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]}}
                ]}
            }
        });
        ShootView::from_json(&shoot.to_string()).unwrap()
    }

    fn ours(shims: Value) -> Value {
        json!({"type": "containerd-shim", "providerConfig": {
            "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
            "kind": "ContainerdShimConfig",
            "shims": shims}})
    }

    fn messages(view: &ShootView) -> Vec<String> {
        check(view, &catalog())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_valid_shoot_and_a_shoot_without_us_pass() {
        let other = json!({"type": "registry-cache", "providerConfig": {"whatever": 1}});
        let valid = ours(json!([{"name": "crun", "workerPools": ["amd", "arm"]}]));
        assert_eq!(
            messages(&shoot(json!([other, valid]))),
            Vec::<String>::new()
        );
        assert_eq!(messages(&shoot(json!([other]))), Vec::<String>::new());
    }

    #[test]
    fn provider_config_errors_carry_the_shoot_path_and_value() {
        let other = json!({"type": "other"});
        let typo = ours(json!([{"name": "crunn", "workerPools": ["amd"]}]));
        let errors = messages(&shoot(json!([other, typo])));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.extensions[1].providerConfig.shims[0]"),
            "{errors:?}"
        );
        assert!(errors[0].contains("\"crunn\""), "{errors:?}");
    }

    #[test]
    fn undecodable_provider_config_is_refused_at_the_entry() {
        let unknown_field = json!({"type": "containerd-shim", "providerConfig": {
            "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
            "kind": "ContainerdShimConfig", "shimz": []}});
        let errors = messages(&shoot(json!([unknown_field])));
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.extensions[0].providerConfig") && e.contains("shimz")),
            "{errors:?}"
        );
    }

    #[test]
    fn a_pool_that_does_not_exist_is_refused() {
        let errors = messages(&shoot(json!([ours(
            json!([{"name": "crun", "workerPools": ["amd", "gpu"]}])
        )])));
        assert_eq!(
            errors,
            [
                "spec.extensions[0].providerConfig.shims[0].workerPools[1]: \"gpu\" is not a worker pool of the Shoot (pools: amd, arm, sandboxed)"
            ]
        );
    }

    #[test]
    fn a_pool_architecture_the_shim_does_not_offer_is_refused() {
        // wasmtime's catalog entry has amd64 binaries only.
        let errors = messages(&shoot(json!([ours(
            json!([{"name": "wasmtime", "workerPools": ["arm"]}])
        )])));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.extensions[0].providerConfig.shims[0]"),
            "{errors:?}"
        );
        assert!(errors[0].contains("arm64"), "{errors:?}");
    }

    #[test]
    fn a_pool_with_another_cri_is_refused() {
        let mut view = shoot(json!([ours(
            json!([{"name": "crun", "workerPools": ["arm"]}])
        )]));
        view.shoot.spec.provider.workers[1].cri = Some(crate::gardener::api::cluster::Cri {
            name: "cri-o".into(),
        });
        assert_eq!(
            messages(&view),
            [
                "spec.extensions[0].providerConfig.shims[0].workerPools[0]: \"arm\" uses CRI \"cri-o\"; shims need containerd"
            ]
        );
    }

    #[test]
    fn a_handler_or_runtime_class_of_another_runtime_extension_is_refused() {
        // The catalog's gVisor takes handler `runsc` and RuntimeClass `gvisor`, both the
        // runtime-gvisor extension's on the pool `sandboxed`.
        let errors = messages(&shoot(json!([ours(
            json!([{"name": "gvisor", "workerPools": ["sandboxed"]}])
        )])));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "spec.extensions[0].providerConfig.shims[0]: \"runsc\" is the default handler"
            ),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("spec.provider.workers[2].cri.containerRuntimes[0].type \"gvisor\""),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with(
                "spec.extensions[0].providerConfig.shims[0]: \"gvisor\" is the default RuntimeClass"
            ),
            "{errors:?}"
        );

        let own_handler = messages(&shoot(json!([ours(json!([{
            "name": "crun", "workerPools": ["amd", "sandboxed"],
            "runtimeClass": {"handler": "gvisor"}
        }]))])));
        assert_eq!(own_handler.len(), 1, "{own_handler:?}");
        assert!(
            own_handler[0].starts_with(
                "spec.extensions[0].providerConfig.shims[0].runtimeClass.handler: \"gvisor\" collides"
            ),
            "{own_handler:?}"
        );

        // The same shim on pools without that runtime is fine.
        assert_eq!(
            messages(&shoot(json!([ours(
                json!([{"name": "gvisor", "workerPools": ["amd"]}])
            )]))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_disabled_entry_is_not_checked_and_shoot_fields_are_reported_once() {
        let mut disabled = ours(json!([{"name": "nope"}]));
        disabled["disabled"] = json!(true);
        assert_eq!(messages(&shoot(json!([disabled]))), Vec::<String>::new());

        let mut view = shoot(json!([ours(json!([{"name": "crun"}]))]));
        view.shoot.spec.kubernetes.version = "1.28.3".into();
        let errors = messages(&view);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.kubernetes.version: \"1.28.3\""),
            "{errors:?}"
        );
    }
}
