//! Disruptions in the middle of an install: the installer killed, containerd and the kubelet
//! restarted. The journal in the installer's state file lets the next run finish or undo the
//! change, and the node converges, with nothing of the cut-short write left behind.

use std::cell::RefCell;
use std::time::Duration;

use crate::install::crun;
use crate::scenario::{NODE_TIMEOUT, STATE_DIR, Scenario};
use crate::support::poll;
use crate::support::real_nodes::RealNode;

/// Whether the node's installer has journaled a containerd configuration change that it has
/// not finished yet.
fn change_in_flight(node: &RealNode) -> bool {
    node.read(&format!("{STATE_DIR}/state.json"))
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .is_some_and(|state| state.get("config").is_some_and(|c| !c.is_null()))
}

#[tokio::test]
async fn killing_the_installer_or_restarting_containerd_and_the_kubelet_mid_install_converges() {
    let s = Scenario::start("disruption").await;
    s.apply(crun()).await;

    // The rollout installs node by node: the first node to journal its change loses its
    // installer process (SIGKILL: the container restarts in the same pod); the second node gets
    // containerd and the kubelet restarted under the running installer.
    let disrupted: RefCell<Vec<String>> = RefCell::new(Vec::new());
    poll::until(
        "both nodes disrupted in the middle of their change",
        NODE_TIMEOUT,
        || {
            let nodes = &s.nodes.nodes;
            let disrupted = &disrupted;
            async move {
                let mut disrupted = disrupted.borrow_mut();
                for node in nodes {
                    if disrupted.contains(&node.name) || !change_in_flight(node) {
                        continue;
                    }
                    if disrupted.is_empty() {
                        node.run(&["pkill", "-KILL", "-f", "containerd-shim-installer daemon"]);
                    } else {
                        node.run(&["systemctl", "restart", "containerd", "kubelet"]);
                    }
                    disrupted.push(node.name.clone());
                }
                if disrupted.len() == nodes.len() {
                    Ok(())
                } else {
                    Err(format!("disrupted so far: {disrupted:?}"))
                }
            }
        },
    )
    .await;

    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    for node in &s.nodes.nodes {
        poll::until(
            &format!("{}: no change left in flight", node.name),
            Duration::from_secs(60),
            || async {
                if change_in_flight(node) {
                    Err("journal still open")
                } else {
                    Ok(())
                }
            },
        )
        .await;
        // A write the kill cut short left a temporary file beside its target; the next run
        // removed it.
        let leftovers: Vec<String> = ["/etc/containerd", STATE_DIR]
            .into_iter()
            .flat_map(|dir| {
                node.tree(dir)
                    .into_keys()
                    .map(move |file| format!("{dir}/{file}"))
            })
            .filter(|file| file.contains(".tmp-"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{}: left behind: {leftovers:?}",
            node.name
        );
        let pod = s.run_pod(node, Some("crun"), "sleep 3600").await;
        assert!(!s.container_id(&pod).await.is_empty());
    }
    s.delete_workloads_except(&[]).await;
    s.delete().await;
}
