//! A live shoot switched from `delivery: daemonset` to `osc` and back, on Gardener-shaped nodes
//! (containerd 1.7, config edited in place, and 2.x, the installer's drop-in). At every step a
//! new pod of the crun RuntimeClass starts on every node, and after each switch containerd
//! runs the other delivery's crun: the one gardener-node-agent put below
//! `/var/bin/containerruntimes/crun/`, or the installer's (on 1.7 once the agent has applied
//! the `op: remove`: until then either serves).

use crate::node_agent_scenario::{AGENT_TIMEOUT, AgentScenario, runtimes_path};
use crate::scenario::STATE_DIR;
use crate::support::osc::wait_applied;
use crate::support::poll;
use crate::support::real_nodes::{RealNode, now_us};

use super::osc_delivery::{apply_delivered_by, crun, delivered_binary, started, tear_down};

const INSTALLER_CRUN: &str = "/var/lib/containerd-shim-installer/current/crun/bin/crun";
const DROP_IN_DIR: &str = "/etc/containerd/conf.d";

/// The crun binary containerd runs for the `crun` handler, from its effective configuration.
fn effective_crun(node: &RealNode) -> Option<String> {
    let dump = node.run(&["containerd", "config", "dump"]);
    let doc: toml_edit::DocumentMut = dump.parse().ok()?;
    let mut item = doc.as_item();
    for key in runtimes_path(node)
        .into_iter()
        .chain(["crun", "options", "BinaryName"])
    {
        item = item.as_table_like()?.get(key)?;
    }
    item.as_str().map(str::to_string)
}

/// Waits until every node's containerd runs `binary` for crun.
async fn wait_serving(s: &AgentScenario, what: &str, binary: &str) {
    poll::until(
        &format!("every node's containerd runs {what}"),
        AGENT_TIMEOUT,
        || async {
            let others: Vec<(String, Option<String>)> = s
                .nodes
                .nodes
                .iter()
                .map(|n| (n.name.clone(), effective_crun(n)))
                .filter(|(_, b)| b.as_deref() != Some(binary))
                .collect();
            if others.is_empty() {
                Ok(())
            } else {
                Err(format!("{others:?}"))
            }
        },
    )
    .await;
}

/// A new pod of the class starts on every node (the kubelet retries a sandbox that failed in
/// a restart; a pod that never runs fails the test).
async fn pods_start(s: &AgentScenario) {
    for node in &s.nodes.nodes {
        s.run_pod(node, "crun").await;
    }
}

fn installer_drop_ins(node: &RealNode) -> Vec<String> {
    node.tree(DROP_IN_DIR)
        .into_keys()
        .filter(|path| path.contains("containerd-shim"))
        .collect()
}

#[tokio::test]
async fn a_live_shoot_switches_between_daemonset_and_osc_and_crun_keeps_starting_pods() {
    let (s, _controller, names) = started("switch-delivery").await;

    // The installers deliver crun.
    apply_delivered_by(&s, "daemonset", crun()).await;
    super::osc_delivery::wait_labelled(&s, "crun").await;
    wait_serving(&s, "the installer's crun", INSTALLER_CRUN).await;
    pods_start(&s).await;

    // To `osc`: the installers' crun serves until the agent applied the OSC, then the agent's;
    // the installers write nothing on 1.7 and remove their drop-in on 2.x (one restart).
    let switched = now_us();
    apply_delivered_by(&s, "osc", crun()).await;
    pods_start(&s).await;
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    let binary =
        delivered_binary(&osc).unwrap_or_else(|| panic!("no crun file in {:?}", osc.spec.files));
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    wait_serving(&s, "the agent's crun", &binary).await;
    super::osc_delivery::wait_labelled(&s, "crun").await;
    pods_start(&s).await;
    for node in &s.nodes.nodes {
        assert_eq!(
            installer_drop_ins(node),
            Vec::<String>::new(),
            "{}: the installer's drop-in stays",
            node.name
        );
        // The agent's restart, and on 2.x the installer's after removing its drop-in (the
        // effective configuration shows the agent's crun as soon as the file is gone, the
        // restart follows): waited for, then counted.
        let expected = if node.containerd_major() == 1 { 1 } else { 2 };
        let restarts = poll::until(
            &format!(
                "{}: {expected} containerd restart(s) since the switch",
                node.name
            ),
            AGENT_TIMEOUT,
            || async {
                let restarts = node.containerd_restarts(switched);
                if restarts.len() >= expected {
                    Ok(restarts)
                } else {
                    Err(format!("{restarts:?}"))
                }
            },
        )
        .await;
        assert_eq!(
            restarts.len(),
            expected,
            "{}: containerd restarts during the switch to osc: {restarts:?}",
            node.name
        );
    }
    // With the pods that started on them gone, the installers' files go too.
    s.delete_pods().await;
    poll::until(
        "the installers' files gone from every node",
        AGENT_TIMEOUT,
        || async {
            let left: Vec<&str> = s
                .nodes
                .nodes
                .iter()
                .filter(|n| n.exists(STATE_DIR) && !n.tree(STATE_DIR).is_empty())
                .map(|n| n.name.as_str())
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;

    // Back to `daemonset`: the installers take the agent's table over at once. On 1.7 the
    // agent may write its values back at one of its reconciles until it has the `op: remove`
    // (they serve the same shim, and the installer leaves them); the `op: remove` then takes
    // the table off, and the installer puts its own back. On 2.x the drop-in serves at once.
    apply_delivered_by(&s, "daemonset", crun()).await;
    pods_start(&s).await;
    let two = s.nodes.with_containerd(2);
    poll::until(
        "the installer's crun serves on the 2.x node",
        AGENT_TIMEOUT,
        || async {
            match effective_crun(two) {
                Some(binary) if binary == INSTALLER_CRUN => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    let ops = osc
        .spec
        .cri_config
        .as_ref()
        .and_then(|c| c.containerd.as_ref())
        .map(|c| c.plugins.iter().map(|p| p.op.clone()).collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(ops, vec![Some("remove".to_string())], "{:?}", osc.spec);
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    wait_serving(&s, "the installer's crun", INSTALLER_CRUN).await;
    super::osc_delivery::wait_labelled(&s, "crun").await;
    pods_start(&s).await;
    s.delete_pods().await;
    s.wait_nodes_ready().await;

    tear_down(&s).await;
}
