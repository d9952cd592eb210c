//! Good providerConfigs: defaults, catalog facts, overrides and the desired set they become.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::desired::{DesiredError, desired_shims};
use super::test_support::{catalog, config, sha, shoot, single_pool_shoot};
use super::validate::{ShimOrigin, ValidatedConfig, ValidatedSource};
use super::{images, load};
use crate::desired_shims::{Arch, BinarySource, Mode, OptionValue, UrlArtifact};
use crate::gardener::error_codes::CodedError;
use crate::gardener::imagevector::ImageVector;

fn valid(provider_config: serde_json::Value) -> ValidatedConfig {
    load(Some(&provider_config), &catalog(), &shoot()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn absent_config_installs_nothing() {
    let validated = load(None, &catalog(), &shoot()).unwrap();
    assert!(validated.shims.is_empty());
    let set = desired_shims(&validated, &images::embedded().unwrap()).unwrap();
    assert_eq!(set.mode, Mode::Install);
    assert!(set.shims.is_empty());
    assert_eq!(set.rollout.max_concurrent_restarts, 1);
}

#[test]
fn a_bare_catalog_name_gets_every_default() {
    let validated = valid(config(json!([{"name": "spin"}])));
    let spin = validated.shim("spin").unwrap();
    assert_eq!(
        spin.origin,
        ShimOrigin::Catalog {
            entry: "spin".into()
        }
    );
    assert_eq!(spin.handler, "spin");
    assert_eq!(spin.runtime_class_name, "wasmtime-spin-v2");
    assert_eq!(spin.runtime_type, "io.containerd.spin.v2");
    assert_eq!(spin.version, "v0.24.0");
    assert_eq!(spin.options["SystemdCgroup"], OptionValue::Bool(true));
    assert_eq!(
        spin.worker_pools,
        ["worker-a", "worker-b"],
        "legacy runs another CRI"
    );
    assert_eq!(
        spin.architectures.iter().copied().collect::<Vec<_>>(),
        [Arch::Amd64, Arch::Arm64]
    );
    assert_eq!(
        spin.binaries[0].source,
        ValidatedSource::CatalogImage {
            image_name: "containerd-shim-spin".into(),
            path: "/assets/containerd-shim-spin-v2".into()
        }
    );
    assert!(spin.overhead.is_empty());
    assert_eq!(validated.rollout.max_concurrent_restarts, 1);
    assert_eq!(validated.rollout.max_unavailable, IntOrString::Int(1));
    assert_eq!(validated.kubernetes_version.as_deref(), Some("1.33.2"));
}

#[test]
fn spin_becomes_a_desired_shim_with_the_image_vector_image() {
    let validated = valid(config(
        json!([{"name": "spin", "options": {"SystemdCgroup": false},
        "nodeSelector": {"example.com/wasm": "true"}}]),
    ));
    let set = desired_shims(&validated, &images::embedded().unwrap()).unwrap();
    let shim = &set.shims[0];
    assert_eq!(shim.name, "spin");
    assert_eq!(shim.handler, "spin");
    assert_eq!(shim.runtime_type, "io.containerd.spin.v2");
    assert_eq!(shim.options["SystemdCgroup"], OptionValue::Bool(false));
    assert_eq!(shim.worker_pools, ["worker-a", "worker-b"]);
    assert_eq!(
        shim.node_selector,
        BTreeMap::from([("example.com/wasm".to_owned(), "true".to_owned())])
    );
    assert_eq!(shim.binaries[0].name, "containerd-shim-spin-v2");
    assert_eq!(
        shim.binaries[0].source,
        BinarySource::Image {
            image: "ghcr.io/spinframework/containerd-shim-spin/node-installer:v0.24.0".into(),
            path: "/assets/containerd-shim-spin-v2".into(),
            sha256: BTreeMap::new(),
        }
    );
    let json = set.to_json();
    assert!(json.contains("\"workerPools\""), "{json}");
    assert_eq!(
        crate::desired_shims::DesiredShims::from_json(&json).unwrap(),
        set
    );
}

#[test]
fn gvisor_carries_both_binaries_its_options_and_runsc_toml() {
    let validated = valid(config(json!([{"name": "gvisor"}])));
    let set = desired_shims(&validated, &images::embedded().unwrap()).unwrap();
    let shim = &set.shims[0];
    assert_eq!(shim.handler, "runsc");
    assert_eq!(validated.shims[0].runtime_class_name, "gvisor");
    let names: Vec<_> = shim.binaries.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["containerd-shim-runsc-v1", "runsc"]);
    assert_eq!(
        shim.options,
        BTreeMap::from([
            (
                "ConfigPath".to_owned(),
                OptionValue::String("{{configDir}}/runsc.toml".into())
            ),
            (
                "TypeUrl".to_owned(),
                OptionValue::String("io.containerd.runsc.v1.options".into())
            ),
        ])
    );
    assert_eq!(shim.config_files[0].name, "runsc.toml");
    assert!(shim.config_files[0].content.contains("{{binDir}}/runsc"));
}

#[test]
fn kata_is_privileged_without_host_devices_and_suggests_overhead() {
    // Kata is an operator's overlay entry (example/kata/shim-catalog-overlay.yaml), not a built-in one.
    let catalog = catalog()
        .with_overlay_yaml("kata", crate::shim::config::catalog::KATA_OVERLAY)
        .unwrap();
    let provider_config = config(json!([{"name": "kata-qemu"}]));
    let validated = load(Some(&provider_config), &catalog, &single_pool_shoot()).unwrap();
    let kata = &validated.shims[0];
    assert!(kata.privileged_without_host_devices);
    assert_eq!(kata.handler, "kata-qemu");
    assert_eq!(kata.runtime_type, "io.containerd.kata-qemu.v2");
    assert_eq!(kata.binaries[0].name, "containerd-shim-kata-v2");
    assert!(
        kata.pod_annotations.is_empty(),
        "{:?}",
        kata.pod_annotations
    );
    assert!(
        kata.config_files[0]
            .content
            .contains("enable_annotations = []"),
        "Kata must honour no hypervisor annotation"
    );
    assert_eq!(
        kata.overhead,
        BTreeMap::from([
            ("cpu".to_owned(), Quantity("250m".into())),
            ("memory".to_owned(), Quantity("160Mi".into())),
        ])
    );

    let provider_config = config(json!([{"name": "kata-qemu", "podAnnotations": [],
        "runtimeClass": {"overhead": {"podFixed": {"memory": "300Mi"}}}}]));
    let validated = load(Some(&provider_config), &catalog, &single_pool_shoot()).unwrap();
    let kata = &validated.shims[0];
    assert!(
        kata.pod_annotations.is_empty(),
        "an explicit list replaces the default"
    );
    assert_eq!(
        kata.overhead,
        BTreeMap::from([("memory".to_owned(), Quantity("300Mi".into()))])
    );
}

#[test]
fn custom_shims_default_handler_and_class_to_their_name() {
    let validated = valid(config(json!([{
        "name": "foo",
        "custom": {
            "runtimeType": "io.containerd.foo.v1", "version": "v1.2.3",
            "privilegedWithoutHostDevices": true,
            "binaries": [
                {"name": "containerd-shim-foo-v1", "url": {
                    "amd64": {"url": "https://example.com/amd64", "sha256": sha('a')},
                    "arm64": {"url": "https://example.com/arm64", "sha256": sha('b')}}},
                {"name": "foo-helper", "image": {"ref": "example.com/foo:v1", "path": "/bin/helper",
                                                  "sha256": {"amd64": sha('c')}}}
            ]
        },
        "options": {"Debug": true, "Level": 2, "Path": "{{binDir}}/foo-helper"},
        "runtimeClass": {"tolerations": [{"operator": "Exists"}]}
    }])));
    let foo = &validated.shims[0];
    assert_eq!(foo.origin, ShimOrigin::Custom);
    assert_eq!(foo.handler, "foo");
    assert_eq!(foo.runtime_class_name, "foo");
    assert!(foo.privileged_without_host_devices);
    assert_eq!(foo.options.len(), 3);
    assert_eq!(foo.tolerations[0].operator.as_deref(), Some("Exists"));
    let set = desired_shims(&validated, &ImageVector::default()).unwrap();
    assert_eq!(
        set.shims[0].binaries[0].source,
        BinarySource::Url {
            artifacts: BTreeMap::from([
                (
                    Arch::Amd64,
                    UrlArtifact {
                        url: "https://example.com/amd64".into(),
                        sha256: sha('a')
                    }
                ),
                (
                    Arch::Arm64,
                    UrlArtifact {
                        url: "https://example.com/arm64".into(),
                        sha256: sha('b')
                    }
                ),
            ])
        }
    );
    assert_eq!(
        set.shims[0].binaries[1].source,
        BinarySource::Image {
            image: "example.com/foo:v1".into(),
            path: "/bin/helper".into(),
            sha256: BTreeMap::from([(Arch::Amd64, sha('c'))]),
        }
    );
}

#[test]
fn a_custom_shim_named_runc_needs_another_handler() {
    let shim = json!({"name": "runc", "workerPools": ["worker-a"], "custom": {
        "runtimeType": "io.containerd.runcx.v1", "version": "v1",
        "binaries": [{"name": "containerd-shim-runcx-v1",
                      "image": {"ref": "example.com/x:v1", "path": "/x"}}]}});
    let err = load(Some(&config(json!([shim.clone()]))), &catalog(), &shoot()).unwrap_err();
    assert_eq!(err.errors[0].path, "providerConfig.shims[0].name", "{err}");
    let mut fixed = shim;
    fixed["runtimeClass"] = json!({"handler": "runcx"});
    load(Some(&config(json!([fixed]))), &catalog(), &shoot()).unwrap();
}

#[test]
fn two_versions_of_one_catalog_shim_can_run_side_by_side() {
    let catalog = catalog()
        .with_overlay_yaml(
            "test",
            "shims:\n  spin:\n    versions:\n      v0.21.0: {image: containerd-shim-spin-v0.21.0}\n",
        )
        .unwrap();
    let provider_config = config(json!([
        {"name": "spin"},
        {"name": "spin-old", "catalog": {"name": "spin", "version": "v0.21.0"},
         "runtimeClass": {"name": "spin-old", "handler": "spin-old"}}
    ]));
    let validated = load(Some(&provider_config), &catalog, &shoot()).unwrap();
    assert_eq!(validated.shims[1].version, "v0.21.0");
    let vector = images::embedded().unwrap().merge(
        ImageVector::from_yaml(
            "test",
            "images:\n  - {name: containerd-shim-spin-v0.21.0, repository: example.com/spin, tag: v0.21.0}\n",
        )
        .unwrap(),
    );
    let set = desired_shims(&validated, &vector).unwrap();
    let names: Vec<_> = set.shims.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["spin", "spin-old"]);
}

#[test]
fn shims_are_sorted_by_name_and_rollout_is_carried() {
    let provider_config = json!({
        "apiVersion": super::API_VERSION, "kind": super::KIND,
        // wasmtime on the amd64 pool only: its payload is built for amd64 alone.
        "shims": [{"name": "wasmtime", "workerPools": ["worker-a"]}, {"name": "spin"}],
        "rollout": {"maxConcurrentRestarts": 3, "maxUnavailable": "50%"}
    });
    let validated = valid(provider_config);
    assert_eq!(validated.rollout.max_concurrent_restarts, 3);
    assert_eq!(
        validated.rollout.max_unavailable,
        IntOrString::String("50%".into())
    );
    let set = desired_shims(&validated, &images::embedded().unwrap()).unwrap();
    let names: Vec<_> = set.shims.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["spin", "wasmtime"]);
    assert_eq!(set.rollout.max_concurrent_restarts, 3);
}

#[test]
fn image_vector_problems_are_not_configuration_problems() {
    let validated = valid(config(json!([{"name": "spin"}])));
    let err = desired_shims(&validated, &ImageVector::default()).unwrap_err();
    assert!(matches!(err, DesiredError::Image { .. }), "{err}");
    assert!(err.codes().is_empty());

    let per_arch = ImageVector::from_yaml(
        "test",
        r#"
images:
  - {name: containerd-shim-spin, repository: example.com/spin, tag: amd, architectures: [amd64]}
  - {name: containerd-shim-spin, repository: example.com/spin, tag: arm, architectures: [arm64]}
"#,
    )
    .unwrap();
    let err = desired_shims(&validated, &per_arch).unwrap_err();
    assert!(matches!(err, DesiredError::PerArchImages { .. }), "{err}");
    assert!(
        err.to_string().contains("amd64: example.com/spin:amd"),
        "{err}"
    );
}

#[test]
fn image_vector_override_changes_the_shim_image() {
    let validated = valid(config(json!([{"name": "spin"}])));
    let vector = images::embedded().unwrap().merge(
        ImageVector::from_yaml(
            "test",
            "images:\n  - {name: containerd-shim-spin, ref: \"mirror.example.com/spin@sha256:abc\"}\n",
        )
        .unwrap(),
    );
    let set = desired_shims(&validated, &vector).unwrap();
    let BinarySource::Image { image, .. } = &set.shims[0].binaries[0].source else {
        panic!("not an image source");
    };
    assert_eq!(image, "mirror.example.com/spin@sha256:abc");
}

#[test]
fn delivery_is_the_operators_default_unless_the_config_names_one() {
    use super::types::DeliveryMode;
    use crate::desired_shims::Delivery;
    let images = images::embedded().unwrap();
    let unset = config(json!([{"name": "crun"}]));
    let mut osc_default = catalog();
    osc_default.default_delivery = DeliveryMode::Osc;
    for (catalog, expected) in [
        (catalog(), DeliveryMode::DaemonSet),
        (osc_default.clone(), DeliveryMode::Osc),
    ] {
        let validated = load(Some(&unset), &catalog, &shoot()).unwrap();
        assert_eq!(validated.delivery(), expected);
    }
    let mut named = unset.clone();
    named["delivery"] = json!("daemonset");
    let validated = load(Some(&named), &osc_default, &shoot()).unwrap();
    assert_eq!(validated.delivery(), DeliveryMode::DaemonSet);
    named["delivery"] = json!("osc");
    let validated = load(Some(&named), &catalog(), &shoot()).unwrap();
    let set = desired_shims(&validated, &images).unwrap();
    assert_eq!(set.delivery, Delivery::Osc);
}
