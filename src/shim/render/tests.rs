//! Golden files for the rendered bundle (a rendering change is a reviewable diff; refresh with
//! `UPDATE_GOLDEN=1 cargo test --lib`) and properties of rendering.

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::desired_shims::{CONFIG_MAP_KEY, DESIRED_SHA256_ENV};
use crate::gardener::api::Shoot;
use crate::gardener::api::cluster::KubeApiServer;
use crate::shim::config::{self, Catalog, images};

fn shoot(pools: &[(&str, Option<&str>)]) -> Shoot {
    let workers: Vec<serde_json::Value> = pools
        .iter()
        .map(|(name, cri)| {
            let mut w = json!({"name": name, "machine": {"type": "m", "architecture": "amd64"}});
            if let Some(cri) = cri {
                w["cri"] = json!({"name": cri});
            }
            w
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "s", "namespace": "garden-p"},
        "spec": {"kubernetes": {"version": "1.33.4"}, "provider": {"type": "local", "workers": workers}}
    }))
    .unwrap()
}

fn install_input(mut provider_config: serde_json::Value, shoot: &Shoot) -> BundleInput {
    provider_config["apiVersion"] = json!("containerd-shim.extensions.gardener.cloud/v1alpha1");
    provider_config["kind"] = json!("ContainerdShimConfig");
    let catalog = Catalog::builtin().unwrap();
    let validated = config::load(Some(&provider_config), &catalog, shoot).unwrap();
    let vector = images::embedded().unwrap();
    BundleInput::install(
        &validated,
        &vector,
        "registry.example/containerd-shim-installer:v0.1.0",
        shoot,
    )
    .unwrap()
}

fn to_yaml(bundle: Bundle) -> String {
    bundle
        .into_manifests()
        .unwrap()
        .iter()
        .map(|m| serde_saphyr::to_string(m.value()).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test/golden/bundle")
        .join(format!("{name}.yaml"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `UPDATE_GOLDEN=1 cargo test --lib` to create it",
            path.display()
        )
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (e, a))| e != a)
            .take(10)
            .map(|(i, (e, a))| format!("line {}:\n  golden: {e}\n  actual: {a}", i + 1))
            .collect();
        panic!(
            "{} is stale ({} vs {} lines); first differences:\n{}\nrun `UPDATE_GOLDEN=1 cargo test --lib` and review the diff",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn golden_spin_on_one_pool() {
    let shoot = shoot(&[("worker-a", None)]);
    let input = install_input(
        json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1", "kind": "ContainerdShimConfig",
               "shims": [{"name": "spin"}]}),
        &shoot,
    );
    golden("spin", &to_yaml(render(&input)));
}

/// Delivered by gardener-node-agent: the installer pods only verify and label, so they stage
/// no payload.
#[test]
fn golden_crun_delivered_through_the_osc() {
    let shoot = shoot(&[("worker-a", None)]);
    let input = install_input(
        json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1", "kind": "ContainerdShimConfig",
               "delivery": "osc", "shims": [{"name": "crun"}]}),
        &shoot,
    );
    let yaml = to_yaml(render(&input));
    assert!(!yaml.contains("- stage"), "no payload is staged");
    assert!(yaml.contains("Osc"), "the desired set says who delivers");
    golden("crun-osc", &yaml);
}

#[test]
fn golden_three_shims_two_pools() {
    let shoot = shoot(&[
        ("worker-a", Some("containerd")),
        ("worker-b", None),
        ("other-cri", Some("cri-o")),
    ]);
    let input = install_input(
        json!({
            "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1", "kind": "ContainerdShimConfig",
            "shims": [
                {"name": "gvisor", "workerPools": ["worker-b"]},
                {"name": "spin", "runtimeClass": {"overhead": {"podFixed": {"cpu": "50m", "memory": "32Mi"}},
                  "tolerations": [{"key": "wasm", "operator": "Exists", "effect": "NoSchedule"}]},
                 "nodeSelector": {"example.com/wasm": "true"}},
                {"name": "hello", "custom": {"runtimeType": "io.containerd.hello.v1", "version": "v1.0.0",
                  "binaries": [{"name": "containerd-shim-hello-v1", "url": {"amd64": {
                     "url": "https://example.com/containerd-shim-hello-v1", "sha256": "a".repeat(64)}}}]}}
            ],
            "rollout": {"maxConcurrentRestarts": 2, "maxUnavailable": "25%"}
        }),
        &shoot,
    );
    golden("three-shims", &to_yaml(render(&input)));
}

#[test]
fn golden_uninstall() {
    let shoot = shoot(&[("worker-a", None)]);
    let input = BundleInput::uninstall(
        &config::ValidatedRollout::SAFE_DEFAULT,
        "registry.example/containerd-shim-installer:v0.1.0",
        &shoot,
    );
    let bundle = render(&input);
    assert!(bundle.runtime_classes.is_empty());
    golden("uninstall", &to_yaml(bundle));
}

/// The apiVersions of the admission policies and bindings in the bundle for `shoot`.
fn policy_api_versions(shoot: &Shoot) -> Vec<String> {
    let input = install_input(json!({"shims": [{"name": "spin"}]}), shoot);
    render(&input)
        .into_manifests()
        .unwrap()
        .iter()
        .map(|m| m.value())
        .filter(|v| {
            v["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .map(|v| v["apiVersion"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn admission_policies_are_delivered_in_the_version_the_shoot_serves() {
    let current = shoot(&[("worker-a", None)]);
    assert_eq!(
        policy_api_versions(&current),
        vec!["admissionregistration.k8s.io/v1"; 4]
    );

    let mut beta: Shoot = current.clone();
    beta.spec.kubernetes.version = "1.29.8".into();
    beta.spec.kubernetes.kube_api_server = Some(KubeApiServer {
        feature_gates: [
            ("ValidatingAdmissionPolicy".to_string(), true),
            ("ServiceAccountTokenPodNodeInfo".to_string(), true),
        ]
        .into(),
        runtime_config: [("admissionregistration.k8s.io/v1beta1".to_string(), true)].into(),
    });
    assert_eq!(
        policy_api_versions(&beta),
        vec!["admissionregistration.k8s.io/v1beta1"; 4]
    );
}

#[test]
fn every_namespaced_object_has_a_namespace_and_every_object_our_labels() {
    let shoot = shoot(&[("worker-a", None)]);
    let input = install_input(
        json!({"shims": [{"name": "spin"}, {"name": "gvisor"}]}),
        &shoot,
    );
    for m in render(&input).into_manifests().unwrap() {
        let m = m.value();
        let kind = m["kind"].as_str().unwrap();
        let cluster_scoped = [
            "ClusterRole",
            "ClusterRoleBinding",
            "RuntimeClass",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ];
        if !cluster_scoped.contains(&kind) {
            assert_eq!(m["metadata"]["namespace"], "kube-system", "{kind}");
        }
        assert_eq!(
            m["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "gardener-extension-containerd-shim",
            "{kind}"
        );
    }
}

#[test]
fn the_pod_template_changes_exactly_when_the_desired_set_changes() {
    let shoot = shoot(&[("worker-a", None)]);
    let a = render(&install_input(json!({"shims": [{"name": "spin"}]}), &shoot));
    let b = render(&install_input(json!({"shims": [{"name": "spin"}]}), &shoot));
    let c = render(&install_input(
        json!({"shims": [{"name": "spin", "options": {"SystemdCgroup": false}}]}),
        &shoot,
    ));
    let hash = |b: &Bundle| {
        b.daemon_sets[0]
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
    };
    assert_eq!(hash(&a), hash(&b));
    assert_ne!(hash(&a), hash(&c));

    // Each desired set is an immutable ConfigMap of its own, named by its content, that only
    // its pod template mounts (and declares, for gardener-resource-manager's garbage collector),
    // and whose digest the installer container is told.
    for bundle in [&a, &c] {
        let config_map = &bundle.config_maps[0];
        let name = config_map.metadata.name.clone().unwrap();
        assert_eq!(config_map.immutable, Some(true));
        let template = bundle.daemon_sets[0]
            .spec
            .as_ref()
            .unwrap()
            .template
            .clone();
        let spec = template.spec.unwrap();
        let mounted = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "desired")
            .unwrap();
        assert_eq!(mounted.config_map.unwrap().name, name);
        let annotations = template.metadata.unwrap().annotations.unwrap();
        let (key, value) = names::reference_annotation(&name);
        assert_eq!(annotations.get(&key), Some(&value));
        let env = spec.containers[0].env.clone().unwrap();
        let digest = env.iter().find(|e| e.name == DESIRED_SHA256_ENV).unwrap();
        let json = config_map.data.as_ref().unwrap()[CONFIG_MAP_KEY].clone();
        assert_eq!(
            digest.value.as_deref(),
            Some(daemonset::desired_hash(&json).as_str())
        );
    }
    assert_ne!(
        a.config_maps[0].metadata.name,
        c.config_maps[0].metadata.name
    );
    // The reference annotation is gardener-resource-manager's: configmap-<sha256(name)[..8]>.
    assert_eq!(
        names::reference_annotation("abc").0,
        "reference.resources.gardener.cloud/configmap-ba7816bf"
    );
}

/// Each worker pool gets an installer DaemonSet of its own that pulls only the payload images
/// of the shims selected on that pool; pools with the same shims share one desired set.
#[test]
fn each_pool_gets_a_daemon_set_with_only_its_shims() {
    let shoot = shoot(&[("worker-a", None), ("wasm", None), ("plain", None)]);
    let bundle = render(&install_input(
        json!({"shims": [{"name": "spin", "workerPools": ["worker-a", "wasm"]},
                         {"name": "wasmtime", "workerPools": ["wasm"]}]}),
        &shoot,
    ));
    let pools: Vec<(String, Vec<String>)> = bundle
        .daemon_sets
        .iter()
        .map(|ds| {
            let spec = ds.spec.as_ref().unwrap();
            let pod = spec.template.spec.as_ref().unwrap();
            let images: Vec<String> = pod
                .init_containers
                .as_ref()
                .unwrap()
                .iter()
                .filter(|c| c.name.starts_with("stage-"))
                .map(|c| c.name.clone())
                .collect();
            let pool = spec.selector.match_labels.as_ref().unwrap()[names::POOL_LABEL].clone();
            assert_eq!(
                ds.metadata.name.as_deref(),
                Some(names::daemon_set(&pool).as_str())
            );
            (pool, images)
        })
        .collect();
    assert_eq!(
        pools,
        [
            ("plain".to_string(), vec![]),
            (
                "wasm".to_string(),
                vec!["stage-0-spin".to_string(), "stage-1-wasmtime".to_string()]
            ),
            ("worker-a".to_string(), vec!["stage-0-spin".to_string()]),
        ]
    );
    // Three pools, three different sets (one of them empty: the installer there cleans up).
    assert_eq!(bundle.config_maps.len(), 3);
}

proptest! {
    #[test]
    fn rendering_is_deterministic_and_independent_of_input_order(
        picks in proptest::sample::subsequence(vec!["spin", "crun", "wasmtime", "gvisor"], 1..5),
        rotate in 0usize..6,
    ) {
        let shoot = shoot(&[("worker-a", None)]);
        let shims: Vec<serde_json::Value> = picks.iter().map(|n| json!({"name": n})).collect();
        let mut rotated = shims.clone();
        let len = rotated.len();
        rotated.rotate_left(rotate % len);
        let a = to_yaml(render(&install_input(json!({"shims": shims}), &shoot)));
        let b = to_yaml(render(&install_input(json!({"shims": shims}), &shoot)));
        let c = to_yaml(render(&install_input(json!({"shims": rotated}), &shoot)));
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(&a, &c);
    }
}
