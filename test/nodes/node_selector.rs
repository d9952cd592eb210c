//! A shim's `nodeSelector` follows the node's labels while the installer runs: a node that gains
//! the selected label gets the shim, one that loses it gives it back, and the installer pod on
//! it is the same pod throughout (it watches its Node; no restart, no rollout).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::scenario::{LABEL_PREFIX, NODE_TIMEOUT, STATE_DIR, Scenario};
use crate::support::poll;
use crate::support::real_nodes::RealNode;

const SELECTED: &str = "example.com/containerd-shim-test";

async fn set_label(s: &Scenario, node: &RealNode, value: Option<&str>) {
    Api::<Node>::all(s.c.shoot.clone())
        .patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {SELECTED: value}}})),
        )
        .await
        .expect("label the node");
}

/// The installer pods by node: (uid, restarts of its containers).
async fn installer_pods(s: &Scenario) -> BTreeMap<String, (String, i32)> {
    s.list_installer_pods()
        .await
        .expect("list installer pods")
        .into_iter()
        .map(|pod| {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let restarts = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|c| c.iter().map(|c| c.restart_count).sum())
                .unwrap_or_default();
            (node, (pod.metadata.uid.unwrap_or_default(), restarts))
        })
        .collect()
}

/// Below the installer's check period (60 s): only its watch of the Node meets it.
const PROMPT: Duration = Duration::from_secs(40);

/// Waits (up to `within`) until exactly the nodes in `labelled` carry crun's readiness label
/// and have crun.
async fn wait_crun_on(s: &Scenario, labelled: &[&str], within: Duration) {
    let key = format!("{LABEL_PREFIX}crun");
    poll::until(
        &format!("crun verified on exactly {labelled:?}"),
        within,
        || async {
            let labels = s.node_labels().await;
            let ready: Vec<&str> = labels
                .iter()
                .filter(|(_, l)| l.get(&key).is_some_and(|v| v == "ready"))
                .map(|(n, _)| n.as_str())
                .collect();
            let installed: Vec<&str> = s
                .nodes
                .nodes
                .iter()
                .filter(|n| n.exists(&format!("{STATE_DIR}/current/crun")))
                .map(|n| n.name.as_str())
                .collect();
            if ready == labelled && installed == labelled {
                Ok(())
            } else {
                Err(format!("labelled {ready:?}, installed on {installed:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_node_that_gains_or_loses_the_selected_label_converges_without_a_restart() {
    let s = Scenario::start("node-selector").await;
    let node = &s.nodes.nodes[0];
    set_label(&s, node, None).await;
    s.apply(json!([{"name": "crun", "options": {"SystemdCgroup": false},
                    "nodeSelector": {SELECTED: "yes"}}]))
        .await;
    s.wait_rolled_out().await;
    wait_crun_on(&s, &[], NODE_TIMEOUT).await;
    let pods = installer_pods(&s).await;

    set_label(&s, node, Some("yes")).await;
    wait_crun_on(&s, &[node.name.as_str()], PROMPT).await;
    let config = node.containerd_config();
    assert!(
        config
            .values()
            .any(|text| String::from_utf8_lossy(text).contains(".runtimes.crun]")),
        "{}: crun is not in containerd's configuration",
        node.name
    );

    set_label(&s, node, None).await;
    wait_crun_on(&s, &[], PROMPT).await;
    let config = node.containerd_config();
    assert!(
        !config
            .values()
            .any(|text| String::from_utf8_lossy(text).contains(".runtimes.crun]")),
        "{}: crun is still in containerd's configuration",
        node.name
    );
    assert_eq!(
        installer_pods(&s).await,
        pods,
        "the installer pods were replaced or restarted"
    );

    s.delete().await;
}
