//! Stand-ins for what a real shoot has and the control plane lacks: Nodes, a scheduler and
//! kubelets. The simulator binds the installer DaemonSet's pods to their nodes and reports them
//! Ready — the channel through which real installers report a verified (or, when uninstalling,
//! clean) node — when the test allows it; it also finishes pod deletions as a kubelet would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Label on every Node a test creates, so leftovers can be found and removed.
pub const TEST_NODE_LABEL: &str = "test.containerd-shim.gardener.cloud/simulated";

/// Creates Ready nodes of a worker pool.
pub async fn create_nodes(shoot: &Client, names: &[String], pool: &str) {
    let api: Api<Node> = Api::all(shoot.clone());
    for name in names {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([
                    ("worker.gardener.cloud/pool".to_string(), pool.to_string()),
                    ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                    (TEST_NODE_LABEL.to_string(), "true".to_string()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("create node {name}: {e}"));
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "simulated", "lastHeartbeatTime": jiff::Timestamp::now().to_string(),
            "lastTransitionTime": jiff::Timestamp::now().to_string()}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("mark node {name} ready: {e}"));
    }
}

/// Deletes every simulated node (of this and earlier tests).
pub async fn delete_simulated_nodes(shoot: &Client) {
    let api: Api<Node> = Api::all(shoot.clone());
    let nodes = api
        .list(&ListParams::default().labels(&format!("{TEST_NODE_LABEL}=true")))
        .await
        .unwrap_or_else(|e| panic!("list nodes: {e}"));
    for n in nodes {
        let _ = api.delete(&n.name_any(), &DeleteParams::default()).await;
    }
}

/// What a real cluster's pod garbage collector does and the control plane's does not (it runs
/// none): deletes, without a grace period, every pod bound to a Node that no longer exists. Such
/// a pod appears when a DaemonSet is created while a simulated node is being deleted; with no
/// kubelet to confirm its deletion it would stay Terminating and hold the DaemonSet's
/// foreground deletion forever.
pub async fn delete_orphaned_pods(shoot: &Client) {
    let nodes: Vec<String> = Api::<Node>::all(shoot.clone())
        .list_metadata(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list nodes: {e}"))
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    let pods = Api::<Pod>::all(shoot.clone())
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list pods: {e}"));
    for pod in pods {
        let orphaned = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|node| !nodes.contains(node));
        if !orphaned {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(shoot.clone(), &pod.namespace().unwrap_or_default());
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &now).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting the orphaned pod {}: {e}", pod.name_any()),
        }
    }
}

/// A running scheduler-and-kubelet stand-in for the pods matching `selector` in `namespace`.
pub struct Simulator {
    /// While true, bound pods are reported Ready.
    pub ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The node a DaemonSet pod is meant for (the DaemonSet controller pins it with a
/// `metadata.name` field affinity and leaves binding to the scheduler).
fn target_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

pub fn start(shoot: Client, namespace: &str, selector: &str) -> Simulator {
    let ready = Arc::new(AtomicBool::new(true));
    let flag = ready.clone();
    let pods: Api<Pod> = Api::namespaced(shoot, namespace);
    let selector = selector.to_string();
    let task = tokio::spawn(async move {
        loop {
            if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                for pod in list {
                    let name = pod.name_any();
                    if pod.metadata.deletion_timestamp.is_some() {
                        let _ = pods
                            .delete(
                                &name,
                                &DeleteParams {
                                    grace_period_seconds: Some(0),
                                    ..Default::default()
                                },
                            )
                            .await;
                        continue;
                    }
                    let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                    if bound.is_none() {
                        if let Some(node) = target_node(&pod) {
                            let binding = Binding {
                                metadata: ObjectMeta {
                                    name: Some(name.clone()),
                                    ..Default::default()
                                },
                                target: ObjectReference {
                                    kind: Some("Node".into()),
                                    name: Some(node),
                                    ..Default::default()
                                },
                            };
                            let _ = pods
                                .create_subresource::<Binding, serde_json::Value>(
                                    "binding",
                                    &name,
                                    &PostParams::default(),
                                    &binding,
                                )
                                .await;
                        }
                        continue;
                    }
                    let is_ready = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    if flag.load(Ordering::SeqCst) && !is_ready {
                        let now = jiff::Timestamp::now().to_string();
                        let status = json!({"status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": now},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]}});
                        let _ = pods
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                            .await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Simulator { ready, task }
}
