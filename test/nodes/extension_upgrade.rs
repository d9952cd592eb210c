//! The extension's own upgrade on real nodes: the previous release (hack/previous-release.env,
//! built from its own sources by hack/nodes/previous-release.sh) installs crun on every node with
//! its controller and its installer image, and writes the desired set in its schema. Then its
//! controller is stopped and this build's starts, as a rolled controller Deployment does, and
//! gardenlet reconciles the shoot.
//!
//! What a shoot owner must see: every node converges to this build's installer and desired-set
//! schema without restarting containerd (nothing a runtime reads changed), the pods that ran under
//! crun keep running and new ones start, and nothing of the old layout is left: the shoot's
//! objects, containerd's configuration, the installer's files and the node labels are those a
//! fresh install of this build makes, which the test then does to compare.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use serde_json::Value;

use gardener_extension_containerd_shim::desired_shims::{
    CONFIG_MAP_KEY, OLDEST_READ_SCHEMA, SCHEMA,
};

use crate::install::{crun, run_pod_under_crun};
use crate::scenario::{Build, LABEL_PREFIX, NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use crate::support::bundles::objects_with_origin;
use crate::support::poll;
use crate::support::real_nodes::now_us;

/// The schema of the desired set the pool's installer DaemonSet reads, from the ConfigMap its
/// pod template mounts.
async fn desired_set_schema(s: &Scenario) -> u64 {
    let daemon_sets: Api<DaemonSet> = Api::namespaced(s.c.shoot.clone(), "kube-system");
    let config_maps: Api<ConfigMap> = Api::namespaced(s.c.shoot.clone(), "kube-system");
    let name = format!("containerd-shim-installer-{}", s.nodes.pool);
    let ds = daemon_sets
        .get(&name)
        .await
        .expect("get the installer DaemonSet");
    let config_map = ds
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.volumes)
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "desired")
        .and_then(|v| v.config_map.map(|c| c.name))
        .unwrap_or_else(|| panic!("{name} mounts no desired-set ConfigMap"));
    let data = config_maps
        .get(&config_map)
        .await
        .expect("get the desired-set ConfigMap")
        .data
        .unwrap_or_default();
    let document: Value = serde_json::from_str(
        data.get(CONFIG_MAP_KEY)
            .unwrap_or_else(|| panic!("{config_map} has no {CONFIG_MAP_KEY}")),
    )
    .expect("the desired set is JSON");
    document["schema"]
        .as_u64()
        .unwrap_or_else(|| panic!("{config_map}: no schema in {document}"))
}

/// Waits until every installer pod, not only the ones of the current desired set, runs this
/// image: nothing of the previous release's DaemonSet is left running.
async fn wait_only_installer_image(s: &Scenario, image: &str) {
    poll::until(
        &format!("every installer pod to run {image}"),
        NODE_TIMEOUT,
        || async {
            let pods = s.list_installer_pods().await?;
            let images: BTreeSet<String> = pods.iter().flat_map(pod_images).collect();
            if !pods.is_empty() && images.len() == 1 && images.contains(image) {
                Ok(())
            } else {
                Err(format!("{} pods with {images:?}", pods.len()))
            }
        },
    )
    .await;
}

fn pod_images(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect()
}

/// What a node shows of the extension: containerd's configuration files, the names of the
/// installer's files, and our labels on the Node.
#[derive(Debug, PartialEq)]
struct NodeLayout {
    containerd: BTreeMap<String, String>,
    files: BTreeSet<String>,
    labels: BTreeMap<String, String>,
}

async fn layouts(s: &Scenario) -> BTreeMap<String, NodeLayout> {
    let labels = s.node_labels().await;
    s.nodes
        .nodes
        .iter()
        .map(|node| {
            let layout = NodeLayout {
                containerd: node
                    .containerd_config()
                    .into_iter()
                    .map(|(f, c)| (f, String::from_utf8_lossy(&c).into_owned()))
                    .collect(),
                files: node.tree(STATE_DIR).into_keys().collect(),
                labels: labels
                    .get(&node.name)
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| k.starts_with(LABEL_PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            (node.name.clone(), layout)
        })
        .collect()
}

async fn shoot_objects(s: &Scenario) -> Vec<String> {
    objects_with_origin(&s.c.shoot, &s.namespace, "extension-containerd-shim")
        .await
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[tokio::test]
async fn the_current_build_takes_over_the_previous_releases_nodes_without_a_restart() {
    let mut s = Scenario::start("extension-upgrade").await;
    let previous = s.nodes.previous_release();
    let current_installer = s.nodes.image("INSTALLER_IMAGE").to_string();
    assert_ne!(
        previous.installer_image, current_installer,
        "the previous release ({}) must be another build than this one",
        previous.commit
    );

    // The previous release installs crun everywhere; a pod runs under it on every node.
    s.replace_controller(Build::Previous(&previous)).await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    wait_only_installer_image(&s, &previous.installer_image).await;
    // The schema policy (docs/operations.md): this build's installers read the previous
    // release's schema, N-1 at the oldest.
    let previous_schema = desired_set_schema(&s).await;
    assert!(
        (u64::from(OLDEST_READ_SCHEMA)..=u64::from(SCHEMA)).contains(&previous_schema),
        "the previous release ({}) writes schema {previous_schema}, which this build does not read",
        previous.commit
    );
    let mut running = Vec::new();
    for node in &s.nodes.nodes {
        running.push(run_pod_under_crun(&s, node).await);
    }

    // This build takes over: its controller starts and gardenlet reconciles the shoot.
    let switched = now_us();
    s.replace_controller(Build::Current).await;
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    wait_only_installer_image(&s, &current_installer).await;
    s.wait_verified_everywhere("crun").await;
    assert_eq!(desired_set_schema(&s).await, u64::from(SCHEMA));
    s.wait_healthy().await;

    for node in &s.nodes.nodes {
        let restarts = node.containerd_restarts(switched);
        assert!(
            restarts.is_empty(),
            "{}: containerd restarted in the upgrade, though no runtime changed: {restarts:?}",
            node.name
        );
    }
    // The pods of the previous release's crun run on, in the same containers; new ones start.
    for (pod, id) in &running {
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{pod} was restarted");
    }
    for node in &s.nodes.nodes {
        running.push(run_pod_under_crun(&s, node).await);
    }
    let upgraded = layouts(&s).await;
    let upgraded_objects = shoot_objects(&s).await;

    // A fresh install of this build: the upgraded nodes and shoot must look the same.
    s.delete_workloads_except(&[]).await;
    s.delete().await;
    for node in &s.nodes.nodes {
        assert_clean(&s.c, node).await;
    }
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    let fresh = layouts(&s).await;
    for (node, layout) in &upgraded {
        assert_eq!(
            Some(layout),
            fresh.get(node),
            "{node}: after the upgrade (left) and after a fresh install (right)"
        );
    }
    assert_eq!(
        upgraded_objects,
        shoot_objects(&s).await,
        "the shoot's objects after the upgrade (left) and after a fresh install (right)"
    );
    s.delete().await;
}
