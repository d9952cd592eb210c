//! A change reaches the nodes only through the DaemonSet rollout: one node at a time, and a
//! node where it fails stops it.

use std::time::Duration;

use serde_json::json;

use crate::install::crun;
use crate::scenario::{NODE_TIMEOUT, Scenario};
use crate::support::poll;
use crate::support::real_nodes::now_us;

/// A changed shim option restarts containerd on one node at a time (the restarts in the
/// nodes' journals never overlap), and the DaemonSet replaces the second node's pod only
/// after the first node's new pod is Ready.
#[tokio::test]
async fn a_changed_option_rolls_out_node_by_node() {
    let s = Scenario::start("rollout").await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    let before = s.current_desired_sha256().await;

    let started = now_us();
    s.apply(json!([{"name": "crun", "options": {"SystemdCgroup": false},
                    "podAnnotations": ["example.com/trace"]}]))
        .await;
    let after = s.current_desired_sha256().await;
    assert_ne!(before, after, "the desired set did not change");
    s.wait_rolled_out().await;

    // Each node restarted containerd once for the change, never two at the same time.
    let restarts: Vec<_> = s
        .nodes
        .nodes
        .iter()
        .map(|n| {
            let r = n.containerd_restarts(started);
            assert_eq!(r.len(), 1, "{}: restarts {r:?}", n.name);
            (n.name.clone(), r[0])
        })
        .collect();
    for (i, (a, first)) in restarts.iter().enumerate() {
        for (b, second) in &restarts[i + 1..] {
            assert!(
                !first.overlaps(second),
                "containerd restarted on {a} and {b} at once: {restarts:?}"
            );
        }
    }
    // The DaemonSet rolled node by node: each new pod was created only after the one before
    // it was Ready.
    let mut pods: Vec<_> = s
        .installer_pods()
        .await
        .into_iter()
        .filter(|p| p.desired_sha256 == after)
        .collect();
    pods.sort_by_key(|p| p.created);
    assert_eq!(pods.len(), s.nodes.nodes.len(), "{pods:?}");
    for pair in pods.windows(2) {
        let earlier_ready = pair[0].ready_since.expect("the earlier new pod is Ready");
        // Timestamps of the API are whole seconds.
        assert!(
            pair[1].created.as_second() >= earlier_ready.as_second(),
            "{}'s pod was created before {}'s was Ready: {pods:?}",
            pair[1].node,
            pair[0].node
        );
    }
    // Each node's containerd restart falls into its own pod's lifetime, in the same order.
    let order: Vec<&str> = pods.iter().map(|p| p.node.as_str()).collect();
    let mut by_restart = restarts.clone();
    by_restart.sort_by_key(|(_, r)| r.stopping_us);
    assert_eq!(
        by_restart
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        order,
        "containerd restarted in another order than the pods were replaced"
    );

    s.delete().await;
}

/// A shim that cannot run on these nodes (its binary is for another architecture): the first
/// node that gets the new set fails verification, rolls back and stays Ready with its pods; the
/// rollout stops there, so the other node never restarts containerd; the Extension's health
/// names the shim and the node.
#[tokio::test]
async fn a_shim_that_cannot_run_stops_at_the_first_node() {
    let s = Scenario::start("bad-shim").await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    let mut workloads = Vec::new();
    for node in &s.nodes.nodes {
        let pod = s.run_pod(node, None, "sleep 3600").await;
        let id = s.container_id(&pod).await;
        workloads.push((node.clone(), pod, id));
    }
    let configs = s.nodes.containerd_configs();

    let started = now_us();
    let broken = s.nodes.image("BROKEN_PAYLOAD_IMAGE").to_string();
    s.apply(json!([
        {"name": "crun", "options": {"SystemdCgroup": false}},
        {"name": "broken", "custom": {
            "runtimeType": "io.containerd.broken.v1", "version": "v1",
            "binaries": [{"name": "containerd-shim-broken-v1",
                          "image": {"ref": broken, "path": "/payload/containerd-shim-broken-v1"}}]}}
    ]))
    .await;

    let message = s
        .wait_health("to name the failed shim", |m| m.contains("broken on node-"))
        .await;
    let failed_name = s
        .nodes
        .nodes
        .iter()
        .find(|n| message.contains(&format!("broken on {}:", n.name)))
        .map(|n| n.name.clone())
        .unwrap_or_else(|| panic!("no node named in {message:?}"));
    assert!(
        message.contains("pod sandbox"),
        "the failure says what went wrong: {message}"
    );
    let nodes = s.nodes.nodes.len();
    let counts = format!(
        "broken: 0/{nodes} nodes verified, {} pending, 1 failed",
        nodes - 1
    );
    assert!(
        message.contains(&counts),
        "the counts show the rollout's state ({counts}): {message}"
    );

    // The rollout stopped: only the failed node has a pod of the new set, and it is not Ready.
    // Watched for a while, the other node keeps its old pod and never restarts containerd.
    let new_set = s.current_desired_sha256().await;
    poll::stays(
        "the rollout halted at the failed node",
        Duration::from_secs(20),
        || async {
            let pods = s.installer_pods().await;
            for pod in pods.iter().filter(|p| p.desired_sha256 == new_set) {
                if pod.node != failed_name || pod.ready_since.is_some() {
                    return Err(format!("{pod:?}"));
                }
            }
            for node in s.nodes.nodes.iter().filter(|n| n.name != failed_name) {
                let restarts = node.containerd_restarts(started);
                if !restarts.is_empty() {
                    return Err(format!("{} restarted containerd: {restarts:?}", node.name));
                }
            }
            Ok(())
        },
    )
    .await;

    for ((node, pod, id), before) in workloads.iter().zip(&configs) {
        // Rolled back: the failed node's configuration is what it was, and it is Ready.
        assert_eq!(
            &node.containerd_config(),
            before,
            "{}: the configuration was not rolled back",
            node.name
        );
        if node.name == failed_name {
            let restarts = node.containerd_restarts(started);
            assert_eq!(restarts.len(), 2, "change and rollback: {restarts:?}");
        }
        s.wait_pod_running(pod).await;
        assert_eq!(
            &s.container_id(pod).await,
            id,
            "{}: the pod was restarted",
            node.name
        );
    }
    let labels = s.node_labels().await;
    assert!(
        labels[&failed_name]
            .get("containerd-shim.extensions.gardener.cloud/crun")
            .is_some_and(|v| v == "ready"),
        "the failed node keeps serving crun: {:?}",
        labels[&failed_name]
    );

    // Back to a set that works: the rollout resumes and the failure is gone.
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_health("without failures", |m| !m.contains("failed"))
        .await;
    s.delete().await;
    let _ = NODE_TIMEOUT;
}
