//! The readiness label follows the handler: containerd's original configuration written back
//! and containerd restarted (the handler gone) withdraws the node's label at once, not at the
//! installer's next check period; the installer repairs, verifies and labels again, and a pod of
//! the class created in between is not started on that node before the label is back.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::install::crun;
use crate::scenario::{LABEL_PREFIX, NODE_TIMEOUT, Scenario};
use crate::support::poll;
use crate::support::real_nodes::now_us;

/// Well below the installer's check period (60 s): only a watch makes it.
const PROMPT: Duration = Duration::from_secs(20);

async fn labelled(nodes: &Api<Node>, node: &str, key: &str) -> Result<bool, String> {
    let node = nodes.get(node).await.map_err(|e| e.to_string())?;
    Ok(node.labels().contains_key(key))
}

#[tokio::test]
async fn a_handler_gone_from_containerd_takes_the_label_until_it_is_repaired() {
    let s = Scenario::start("drift").await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    let node = s.nodes.with_containerd(1);
    let key = format!("{LABEL_PREFIX}crun");
    let nodes: Api<Node> = Api::all(s.c.shoot.clone());
    let original = node.containerd_config();
    assert!(
        original.contains_key("config.toml.containerd-shim.bak"),
        "{:?}",
        original.keys().collect::<Vec<_>>()
    );

    // As an operator would: the original file back, containerd restarted.
    let drifted_at = now_us();
    node.run(&[
        "sh",
        "-c",
        "cp /etc/containerd/config.toml.containerd-shim.bak /etc/containerd/config.toml \
         && systemctl restart containerd",
    ]);
    poll::until("the label to go", PROMPT, || async {
        match labelled(&nodes, &node.name, &key).await? {
            false => Ok(()),
            true => Err(format!(
                "still labelled {} ms after the drift",
                (now_us() - drifted_at) / 1000
            )),
        }
    })
    .await;

    // A pod of the class for that node, created while the label is away.
    let spec = json!({
        "runtimeClassName": "crun",
        "containers": [{"name": "main", "image": s.nodes.image("WORKLOAD_IMAGE"),
                        "command": ["sh", "-c", "sleep 3600"]}]
    });
    let pod = s.create_pod(node, "window", spec).await;
    let window_open = !labelled(&nodes, &node.name, &key).await.expect("read node");

    let back = poll::until("the label to come back", NODE_TIMEOUT, || async {
        match labelled(&nodes, &node.name, &key).await? {
            true => Ok(jiff::Timestamp::now()),
            false => Err("not yet".to_string()),
        }
    })
    .await;
    s.wait_pod_running(&pod).await;
    let pods: Api<Pod> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    let scheduled = pods
        .get(&pod)
        .await
        .expect("get pod")
        .status
        .and_then(|st| st.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .expect("the pod is scheduled");
    if window_open {
        // Conditions have seconds; the label was seen back at most a poll after it came.
        assert!(
            scheduled.0.as_second() + 1 >= back.as_second(),
            "the pod was bound at {} while the label was away (back at {back})",
            scheduled.0
        );
    }
    assert!(
        window_open,
        "the label was back before the pod was created: the window was not observed"
    );
    // Repaired: our runtime is in containerd's configuration again.
    let repaired = String::from_utf8_lossy(&node.containerd_config()["config.toml"]).into_owned();
    assert!(repaired.contains("runtimes.crun"), "{repaired}");

    // The pod of the class goes first: the shim's files stay while it runs.
    s.delete_workloads_except(&[]).await;
    s.delete().await;
}
