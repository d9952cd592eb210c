//! Shim upgrades on real nodes: a new version of a shim reaches the nodes while pods of it run.
//! The running pods keep their shim process (and its binary, in the old version's directory),
//! new pods start the new version, nothing restarts containerd (the configuration names the
//! stable path `current/<shim>`), and no file a running shim executes is written ("text file
//! busy" cannot happen). A version that cannot run is swapped back on the first node it
//! reaches, where the earlier version keeps serving; the rollout stops there and the
//! Extension's health names the shim and the version. Going back to an older version works the
//! same way as going up.
//!
//! The versions are those hack/nodes/images.sh offers in the catalog overlay for the catalog's
//! `wasmtime` entry: its own version, `next` (the same build under another version, so a new
//! version directory) and `broken` (a shim binary that exits non-zero).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use serde_json::{Value, json};

use crate::refusal_events::warnings;
use crate::scenario::{EXTENSION, NODE_TIMEOUT, STATE_DIR, Scenario};
use crate::support::poll;
use crate::support::real_nodes::{RealNode, now_us};
use crate::wasm::{assert_http_answer, start_http_module};

/// The catalog's own version of the `wasmtime` entry (src/shim/config/catalog.yaml).
const CATALOG_VERSION: &str = "0.1.0";
const SHIM_BINARY: &str = "containerd-shim-wasmtime-v1";

fn wasmtime(version: &str) -> Value {
    json!([{"name": "wasmtime", "catalog": {"name": "wasmtime", "version": version}}])
}

/// The version directory `current/wasmtime` points at on a node (`<version>-<digest12>`).
fn active_dir(node: &RealNode) -> String {
    std::fs::read_link(node.path(&format!("{STATE_DIR}/current/wasmtime")))
        .map(|target| target.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Waits until every node serves this version of the shim.
async fn wait_active_everywhere(s: &Scenario, version: &str) {
    let wanted = format!("/{version}-");
    poll::until(
        &format!("every node switched current/wasmtime to {version}"),
        NODE_TIMEOUT,
        || async {
            let dirs: BTreeMap<String, String> = s
                .nodes
                .nodes
                .iter()
                .map(|n| (n.name.clone(), active_dir(n)))
                .collect();
            if dirs.values().all(|d| d.contains(&wanted)) {
                Ok(())
            } else {
                Err(format!("{dirs:?}"))
            }
        },
    )
    .await;
}

/// The executables of the node's processes that run a wasmtime shim file, by process id: the
/// shim of each pod sandbox and the processes it starts, so each pod shows which version runs it.
pub(crate) fn shim_executables(node: &RealNode) -> BTreeMap<u32, String> {
    let script = format!(
        "for d in /proc/[0-9]*; do e=$(readlink \"$d/exe\" 2>/dev/null) || continue; \
         case \"$e\" in */{SHIM_BINARY}*) echo \"${{d#/proc/}} $e\";; esac; done"
    );
    node.run(&["sh", "-c", &script])
        .lines()
        .filter_map(|line| {
            let (pid, exe) = line.split_once(' ')?;
            Some((pid.parse().ok()?, exe.to_string()))
        })
        .collect()
}

/// Starts the HTTP module under the wasmtime RuntimeClass on `node`, checks its answer, and
/// returns the pod's name and the executable of the shim process it added.
async fn serve_http(s: &Scenario, node: &RealNode) -> (String, String) {
    let before = shim_executables(node);
    let pod = start_http_module(s, node).await;
    assert_http_answer(s, &pod, node).await;
    // The pod's shim and the processes it started for the pod's sandbox and container all
    // execute one file.
    let added: std::collections::BTreeSet<String> = shim_executables(node)
        .into_iter()
        .filter(|(pid, _)| !before.contains_key(pid))
        .map(|(_, exe)| exe)
        .collect();
    assert_eq!(
        added.len(),
        1,
        "{}: the processes of the pod {pod} execute one shim file: {added:?}",
        node.name
    );
    let exe = added.into_iter().next().unwrap_or_default();
    (pod, exe)
}

#[tokio::test]
async fn a_shim_upgrade_keeps_running_pods_a_version_that_cannot_run_is_swapped_back_and_a_downgrade_works()
 {
    let s = Scenario::start("upgrade").await;
    s.apply(wasmtime(CATALOG_VERSION)).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("wasmtime").await;
    wait_active_everywhere(&s, CATALOG_VERSION).await;

    let mut old = Vec::new();
    for node in &s.nodes.nodes {
        let (pod, exe) = serve_http(&s, node).await;
        assert!(
            exe.contains(&format!("/versions/wasmtime/{CATALOG_VERSION}-")),
            "{}: {exe}",
            node.name
        );
        let id = s.container_id(&pod).await;
        old.push((node, pod, id, exe));
    }

    // Up: a new version directory, one atomic switch of current/wasmtime, no restart.
    let started = now_us();
    s.apply(wasmtime("next")).await;
    s.wait_rolled_out().await;
    wait_active_everywhere(&s, "next").await;
    s.wait_verified_everywhere("wasmtime").await;
    for (node, pod, id, exe) in &old {
        assert!(
            node.containerd_restarts(started).is_empty(),
            "{}: the configuration did not change, yet containerd restarted",
            node.name
        );
        // The running pod kept its shim process, which still executes the old version's file.
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{}: restarted", node.name);
        assert_http_answer(&s, pod, node).await;
        let running = shim_executables(node);
        assert!(
            running.values().any(|e| e == exe),
            "{}: no shim process runs {exe} any more: {running:?}",
            node.name
        );
        assert!(
            node.exists(exe),
            "{}: {exe} was removed while its shim runs",
            node.name
        );
        // A new pod starts the new version.
        let (_, new_exe) = serve_http(&s, node).await;
        assert!(
            new_exe.contains("/versions/wasmtime/next-"),
            "{}: the new pod runs {new_exe}",
            node.name
        );
    }

    // A version that cannot run: the first node that gets it fails verification and swaps
    // back, without a restart (the configuration never changed); the rollout stops there and
    // the health names the shim, the node and the version.
    let configs = s.nodes.containerd_configs();
    let started = now_us();
    s.apply(wasmtime("broken")).await;
    let message = s
        .wait_health("to name the failed shim", |m| {
            m.contains("wasmtime on node-")
        })
        .await;
    let failed = s
        .nodes
        .nodes
        .iter()
        .find(|n| message.contains(&format!("wasmtime on {}:", n.name)))
        .unwrap_or_else(|| panic!("no node named in {message:?}"));
    assert!(
        message.contains("shim wasmtime version broken-")
            && message.contains("swapped back to next-"),
        "the health names the version that failed and the one that serves: {message}"
    );
    // The Warning Event on the Extension says the same.
    let on_extension: Api<Event> = Api::namespaced(s.c.seed.clone(), &s.namespace);
    poll::until(
        "a Warning Event on the Extension naming the version",
        NODE_TIMEOUT,
        || async {
            let notes = warnings(&on_extension, EXTENSION).await?;
            if notes.iter().any(|n| {
                n.contains(&format!("wasmtime on {}:", failed.name))
                    && n.contains("shim wasmtime version broken-")
            }) {
                Ok(())
            } else {
                Err(format!("{notes:?}"))
            }
        },
    )
    .await;
    assert!(
        active_dir(failed).contains("/next-"),
        "{}: current/wasmtime points at {}",
        failed.name,
        active_dir(failed)
    );
    // The rollout stopped: only the failed node has a pod of the new set, and it is not Ready.
    // Watched for a while, no node switches or restarts containerd.
    let halted = s.current_desired_sha256().await;
    poll::stays(
        "the rollout halted at the failed node, every node serving next",
        Duration::from_secs(20),
        || async {
            for pod in s
                .installer_pods()
                .await
                .iter()
                .filter(|p| p.desired_sha256 == halted)
            {
                if pod.node != failed.name || pod.ready_since.is_some() {
                    return Err(format!("{pod:?}"));
                }
            }
            for node in &s.nodes.nodes {
                let dir = active_dir(node);
                if !dir.contains("/next-") {
                    return Err(format!("{}: current/wasmtime points at {dir}", node.name));
                }
                let restarts = node.containerd_restarts(started);
                if !restarts.is_empty() {
                    return Err(format!("{} restarted containerd: {restarts:?}", node.name));
                }
            }
            Ok(())
        },
    )
    .await;
    for ((node, pod, id, _), before) in old.iter().zip(&configs) {
        assert_eq!(
            &node.containerd_config(),
            before,
            "{}: the configuration changed",
            node.name
        );
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{}: restarted", node.name);
    }
    // The failed node keeps serving the version it had: its label stays and a new pod runs it.
    let labels = s.node_labels().await;
    assert_eq!(
        labels[&failed.name]
            .get("containerd-shim.extensions.gardener.cloud/wasmtime")
            .map(String::as_str),
        Some("ready"),
        "{}: {:?}",
        failed.name,
        labels[&failed.name]
    );
    let (_, exe) = serve_http(&s, failed).await;
    assert!(
        exe.contains("/versions/wasmtime/next-"),
        "{}: the new pod runs {exe}",
        failed.name
    );

    // Down: back to the catalog's version, which works like an upgrade, also on the node that
    // failed: the failure goes with the set it belonged to.
    let started = now_us();
    s.apply(wasmtime(CATALOG_VERSION)).await;
    s.wait_rolled_out().await;
    wait_active_everywhere(&s, CATALOG_VERSION).await;
    s.wait_verified_everywhere("wasmtime").await;
    s.wait_health("without failures", |m| !m.contains("failed"))
        .await;
    for node in &s.nodes.nodes {
        assert!(
            node.containerd_restarts(started).is_empty(),
            "{}: containerd restarted for a downgrade",
            node.name
        );
        let (_, exe) = serve_http(&s, node).await;
        assert!(
            exe.contains(&format!("/versions/wasmtime/{CATALOG_VERSION}-")),
            "{}: the new pod runs {exe}",
            node.name
        );
    }

    s.delete_workloads_except(&[]).await;
    s.delete().await;
}
