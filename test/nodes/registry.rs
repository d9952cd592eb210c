//! The images come from a registry: the nodes' containerd pulls the installer and the payload
//! from the control plane's registry (TLS, trusted through the node's `certs.d` hosts file), by
//! digest. A registry outage during an install only delays it: the nodes keep serving what they
//! run, and the install completes once the registry is back.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;

use crate::install::crun;
use crate::scenario::{NODE_TIMEOUT, Scenario, assert_clean};
use crate::support::poll;
use crate::support::real_nodes::now_us;

/// Why a kubelet did not start a container whose image it could not pull.
const PULL_FAILURES: [&str; 2] = ["ErrImagePull", "ImagePullBackOff"];

const CRUN_BINARY: &str = "/var/lib/containerd-shim-installer/current/crun/bin/crun";

#[tokio::test]
async fn the_installer_comes_from_the_registry_and_an_outage_only_delays_the_install() {
    let s = Scenario::start("registry").await;
    let registry = s.nodes.registry.clone();
    let installer = s.nodes.image("INSTALLER_IMAGE").to_string();
    let payload = s.nodes.image("CRUN_PAYLOAD_IMAGE").to_string();
    for image in [&installer, &payload] {
        assert!(
            image.starts_with(&format!("{}/", registry.address)) && image.contains("@sha256:"),
            "{image} is not pinned by digest in the registry {}",
            registry.address
        );
    }

    // Pods the nodes serve before the install.
    let mut ordinary = Vec::new();
    for node in &s.nodes.nodes {
        let pod = s.run_pod(node, None, "while true; do sleep 1; done").await;
        ordinary.push((pod.clone(), s.container_id(&pod).await));
    }
    // Earlier tests left the installer and the payload in the nodes' image stores: without
    // them, the install has to pull both.
    for node in &s.nodes.nodes {
        node.remove_image(&installer);
        node.remove_image(&payload);
    }
    let configs: Vec<_> = s
        .nodes
        .nodes
        .iter()
        .map(|n| n.containerd_config())
        .collect();

    let outage = registry.stop();
    let started = now_us();
    s.apply(crun()).await;

    // Every node's installer pod is stuck on its image.
    let pods: Api<Pod> = Api::namespaced(s.c.shoot.clone(), "kube-system");
    poll::until(
        "every node's installer pod failing to pull its image",
        NODE_TIMEOUT,
        || async {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels("app.kubernetes.io/name=containerd-shim-installer"),
                )
                .await
                .map_err(|e| e.to_string())?;
            let mut seen = Vec::new();
            let mut stuck = Vec::new();
            for pod in &list {
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                // The pod pulls the installer as the image vector names it: by digest.
                let spec_image = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.init_containers.as_ref())
                    .and_then(|c| c.iter().find(|c| c.name == "copy-installer"))
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                if spec_image != installer {
                    return Err(format!("{node}: copy-installer runs {spec_image:?}"));
                }
                let status = pod.status.clone().unwrap_or_default();
                for c in status
                    .init_container_statuses
                    .unwrap_or_default()
                    .into_iter()
                    .chain(status.container_statuses.unwrap_or_default())
                {
                    if let Some(waiting) = c.state.and_then(|s| s.waiting) {
                        let reason = waiting.reason.unwrap_or_default();
                        seen.push(format!(
                            "{node}/{}: {reason} {}",
                            c.name,
                            waiting.message.unwrap_or_default()
                        ));
                        if PULL_FAILURES.contains(&reason.as_str()) && c.name == "copy-installer" {
                            stuck.push(node.clone());
                        }
                    }
                }
            }
            if s.nodes.nodes.iter().all(|n| stuck.contains(&n.name)) {
                Ok(())
            } else {
                Err(format!("stuck on the installer image: {stuck:?}; {seen:?}"))
            }
        },
    )
    .await;

    // Meanwhile the nodes serve on: Ready, the pods that ran run on in the same containers,
    // containerd was neither changed nor restarted, and a pod whose image is on the node starts.
    let nodes: Api<Node> = Api::all(s.c.shoot.clone());
    for ((node, (pod, id)), config) in s.nodes.nodes.iter().zip(&ordinary).zip(&configs) {
        let ready = nodes
            .get(&node.name)
            .await
            .expect("get node")
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "{} is not Ready during the outage", node.name);
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{}: restarted", node.name);
        assert!(node.oci_containers("runc").contains(id), "{}", node.name);
        assert_eq!(&node.containerd_config(), config, "{}", node.name);
        assert!(
            node.containerd_restarts(started).is_empty(),
            "{}: containerd restarted without the installer",
            node.name
        );
        s.run_pod(node, None, "sleep 3600").await;
    }

    // The registry is back: the kubelets' next pull attempt succeeds and the install completes.
    let log_before = registry.log().len();
    outage.end();
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;

    // The nodes pulled the installer and the payload's image index from the registry, by
    // digest, after it came back.
    let log = registry.log();
    let after = &log[log_before..];
    for image in [&installer, &payload] {
        let (_, digest) = image.split_once('@').expect("a digest reference");
        let request = format!(
            "\"GET /v2/{}/manifests/{digest} ",
            registry.repository(image)
        );
        assert!(
            after.contains(&request),
            "the registry logged no {request} after the outage:\n{after}"
        );
        for node in &s.nodes.nodes {
            assert!(node.has_image(image), "{}: no {image}", node.name);
        }
    }

    // The installed runtime runs pods, and the pods of before the outage still run.
    for node in &s.nodes.nodes {
        let pod = s
            .run_pod(node, Some("crun"), "echo running under crun; sleep 3600")
            .await;
        let id = s.container_id(&pod).await;
        assert!(
            node.oci_containers(CRUN_BINARY).contains(&id),
            "{}: crun does not list {id}",
            node.name
        );
    }
    for ((pod, id), node) in ordinary.iter().zip(&s.nodes.nodes) {
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{}: restarted", node.name);
    }

    s.delete_workloads_except(&[]).await;
    s.delete().await;
    for node in &s.nodes.nodes {
        assert_clean(&s.c, node).await;
    }
}
