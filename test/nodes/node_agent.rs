//! gardener-node-agent on real nodes (`--node-agent`): a runtime delivered the way Gardener
//! expects extensions to deliver one, through the OperatingSystemConfig. gardenlet's part is
//! the port in test/support/osc.rs; the agent is the real one. On containerd 1.x (config
//! version 2) and 2.x (version 3) nodes: a `criConfig.containerd.plugins` entry for a handler
//! and its binary as an `imageRef` file are applied with one containerd restart, a pod of the
//! handler's RuntimeClass runs under it, the agent's periodic reconcile changes nothing, and an
//! `op: remove` entry with the file dropped takes both off the node.

mod osc_delivery;
mod switch_delivery;

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::node_agent_scenario::{
    AGENT_TIMEOUT, AgentScenario, containerd_config, runtimes_path, toml_at,
};
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crate::support::osc::{
    CONTAINER_RUNTIMES_BIN, ContainerdConfig, CriConfig, DOWNLOADED_CHECKSUM_ANNOTATION, File,
    FileContent, ImageRef, OSC_DATA_KEY, OperatingSystemConfig, OperatingSystemConfigSpec,
    PURPOSE_RECONCILE, PluginConfig, Pool, node_agent_secret, runtime_plugin_path, wait_applied,
};
use crate::support::poll;
use crate::support::real_nodes::{RealNode, now_us};

const HANDLER: &str = "crun";
const RUNTIME_CLASS: &str = "crun-osc";

/// A file of its own: the extension's deliveries in the other tests keep a directory per shim
/// below the same directory (`crun/<version>-<digest>/`), which may outlive them by a generation.
fn crun_binary() -> String {
    format!("{CONTAINER_RUNTIMES_BIN}/{RUNTIME_CLASS}")
}

/// The handler's table with the values the installer writes for crun on these nodes (their
/// kubelets use the cgroupfs driver).
fn crun_plugin() -> PluginConfig {
    PluginConfig {
        op: None,
        path: runtime_plugin_path(HANDLER),
        values: Some(json!({
            "runtime_type": "io.containerd.runc.v2",
            "options": {"BinaryName": crun_binary(), "SystemdCgroup": false}
        })),
    }
}

fn with_crun(s: &AgentScenario) -> OperatingSystemConfigSpec {
    let mut spec = s.base_spec();
    if let Some(containerd) = spec.cri_config.as_mut().and_then(|c| c.containerd.as_mut()) {
        containerd.plugins.push(crun_plugin());
    }
    spec.files.push(File {
        path: crun_binary(),
        permissions: Some(0o755),
        content: FileContent {
            inline: None,
            image_ref: Some(ImageRef {
                image: s.nodes.image("CRUN_PAYLOAD_IMAGE").to_string(),
                file_path_in_image: "/payload/crun".into(),
            }),
        },
    });
    spec
}

fn without_crun(s: &AgentScenario) -> OperatingSystemConfigSpec {
    let mut spec = s.base_spec();
    if let Some(containerd) = spec.cri_config.as_mut().and_then(|c| c.containerd.as_mut()) {
        containerd.plugins.push(PluginConfig {
            op: Some("remove".into()),
            path: runtime_plugin_path(HANDLER),
            values: None,
        });
    }
    spec
}

fn handler_table(node: &RealNode) -> Option<String> {
    let doc = containerd_config(node);
    let mut path = runtimes_path(node).to_vec();
    path.push(HANDLER);
    toml_at(&doc, &path).map(|item| item.to_string())
}

/// A value of the handler's table, as TOML text (`"a string"`, `false`).
fn handler_value(node: &RealNode, key: &[&str]) -> Option<String> {
    let doc = containerd_config(node);
    let mut path = runtimes_path(node).to_vec();
    path.push(HANDLER);
    path.extend(key);
    toml_at(&doc, &path)
        .and_then(|item| item.as_value())
        .map(|v| v.clone().decorated("", "").to_string())
}

fn assert_runc_kept(node: &RealNode) {
    let doc = containerd_config(node);
    let mut path = runtimes_path(node).to_vec();
    path.extend(["runc", "runtime_type"]);
    assert!(
        toml_at(&doc, &path).is_some(),
        "{}: runc is gone from config.toml:\n{doc}",
        node.name
    );
}

#[tokio::test]
async fn node_agent_applies_a_runtime_from_the_osc_and_removes_it() {
    let s = AgentScenario::start("node-agent").await;
    let names = s.node_names();

    // The pool's OSC as gardenlet renders it, applied: from here on, changes are ours alone.
    let (_, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    s.wait_nodes_ready().await;
    for node in &s.nodes.nodes {
        assert_eq!(handler_table(node), None, "{}: crun left over", node.name);
    }

    // The handler's plugin entry and binary.
    let started = now_us();
    let (osc, checksum) = s.gardenlet.reconcile(with_crun(&s)).await;
    assert_eq!(
        osc.spec
            .cri_config
            .as_ref()
            .and_then(|c| c.containerd.as_ref())
            .map(|c| c.plugins.clone()),
        Some(vec![crun_plugin()]),
        "the seed's OSC"
    );
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    for node in &s.nodes.nodes {
        assert!(
            handler_table(node).is_some(),
            "{}: no {HANDLER} table at {:?} in\n{}",
            node.name,
            runtimes_path(node),
            containerd_config(node)
        );
        for (key, value) in [
            (
                &["runtime_type"][..],
                "\"io.containerd.runc.v2\"".to_string(),
            ),
            (
                &["options", "BinaryName"][..],
                format!("\"{}\"", crun_binary()),
            ),
            (&["options", "SystemdCgroup"][..], "false".to_string()),
        ] {
            assert_eq!(
                handler_value(node, key).as_deref(),
                Some(value.as_str()),
                "{}: {key:?} in\n{}",
                node.name,
                containerd_config(node)
            );
        }
        assert_runc_kept(node);
        let binary = node.path(&crun_binary());
        let mode = std::fs::metadata(&binary)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", node.name, binary.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{}: {}", node.name, binary.display());
        assert!(
            node.exists("/etc/systemd/system/containerd.service.d/30-env_config.conf"),
            "{}: the agent's PATH drop-in for containerd",
            node.name
        );
        let restarts = node.containerd_restarts(started);
        assert_eq!(
            restarts.len(),
            1,
            "{}: containerd restarts while applying: {restarts:?}",
            node.name
        );
    }
    let applied = s.nodes.containerd_configs();
    s.wait_nodes_ready().await;

    // A pod of the handler's RuntimeClass runs under crun on every node.
    s.runtime_class(RUNTIME_CLASS, HANDLER).await;
    for node in &s.nodes.nodes {
        let (_, id) = s.run_pod(node, RUNTIME_CLASS).await;
        assert!(
            node.oci_containers(&crun_binary()).contains(&id),
            "{}: crun does not list {id}",
            node.name
        );
    }

    // The agent's periodic reconcile (30 s after it applied, on these nodes) finds the node up
    // to date and touches nothing. Nothing else makes it log that since the apply: it watches
    // the Secret's data, and its Node only for in-place updates.
    for node in &s.nodes.nodes {
        poll::until(
            &format!("{}: a periodic reconcile of the agent", node.name),
            AGENT_TIMEOUT,
            || async {
                let seen = node
                    .journal("gardener-node-agent.service", started)
                    .iter()
                    .any(|e| {
                        e.message
                            .contains("Configuration on this node is up to date")
                    });
                if seen {
                    Ok(())
                } else {
                    Err("not yet".to_string())
                }
            },
        )
        .await;
    }
    assert_eq!(
        s.nodes.containerd_configs(),
        applied,
        "containerd's config changed"
    );
    for node in &s.nodes.nodes {
        assert_eq!(
            node.containerd_restarts(started).len(),
            1,
            "{}: containerd restarted again",
            node.name
        );
    }

    // Removal: an `op: remove` entry takes the table, the dropped file goes.
    s.delete_pods().await;
    s.delete_runtime_class(RUNTIME_CLASS).await;
    let removing = now_us();
    let (_, checksum) = s.gardenlet.reconcile(without_crun(&s)).await;
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    for node in &s.nodes.nodes {
        assert_eq!(
            handler_table(node),
            None,
            "{}: the {HANDLER} table is still there",
            node.name
        );
        assert_runc_kept(node);
        assert!(
            !node.exists(&crun_binary()),
            "{}: {} is still there",
            node.name,
            crun_binary()
        );
        assert_eq!(
            node.containerd_restarts(removing).len(),
            1,
            "{}: containerd restarts while removing",
            node.name
        );
    }
    s.wait_nodes_ready().await;
}

/// gardenlet's Secret, without nodes: the checksum is over exactly the bytes the agent reads,
/// and only what the agent reconciles is in them.
#[test]
fn the_secret_carries_the_checksum_of_exactly_its_data() {
    let osc = OperatingSystemConfig::new(
        "x-original",
        OperatingSystemConfigSpec {
            type_: "debian".into(),
            purpose: PURPOSE_RECONCILE.into(),
            cri_config: Some(CriConfig {
                name: "containerd".into(),
                cgroup_driver: Some("cgroupfs".into()),
                containerd: Some(ContainerdConfig {
                    sandbox_image: "r/pause@sha256:0".into(),
                    plugins: vec![],
                }),
            }),
            ..Default::default()
        },
    );
    let pool = Pool {
        name: "worker-a".into(),
        secret_name: "gardener-node-agent-worker-a-0123456789abcdef".into(),
    };
    let secret = node_agent_secret(&osc, &pool).unwrap();
    let data = &secret.data.as_ref().unwrap()[OSC_DATA_KEY].0;
    assert_eq!(
        secret.annotations()[DOWNLOADED_CHECKSUM_ANNOTATION],
        hex::encode(Sha256::digest(data))
    );
    let text = String::from_utf8_lossy(data);
    // Only what the agent reconciles: not the seed object's type and purpose.
    assert!(!text.contains("debian"), "{text}");
    assert!(!text.contains(PURPOSE_RECONCILE), "{text}");
    assert!(text.contains("sandboxImage"), "{text}");
}
