//! Installing a shim on real nodes: the installer pods run, each node's containerd
//! configuration changes exactly as docs/installer.md says, containerd restarts once, the node
//! is labelled, and a pod of the RuntimeClass runs under the installed runtime.

use serde_json::json;

use crate::scenario::{NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use crate::support::poll;
use crate::support::real_nodes::{RealNode, now_us};

/// crun on the test nodes: their kubelets use the cgroupfs driver.
pub fn crun() -> serde_json::Value {
    json!([{"name": "crun", "options": {"SystemdCgroup": false}}])
}

const CRUN_BINARY: &str = "/var/lib/containerd-shim-installer/current/crun/bin/crun";

/// Starts a pod of the `crun` RuntimeClass on `node` and checks that the installed crun's state
/// lists its container; returns the pod's name and the container's id.
pub async fn run_pod_under_crun(s: &Scenario, node: &RealNode) -> (String, String) {
    let pod = s
        .run_pod(node, Some("crun"), "echo running under crun; sleep 3600")
        .await;
    let id = s.container_id(&pod).await;
    assert!(
        node.oci_containers(CRUN_BINARY).contains(&id),
        "{}: crun does not list {id}",
        node.name
    );
    (pod, id)
}

#[tokio::test]
async fn crun_installs_on_both_containerd_versions_and_runs_a_pod() {
    let s = Scenario::start("install").await;
    let started = now_us();
    let before = s.nodes.containerd_configs();

    s.apply(crun()).await;

    // The installer DaemonSet's pods run on both nodes (init containers staged the payload).
    poll::until(
        "an installer pod Running on every node",
        NODE_TIMEOUT,
        || async {
            let list = s.list_installer_pods().await?;
            let running: Vec<String> = list
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                .collect();
            if s.nodes.nodes.iter().all(|n| running.contains(&n.name)) {
                Ok(())
            } else {
                Err(format!("running on {running:?}"))
            }
        },
    )
    .await;
    s.wait_verified_everywhere("crun").await;

    for (node, before) in s.nodes.nodes.iter().zip(&before) {
        let after = node.containerd_config();
        match node.containerd_major() {
            1 => {
                // 1.x: the config is edited in place, the original kept once as a backup.
                let original = &before["config.toml"];
                assert_eq!(
                    after.get("config.toml.containerd-shim.bak"),
                    Some(original),
                    "{}: the backup is the original",
                    node.name
                );
                let text = String::from_utf8_lossy(&after["config.toml"]).into_owned();
                for line in [
                    "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]",
                    "runtime_type = \"io.containerd.runc.v2\"",
                    &format!("BinaryName = \"{CRUN_BINARY}\""),
                    "SystemdCgroup = false",
                    // The node's config defines no runtime: containerd's implicit runc is
                    // written out, so that adding crun does not drop it.
                    "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]",
                ] {
                    assert!(text.contains(line), "{}: no {line:?} in\n{text}", node.name);
                }
                assert!(!text.contains("runtime_path"), "{}:\n{text}", node.name);
                let mut unchanged = after.clone();
                unchanged.remove("config.toml");
                unchanged.remove("config.toml.containerd-shim.bak");
                let mut others = before.clone();
                others.remove("config.toml");
                assert_eq!(unchanged, others, "{}: other files changed", node.name);
            }
            _ => {
                // 2.x: the main file is untouched (its import glob covers the drop-in), and
                // the drop-in declares the main file's version.
                assert_eq!(
                    after.get("config.toml"),
                    before.get("config.toml"),
                    "{}: config.toml changed",
                    node.name
                );
                let drop_in = String::from_utf8_lossy(
                    after
                        .get("conf.d/50-containerd-shim.toml")
                        .unwrap_or_else(|| panic!("{}: no drop-in in {after:?}", node.name)),
                )
                .into_owned();
                for line in [
                    "version = 3",
                    "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.crun]",
                    &format!("BinaryName = \"{CRUN_BINARY}\""),
                ] {
                    assert!(
                        drop_in.contains(line),
                        "{}: no {line:?} in\n{drop_in}",
                        node.name
                    );
                }
                assert_eq!(after.len(), before.len() + 1, "{}: {after:?}", node.name);
            }
        }
        let restarts = node.containerd_restarts(started);
        assert_eq!(
            restarts.len(),
            1,
            "{}: containerd restarts {restarts:?}",
            node.name
        );
        assert!(node.exists(&format!("{STATE_DIR}/current/crun/bin/crun")));
    }

    // A pod of the RuntimeClass runs under crun on each node: crun's state lists its container,
    // runc's does not.
    for node in &s.nodes.nodes {
        let (pod, id) = run_pod_under_crun(&s, node).await;
        assert!(
            !node.oci_containers("runc").contains(&id),
            "{}: runc lists {id}",
            node.name
        );
        poll::until("the pod's output", poll::DEFAULT_TIMEOUT, || async {
            let logs = s.logs(&pod).await;
            if logs.contains("running under crun") {
                Ok(())
            } else {
                Err(logs)
            }
        })
        .await;
    }

    // The crun pods go first: the shim's files stay while they run.
    s.delete_workloads_except(&[]).await;
    s.delete().await;
    for node in &s.nodes.nodes {
        assert_clean(&s.c, node).await;
    }
}

/// Debian's packaged containerd config defines no runtime: the node gets crun and keeps
/// serving ordinary pods, before, during and after, and uninstalling gives its file back.
#[tokio::test]
async fn a_node_with_debian_s_packaged_config_keeps_serving_ordinary_pods() {
    let s = Scenario::start("debian-config").await;
    let node = s.nodes.with_containerd(1);
    let original = node
        .read("/etc/containerd/config.toml")
        .expect("config.toml");
    assert!(
        !String::from_utf8_lossy(&original).contains("runtimes"),
        "the node's config is meant to define no runtime"
    );
    let ordinary = s
        .run_pod(node, None, "while true; do echo alive; sleep 1; done")
        .await;
    let ordinary_id = s.container_id(&ordinary).await;

    s.apply(crun()).await;
    s.wait_verified_everywhere("crun").await;

    // containerd still runs runc as its default, and with it the pod that was there.
    let info: serde_json::Value =
        serde_json::from_str(&node.run(&["crictl", "info"])).expect("crictl info");
    let runtimes = &info["config"]["containerd"]["runtimes"];
    assert_eq!(
        info["config"]["containerd"]["defaultRuntimeName"], "runc",
        "{info}"
    );
    assert!(
        runtimes.get("runc").is_some() && runtimes.get("crun").is_some(),
        "{runtimes}"
    );
    assert!(node.oci_containers("runc").contains(&ordinary_id));
    s.wait_pod_running(&ordinary).await;
    assert_eq!(
        s.container_id(&ordinary).await,
        ordinary_id,
        "the pod was restarted"
    );
    // And new ordinary pods start.
    s.run_pod(node, None, "sleep 3600").await;

    s.delete().await;
    assert_eq!(
        node.read("/etc/containerd/config.toml").as_deref(),
        Some(original.as_slice()),
        "uninstall gives the file back byte for byte"
    );
    assert_eq!(s.container_id(&ordinary).await, ordinary_id);
    assert_clean(&s.c, node).await;
}
