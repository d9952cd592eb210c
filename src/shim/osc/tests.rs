//! Golden OSCs (`test/golden/osc/`, rewritten by `UPDATE_GOLDEN=1 cargo test --lib`) and the
//! properties of the mutation: idempotent, foreign entries untouched, same runtime values as
//! the installer writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::desired_shims::{
    Arch, Binary, BinarySource, ConfigFile, DesiredShim, DesiredShims, Mode, OptionValue, Rollout,
    SCHEMA, UrlArtifact,
};
use crate::gardener::api::OperatingSystemConfig;
use crate::gardener::api::operating_system_config::{PluginConfig, PluginOp};

fn image_binary(name: &str, image: &str) -> Binary {
    Binary {
        name: name.into(),
        source: BinarySource::Image {
            image: image.into(),
            path: format!("/{name}"),
            sha256: BTreeMap::new(),
        },
    }
}

fn spin(version: &str) -> DesiredShim {
    DesiredShim {
        name: "spin".into(),
        handler: "spin".into(),
        runtime_type: "io.containerd.spin.v2".into(),
        version: version.into(),
        binaries: vec![image_binary(
            "containerd-shim-spin-v2",
            &format!("registry.example/shims/spin:{version}"),
        )],
        oci_runtime: false,
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        config_files: vec![],
        node_selector: BTreeMap::new(),
        worker_pools: vec![],
    }
}

fn gvisor(version: &str) -> DesiredShim {
    DesiredShim {
        name: "gvisor".into(),
        handler: "runsc".into(),
        runtime_type: "io.containerd.runsc.v1".into(),
        version: version.into(),
        binaries: vec![
            image_binary(
                "containerd-shim-runsc-v1",
                &format!("registry.example/shims/gvisor:{version}"),
            ),
            image_binary("runsc", &format!("registry.example/shims/gvisor:{version}")),
        ],
        oci_runtime: false,
        options: BTreeMap::from([
            (
                "TypeUrl".into(),
                OptionValue::String("io.containerd.runsc.v1.options".into()),
            ),
            (
                "ConfigPath".into(),
                OptionValue::String("{{configDir}}/runsc.toml".into()),
            ),
        ]),
        pod_annotations: vec!["dev.gvisor.*".into()],
        privileged_without_host_devices: true,
        config_files: vec![ConfigFile {
            name: "runsc.toml".into(),
            content: "[runsc_config]\n  platform = \"systrap\"\n  binary = \"{{binDir}}/runsc\"\n"
                .into(),
        }],
        node_selector: BTreeMap::new(),
        worker_pools: vec![],
    }
}

fn crun(pools: &[&str]) -> DesiredShim {
    DesiredShim {
        name: "crun".into(),
        handler: "crun".into(),
        runtime_type: "io.containerd.runc.v2".into(),
        version: "1.23".into(),
        binaries: vec![image_binary("crun", "registry.example/shims/crun:1.23")],
        oci_runtime: true,
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        config_files: vec![],
        node_selector: BTreeMap::new(),
        worker_pools: pools.iter().map(|p| p.to_string()).collect(),
    }
}

fn install(shims: Vec<DesiredShim>) -> DesiredShims {
    DesiredShims {
        schema: SCHEMA,
        mode: Mode::Install,
        delivery: crate::desired_shims::Delivery::Osc,
        shims,
        rollout: Rollout {
            max_concurrent_restarts: 1,
        },
    }
}

/// An OSC as gardenlet writes it, with another extension's plugin entry (a foreign runtime and
/// a registry-mirror-like patch) and files, one of them below our runtimes directory.
fn osc(pool: &str) -> OperatingSystemConfig {
    serde_json::from_value(json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {
            "name": format!("worker-{pool}-original"),
            "namespace": "shoot--project--shoot",
            "labels": {"worker.gardener.cloud/pool": pool},
            "annotations": {"gardener.cloud/operation": "reconcile"},
        },
        "spec": {
            "type": "gardenlinux",
            "purpose": "reconcile",
            "criConfig": {
                "name": "containerd",
                "cgroupDriver": "systemd",
                "containerd": {
                    "sandboxImage": "registry.k8s.io/pause:3.10",
                    "plugins": [
                        {"path": ["io.containerd.grpc.v1.cri", "containerd", "runtimes", "kata"],
                         "values": {"runtime_type": "io.containerd.kata.v2"}},
                        {"path": ["io.containerd.grpc.v1.cri", "registry"],
                         "values": {"config_path": "/etc/containerd/certs.d"}},
                    ],
                },
            },
            "files": [
                {"path": "/etc/motd", "permissions": 420,
                 "content": {"inline": {"encoding": "", "data": "hello\n"}}},
                {"path": "/var/bin/containerruntimes/kata/containerd-shim-kata-v2",
                 "permissions": 493,
                 "content": {"imageRef": {"image": "registry.example/kata:3",
                                          "filePathInImage": "/kata"}}},
            ],
            "units": [{"name": "kubelet.service"}],
        },
    }))
    .expect("the fixture is an OSC")
}

fn apply(osc: &OperatingSystemConfig, desired: &DesiredShims) -> OperatingSystemConfig {
    let once = mutate(osc, desired).expect("mutation succeeds");
    let twice = mutate(&once, desired).expect("second mutation succeeds");
    assert_eq!(
        serde_json::to_value(&twice).unwrap(),
        serde_json::to_value(&once).unwrap(),
        "applying the mutation twice changes the OSC again"
    );
    once
}

fn to_yaml(osc: &OperatingSystemConfig) -> String {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(&serde_json::to_value(osc).expect("encodes"), options)
        .expect("YAML")
}

fn golden(name: &str, osc: &OperatingSystemConfig) {
    let actual = to_yaml(osc);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test/golden/osc")
        .join(format!("{name}.yaml"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `UPDATE_GOLDEN=1 cargo test --lib shim::osc` to create it",
            path.display()
        )
    });
    assert_eq!(
        expected,
        actual,
        "{} differs; rerun with UPDATE_GOLDEN=1 if the change is intended",
        path.display()
    );
}

fn plugins(osc: &OperatingSystemConfig) -> &[PluginConfig] {
    &osc.spec
        .cri_config
        .as_ref()
        .unwrap()
        .containerd
        .as_ref()
        .unwrap()
        .plugins
}

fn file_paths(osc: &OperatingSystemConfig) -> Vec<&str> {
    osc.spec.files.iter().map(|f| f.path.as_str()).collect()
}

fn delivered(osc: &OperatingSystemConfig) -> Delivered {
    let text = &osc.metadata.annotations.as_ref().unwrap()[DELIVERED_ANNOTATION];
    Delivered::from_annotation(text).unwrap()
}

/// Everything of the fixture that is not ours is in the mutated OSC, unchanged and in order.
fn assert_foreign_untouched(before: &OperatingSystemConfig, after: &OperatingSystemConfig) {
    let theirs = |o: &OperatingSystemConfig| {
        let d = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DELIVERED_ANNOTATION))
            .map(|t| Delivered::from_annotation(t).unwrap())
            .unwrap_or_default();
        let plugins: Vec<PluginConfig> = plugins(o)
            .iter()
            .filter(|p| p.path.len() != 4 || !d.owned_handlers().any(|h| *h == p.path[3]))
            .cloned()
            .collect();
        let files: Vec<_> = o
            .spec
            .files
            .iter()
            .filter(|f| !d.owned_files().any(|p| *p == f.path))
            .cloned()
            .collect();
        let mut annotations = o.metadata.annotations.clone().unwrap_or_default();
        annotations.remove(DELIVERED_ANNOTATION);
        (
            plugins,
            files,
            annotations,
            o.spec.other.clone(),
            o.metadata.labels.clone(),
        )
    };
    assert_eq!(theirs(before), theirs(after));
}

#[test]
fn two_pools_get_their_own_shims() {
    let desired = install(vec![spin("v0.22.0"), gvisor("20250811"), crun(&["b"])]);
    let a = apply(&osc("a"), &desired);
    let b = apply(&osc("b"), &desired);
    golden("install-pool-a", &a);
    golden("install-pool-b", &b);
    assert_foreign_untouched(&osc("a"), &a);
    assert_foreign_untouched(&osc("b"), &b);
    assert_eq!(
        delivered(&a).handlers.into_iter().collect::<Vec<_>>(),
        ["runsc", "spin"]
    );
    assert_eq!(
        delivered(&b).handlers.into_iter().collect::<Vec<_>>(),
        ["crun", "runsc", "spin"]
    );
    // The foreign entries come first, untouched; ours follow, by handler.
    let handlers: Vec<&str> = plugins(&b)
        .iter()
        .map(|p| p.path[p.path.len() - 1].as_str())
        .collect();
    assert_eq!(handlers, ["kata", "registry", "crun", "runsc", "spin"]);
}

#[test]
fn values_are_the_ones_the_installer_writes() {
    use crate::installer::containerd::{ManagedKey, RuntimeEntry};
    for shim in [spin("v0.22.0"), gvisor("20250811"), crun(&[])] {
        let dir = VersionDir::of(&shim);
        let binary = format!("{}/{}", dir.bin_dir(), shim.binaries[0].name);
        let entry = RuntimeEntry::from_desired(
            &shim,
            Path::new(&binary),
            Path::new(&dir.config_dir()),
            Path::new(&dir.bin_dir()),
        )
        .unwrap();
        let osc = apply(&osc("a"), &install(vec![shim.clone()]));
        let plugin = plugins(&osc)
            .iter()
            .find(|p| p.path == runtime_path(&shim.handler))
            .unwrap();
        assert_eq!(plugin.op, None);
        let values = plugin.values.as_ref().unwrap();
        assert_eq!(values["runtime_type"], json!(entry.runtime_type));
        let mut options = serde_json::to_value(&entry.options).unwrap();
        match entry.managed_key {
            ManagedKey::RuntimePath => assert_eq!(values["runtime_path"], json!(binary)),
            ManagedKey::BinaryName => {
                assert_eq!(values["runtime_path"], json!(""));
                options["BinaryName"] = json!(binary);
            }
            ManagedKey::RuntimeType => unreachable!("never chosen without a containerd version"),
        }
        assert_eq!(values["options"], options, "{}", shim.name);
        assert_eq!(values["pod_annotations"], json!(entry.pod_annotations));
        assert_eq!(
            values["privileged_without_host_devices"],
            json!(entry.privileged_without_host_devices)
        );
        // Every binary and config file is delivered, into the version directory.
        let paths = file_paths(&osc);
        for b in &shim.binaries {
            assert!(paths.contains(&format!("{}/{}", dir.bin_dir(), b.name).as_str()));
        }
        for c in &shim.config_files {
            let file = osc
                .spec
                .files
                .iter()
                .find(|f| f.path == format!("{}/{}", dir.config_dir(), c.name))
                .unwrap();
            let data = &file.content.inline.as_ref().unwrap().data;
            assert!(!data.contains("{{"), "{data}");
            assert!(data.contains(&dir.bin_dir()), "{data}");
        }
    }
}

#[test]
fn version_directories_are_stamped_with_version_and_content() {
    let a = VersionDir::of(&spin("v0.22.0"));
    assert!(
        a.path()
            .starts_with("/var/bin/containerruntimes/spin/v0.22.0-"),
        "{}",
        a.path()
    );
    assert_eq!(a, VersionDir::of(&spin("v0.22.0")));
    let mut changed = spin("v0.22.0");
    changed.binaries[0] = image_binary("containerd-shim-spin-v2", "registry.example/other:x");
    assert_ne!(a, VersionDir::of(&changed));
    let mut config = gvisor("1");
    let before = VersionDir::of(&config);
    config.config_files[0].content.push('\n');
    assert_ne!(before, VersionDir::of(&config));
}

#[test]
fn an_upgrade_delivers_a_new_directory_and_keeps_the_old_files_one_generation() {
    let first = apply(
        &osc("a"),
        &install(vec![spin("v0.21.0"), gvisor("20250811")]),
    );
    let old_spin = VersionDir::of(&spin("v0.21.0"));
    let upgraded = apply(&first, &install(vec![spin("v0.22.0"), gvisor("20250811")]));
    golden("upgrade-spin", &upgraded);
    assert_foreign_untouched(&first, &upgraded);
    let new_spin = VersionDir::of(&spin("v0.22.0"));
    let paths = file_paths(&upgraded);
    let old_binary = format!("{}/containerd-shim-spin-v2", old_spin.bin_dir());
    let new_binary = format!("{}/containerd-shim-spin-v2", new_spin.bin_dir());
    assert!(paths.contains(&old_binary.as_str()), "{paths:?}");
    assert!(paths.contains(&new_binary.as_str()), "{paths:?}");
    let spin_entry = plugins(&upgraded)
        .iter()
        .find(|p| p.path == runtime_path("spin"))
        .unwrap();
    assert_eq!(
        spin_entry.values.as_ref().unwrap()["runtime_path"],
        json!(new_binary)
    );
    assert_eq!(delivered(&upgraded).retained, [old_binary.clone()].into());

    // The next change of the delivered files drops the kept generation and keeps the one it
    // replaces.
    let again = apply(
        &upgraded,
        &install(vec![spin("v0.22.0"), gvisor("20251001")]),
    );
    golden("upgrade-gvisor-after-spin", &again);
    let paths = file_paths(&again);
    assert!(!paths.contains(&old_binary.as_str()), "{paths:?}");
    assert!(paths.contains(&new_binary.as_str()), "{paths:?}");
    let old_gvisor = VersionDir::of(&gvisor("20250811"));
    assert_eq!(
        delivered(&again).retained,
        [
            format!("{}/containerd-shim-runsc-v1", old_gvisor.bin_dir()),
            format!("{}/runsc", old_gvisor.bin_dir()),
            format!("{}/runsc.toml", old_gvisor.config_dir()),
        ]
        .into()
    );
}

#[test]
fn a_removed_handler_gets_a_remove_entry_that_stays() {
    let first = apply(
        &osc("a"),
        &install(vec![spin("v0.22.0"), gvisor("20250811")]),
    );
    let removed = apply(&first, &install(vec![spin("v0.22.0")]));
    golden("remove-gvisor", &removed);
    assert_foreign_untouched(&first, &removed);
    let remove = PluginConfig {
        op: Some(PluginOp::Remove),
        path: runtime_path("runsc"),
        values: None,
    };
    assert!(plugins(&removed).contains(&remove));
    assert!(
        !plugins(&removed)
            .iter()
            .any(|p| p.path == runtime_path("runsc") && p.op.is_none())
    );
    // Still there after an unrelated change (nodes that were away must still see it).
    let later = apply(&removed, &install(vec![spin("v0.23.0")]));
    assert!(plugins(&later).contains(&remove));
    // The handler wanted again replaces its remove entry.
    let back = apply(&later, &install(vec![spin("v0.23.0"), gvisor("20250811")]));
    assert!(!plugins(&back).contains(&remove));
    assert!(delivered(&back).removed.is_empty());
}

#[test]
fn uninstall_removes_every_handler_and_keeps_foreign_entries() {
    let first = apply(&osc("b"), &install(vec![spin("v0.22.0"), crun(&[])]));
    let gone = apply(
        &first,
        &DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        }),
    );
    golden("uninstall", &gone);
    assert_foreign_untouched(&first, &gone);
    let ours: Vec<&PluginConfig> = plugins(&gone)
        .iter()
        .filter(|p| p.path.len() == 4 && ["spin", "crun"].contains(&p.path[3].as_str()))
        .collect();
    assert_eq!(ours.len(), 2);
    assert!(ours.iter().all(|p| p.op == Some(PluginOp::Remove)));
    assert!(delivered(&gone).files.is_empty());
}

#[test]
fn an_osc_with_nothing_to_deliver_is_left_alone() {
    let untouched = apply(&osc("c"), &install(vec![crun(&["b"])]));
    assert_eq!(
        serde_json::to_value(&untouched).unwrap(),
        serde_json::to_value(osc("c")).unwrap()
    );
}

#[test]
fn a_foreign_entry_for_our_handler_or_path_is_refused_not_overwritten() {
    let err = mutate(
        &osc("a"),
        &install(vec![DesiredShim {
            handler: "kata".into(),
            ..spin("v1")
        }]),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "OperatingSystemConfig shoot--project--shoot/worker-a-original: spec.criConfig.containerd.plugins already has an entry for runtime handler \"kata\" that this extension did not write"
    );
    let mut taken = osc("a");
    let path = format!(
        "{}/containerd-shim-spin-v2",
        VersionDir::of(&spin("v1")).bin_dir()
    );
    taken.spec.files.push(taken.spec.files[0].clone());
    taken.spec.files.last_mut().unwrap().path = path.clone();
    let err = mutate(&taken, &install(vec![spin("v1")])).unwrap_err();
    assert_eq!(
        err,
        OscError::ForeignFile {
            osc: "shoot--project--shoot/worker-a-original".into(),
            path
        }
    );
}

#[test]
fn what_the_osc_cannot_express_is_refused_with_the_field() {
    let mut url = spin("v1");
    url.binaries[0].source = BinarySource::Url {
        artifacts: BTreeMap::from([(
            Arch::Amd64,
            UrlArtifact {
                url: "https://example.com/shim".into(),
                sha256: "a".repeat(64),
            },
        )]),
    };
    assert_eq!(
        mutate(&osc("a"), &install(vec![url]))
            .unwrap_err()
            .to_string(),
        "shim spin: binary containerd-shim-spin-v2 is downloaded from a URL; the OperatingSystemConfig delivers files from images only"
    );
    let mut selector = spin("v1");
    selector.node_selector = BTreeMap::from([("gpu".into(), "true".into())]);
    assert_eq!(
        mutate(&osc("a"), &install(vec![selector])).unwrap_err(),
        OscError::NodeSelector {
            shim: "spin".into()
        }
    );
    let mut docker = osc("a");
    docker.spec.cri_config.as_mut().unwrap().name = "docker".into();
    assert_eq!(
        mutate(&docker, &install(vec![spin("v1")]))
            .unwrap_err()
            .to_string(),
        "OperatingSystemConfig shoot--project--shoot/worker-a-original: spec.criConfig.name is \"docker\"; shims need \"containerd\""
    );
    let mut no_pool = osc("a");
    no_pool.metadata.labels = None;
    assert!(matches!(
        mutate(&no_pool, &install(vec![spin("v1")])),
        Err(OscError::NoPool { .. })
    ));
    let mut bad = osc("a");
    bad.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(DELIVERED_ANNOTATION.into(), "{\"handlers\": 1}".into());
    let err = mutate(&bad, &install(vec![spin("v1")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(DELIVERED_ANNOTATION) && err.contains("invalid type"),
        "{err}"
    );
}

#[test]
fn the_golden_files_are_valid_oscs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("test/golden/osc");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = crate::gardener::decode::yaml_value(
            &text,
            &crate::gardener::decode::PathStyle::MANIFEST,
        )
        .unwrap();
        let osc: OperatingSystemConfig = serde_json::from_value(value).unwrap();
        for file in &osc.spec.files {
            let sources = [
                file.content.inline.is_some(),
                file.content.image_ref.is_some(),
                !file.content.other.is_empty(),
            ];
            assert_eq!(
                sources.iter().filter(|s| **s).count(),
                1,
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn a_rollback_to_the_kept_version_takes_its_files_back() {
    let first = apply(&osc("a"), &install(vec![spin("v0.21.0")]));
    let upgraded = apply(&first, &install(vec![spin("v0.22.0")]));
    let back = apply(&upgraded, &install(vec![spin("v0.21.0")]));
    assert_foreign_untouched(&first, &back);
    let old = format!(
        "{}/containerd-shim-spin-v2",
        VersionDir::of(&spin("v0.21.0")).bin_dir()
    );
    let new = format!(
        "{}/containerd-shim-spin-v2",
        VersionDir::of(&spin("v0.22.0")).bin_dir()
    );
    let state = delivered(&back);
    assert_eq!(state.files, [old.clone()].into());
    assert_eq!(state.retained, [new.clone()].into());
    // Each path once: the kept file became the wanted one, not a second entry.
    let paths = file_paths(&back);
    assert_eq!(paths.iter().filter(|p| **p == old).count(), 1, "{paths:?}");
    assert_eq!(paths.iter().filter(|p| **p == new).count(), 1, "{paths:?}");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// A desired set from a small alphabet: each shim absent or at one of two versions.
    fn desired() -> impl Strategy<Value = DesiredShims> {
        (0..3usize, 0..3usize, 0..2usize, any::<bool>()).prop_map(|(s, g, c, uninstall)| {
            if uninstall {
                return DesiredShims::uninstall(Rollout {
                    max_concurrent_restarts: 1,
                });
            }
            let mut shims = Vec::new();
            if s > 0 {
                shims.push(spin(&format!("v0.2{s}.0")));
            }
            if g > 0 {
                shims.push(gvisor(&format!("2025081{g}")));
            }
            if c > 0 {
                shims.push(crun(&["b"]));
            }
            install(shims)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Over any sequence of changes: each step is idempotent, foreign entries are as
        /// gardenlet wrote them, every delivered handler has exactly one entry and every
        /// recorded file is in the OSC exactly once.
        #[test]
        fn any_sequence_of_changes_keeps_the_osc_consistent(
            pool in prop::sample::select(vec!["a", "b"]),
            steps in prop::collection::vec(desired(), 1..6),
        ) {
            let original = osc(pool);
            let mut current = original.clone();
            for step in &steps {
                current = apply(&current, step);
                assert_foreign_untouched(&original, &current);
                let Some(state) = current
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DELIVERED_ANNOTATION))
                    .map(|t| Delivered::from_annotation(t).unwrap())
                else {
                    continue;
                };
                for handler in state.owned_handlers() {
                    let entries: Vec<&PluginConfig> = plugins(&current)
                        .iter()
                        .filter(|p| p.path == runtime_path(handler))
                        .collect();
                    prop_assert_eq!(entries.len(), 1, "{}", handler);
                    prop_assert_eq!(
                        entries[0].op == Some(PluginOp::Remove),
                        state.removed.contains(handler)
                    );
                }
                let paths = file_paths(&current);
                for file in state.owned_files() {
                    prop_assert_eq!(paths.iter().filter(|p| **p == file).count(), 1);
                }
                prop_assert!(state.files.is_disjoint(&state.retained));
            }
        }
    }
}
