//! A removed shim whose files stay for a running pod goes as soon as that pod is gone: the
//! stopped sandbox the deleted pod leaves in the CRI does not count, and the node does not wait
//! for its next check period (60 s) to look again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use crate::install::crun;
use crate::scenario::{NODE_TIMEOUT, STATE_DIR, Scenario};
use crate::support::poll;

/// Well below the installer's check period (60 s), above a CRI call's and a kubelet's
/// reaction to a deleted pod on two shared cores.
const PROMPT: Duration = Duration::from_secs(20);

fn crun_and_crun_b() -> serde_json::Value {
    json!([
        {"name": "crun", "options": {"SystemdCgroup": false}},
        {"name": "crun-b", "catalog": {"name": "crun"}, "options": {"SystemdCgroup": false},
         "runtimeClass": {"name": "crun-b", "handler": "crun-b"}}
    ])
}

#[tokio::test]
async fn a_removal_follows_the_last_pod_of_its_handler_without_waiting_a_period() {
    let s = Scenario::start("prompt-removal").await;
    s.apply(crun_and_crun_b()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun-b").await;
    let node = &s.nodes.nodes[0];
    // Ends at once on SIGTERM, so that deleting it does not wait for a grace period either.
    let pod = s
        .run_pod(
            node,
            Some("crun-b"),
            "trap 'exit 0' TERM; while true; do sleep 1; done",
        )
        .await;
    s.wait_pod_running(&pod).await;

    s.apply(crun()).await;
    s.wait_rolled_out().await;
    let files = format!("{STATE_DIR}/versions/crun-b");
    assert!(
        node.exists(&files),
        "crun-b's files went while its pod runs"
    );

    let pods: Api<Pod> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    pods.delete(&pod, &DeleteParams::default())
        .await
        .expect("delete pod");
    poll::until("the pod to be gone", NODE_TIMEOUT, || async {
        match pods.get_opt(&pod).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("{:?}", p.status.and_then(|s| s.phase))),
        }
    })
    .await;
    let gone_at = Instant::now();
    poll::until(
        "crun-b's files to go after its last pod",
        NODE_TIMEOUT,
        || async {
            if node.exists(&files) || node.exists(&format!("{STATE_DIR}/current/crun-b")) {
                Err("still there")
            } else {
                Ok(())
            }
        },
    )
    .await;
    let took = gone_at.elapsed();
    assert!(
        took < PROMPT,
        "crun-b's files went {took:?} after its pod, not within {PROMPT:?}"
    );

    s.delete().await;
}
