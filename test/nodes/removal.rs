//! Taking a shim away, and deleting the Extension: the label goes before containerd restarts,
//! the configuration is given back byte for byte, the binaries go once no pod needs them, and
//! only then does the bundle go.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DeleteParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use gardener_extension_containerd_shim::gardener::api::ManagedResource;

use crate::install::crun;
use crate::scenario::{LABEL_PREFIX, NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use crate::support::real_nodes::now_us;
use crate::support::{gardenlet, poll};

/// crun, and a second crun shim beside it (its own handler and RuntimeClass).
fn crun_and_crun_b() -> serde_json::Value {
    json!([
        {"name": "crun", "options": {"SystemdCgroup": false}},
        {"name": "crun-b", "catalog": {"name": "crun"}, "options": {"SystemdCgroup": false},
         "runtimeClass": {"name": "crun-b", "handler": "crun-b"}}
    ])
}

/// When each node's label of a handler disappeared, as a watch of the Nodes saw it.
#[derive(Clone, Default)]
struct LabelGone(Arc<Mutex<Vec<(String, u64)>>>);

impl LabelGone {
    fn watch(s: &Scenario, key: String) -> (LabelGone, tokio::task::JoinHandle<()>) {
        let seen = LabelGone::default();
        let record = seen.clone();
        let nodes: Api<Node> = Api::all(s.c.shoot.clone());
        let task = tokio::spawn(async move {
            let mut had = std::collections::BTreeSet::new();
            let mut events = watcher(nodes, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                let (watcher::Event::Apply(node) | watcher::Event::InitApply(node)) = event else {
                    continue;
                };
                let name = node.name_any();
                if node.labels().contains_key(&key) {
                    had.insert(name);
                } else if had.remove(&name) {
                    let at = SystemTime::now()
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map(|d| d.as_micros() as u64)
                        .unwrap_or_default();
                    if let Ok(mut seen) = record.0.lock() {
                        seen.push((name, at));
                    }
                }
            }
        });
        (seen, task)
    }

    fn at(&self, node: &str) -> Option<u64> {
        self.0
            .lock()
            .ok()
            .and_then(|seen| seen.iter().find(|(n, _)| n == node).map(|(_, at)| *at))
    }
}

/// Removing one of two shims: its label goes before containerd restarts, the configuration
/// becomes what it was with the other shim alone (byte for byte), its RuntimeClass goes. A pod
/// of the removed class keeps running, and the shim's files stay while it does (containerd
/// needs crun to stop it); once the pod is deleted, the files go too.
#[tokio::test]
async fn removing_a_shim_takes_its_label_first_and_gives_the_configuration_back() {
    let s = Scenario::start("remove-shim").await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    let crun_only: Vec<_> = s.nodes.containerd_configs();

    s.apply(crun_and_crun_b()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun-b").await;
    let node = &s.nodes.nodes[0];
    let pod = s
        .run_pod(node, Some("crun-b"), "while true; do sleep 1; done")
        .await;
    let id = s.container_id(&pod).await;

    let (gone, watch) = LabelGone::watch(&s, format!("{LABEL_PREFIX}crun-b"));
    let started = now_us();
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    crate::support::bundles::wait_runtime_class_gone(&s.c.shoot, "crun-b").await;

    for (n, before) in s.nodes.nodes.iter().zip(&crun_only) {
        assert_eq!(
            &n.containerd_config(),
            before,
            "{}: the configuration is not what it was with crun alone",
            n.name
        );
        let restarts = n.containerd_restarts(started);
        assert_eq!(restarts.len(), 1, "{}: {restarts:?}", n.name);
        let label_gone = poll::until(
            &format!("the crun-b label of {} to go", n.name),
            poll::DEFAULT_TIMEOUT,
            || async { gone.at(&n.name).ok_or("not yet") },
        )
        .await;
        assert!(
            label_gone < restarts[0].stopping_us,
            "{}: the label went at {label_gone}, after containerd stopped at {}",
            n.name,
            restarts[0].stopping_us
        );
    }
    watch.abort();

    // The pod of the removed class still runs under crun; its files are kept for it...
    s.wait_pod_running(&pod).await;
    assert_eq!(s.container_id(&pod).await, id);
    assert!(node.exists(&format!("{STATE_DIR}/current/crun-b/bin/crun")));
    let other = &s.nodes.nodes[1];
    poll::until(
        "crun-b's files to go where no pod needs them",
        NODE_TIMEOUT,
        || async {
            if other.exists(&format!("{STATE_DIR}/current/crun-b"))
                || other.exists(&format!("{STATE_DIR}/versions/crun-b"))
            {
                Err("still there")
            } else {
                Ok(())
            }
        },
    )
    .await;

    // ...until it is deleted, which works (containerd still finds crun to stop it).
    let pods: Api<Pod> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    pods.delete(&pod, &DeleteParams::default())
        .await
        .expect("delete pod");
    poll::until(
        "the pod of the removed class to be gone",
        NODE_TIMEOUT,
        || async {
            match pods.get_opt(&pod).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(p) => Err(format!("{:?}", p.status.and_then(|s| s.phase))),
            }
        },
    )
    .await;
    poll::until(
        "crun-b's files to go once its pod is gone",
        NODE_TIMEOUT,
        || async {
            if node.exists(&format!("{STATE_DIR}/current/crun-b"))
                || node.exists(&format!("{STATE_DIR}/versions/crun-b"))
            {
                Err("still there")
            } else {
                Ok(())
            }
        },
    )
    .await;

    s.delete().await;
}

/// Deleting the Extension uninstalls from both nodes first; the ManagedResource goes only after
/// every node is clean.
#[tokio::test]
async fn deleting_the_extension_cleans_every_node_before_the_bundle_goes() {
    let s = Scenario::start("delete").await;
    let originals = s.nodes.containerd_configs();
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;

    gardenlet::delete(&s.extensions, crate::scenario::EXTENSION).await;
    let bundles: Api<ManagedResource> = Api::namespaced(s.c.seed.clone(), &s.namespace);
    poll::until("the ManagedResource to go", NODE_TIMEOUT, || async {
        let bundle = bundles
            .get_opt("extension-containerd-shim")
            .await
            .map_err(|e| e.to_string())?;
        if bundle.is_some() {
            return Err("still there".to_string());
        }
        Ok(())
    })
    .await;
    // It went: the nodes must have been clean by then.
    for (node, original) in s.nodes.nodes.iter().zip(&originals) {
        assert_clean(&s.c, node).await;
        assert_eq!(&node.containerd_config(), original, "{}", node.name);
    }
    gardenlet::wait_deleted_within(&s.extensions, crate::scenario::EXTENSION, NODE_TIMEOUT).await;
}
