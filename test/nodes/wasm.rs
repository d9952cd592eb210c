//! WebAssembly for real: the catalog's `wasmtime` shim (our shim on runwasi's library with
//! Wasmtime, hack/images/payloads/wasm) installed through the extension on both containerd
//! versions runs WASI modules in pods, while ordinary pods on the same nodes keep running;
//! removing it leaves the nodes as they were. The payload is the catalog's own version, its
//! image built from source by hack/nodes/wasm-images.sh (the image-vector overwrite of
//! hack/nodes/images.sh points the catalog's image name at that build).

use serde_json::json;

use crate::scenario::{NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use crate::support::poll;
use crate::support::process::http_get_at;
use crate::support::real_nodes::RealNode;

const HELLO_LINE: &str = "hello from wasm on containerd-shim";
const HTTP_BODY: &str = "hello from wasm http on containerd-shim";

#[tokio::test]
async fn wasm_modules_run_under_the_installed_shim_on_both_containerd_versions() {
    let s = Scenario::start("wasm").await;
    let originals = s.nodes.containerd_configs();
    let mut ordinary = Vec::new();
    for node in &s.nodes.nodes {
        let pod = s.run_pod(node, None, "while true; do sleep 1; done").await;
        ordinary.push((pod.clone(), s.container_id(&pod).await));
    }

    s.apply(json!([{"name": "wasmtime"}])).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("wasmtime").await;

    // The catalog's default version is the payload built from source: its binary on each node
    // says so.
    let version = s.nodes.image("WASMTIME_PAYLOAD_VERSION").to_string();
    for node in &s.nodes.nodes {
        let shown = node.run(&[
            &format!("{STATE_DIR}/current/wasmtime/bin/containerd-shim-wasmtime-v1"),
            "-v",
        ]);
        assert!(
            shown.contains(&format!("Version: {version}")),
            "{}: {shown}",
            node.name
        );
    }

    for node in &s.nodes.nodes {
        // A module that prints a line and exits.
        let hello = s
            .create_pod(
                node,
                "wasm-hello",
                json!({"runtimeClassName": "wasmtime",
                       "containers": [{"name": "hello", "image": s.nodes.image("WASM_HELLO_IMAGE"),
                                       "imagePullPolicy": "IfNotPresent"}]}),
            )
            .await;
        s.wait_log_line(&hello, HELLO_LINE).await;

        // A module that serves HTTP.
        let http = start_http_module(&s, node).await;
        assert_http_answer(&s, &http, node).await;

        // The shim ran it: the container is in the shim's own container state (youki's root,
        // named after the shim; under the node's /run, so looked at from inside the node), not
        // in runc's.
        let id = s.container_id(&http).await;
        let state = format!("/run/containerd/wasmtime/k8s.io/{id}");
        assert!(
            node.exec(&["test", "-d", &state]).status.success(),
            "{}: {state} is missing: the wasmtime shim did not run {id}",
            node.name
        );
        assert!(!node.oci_containers("runc").contains(&id), "{}", node.name);
    }

    // The ordinary pods ran on throughout, under runc.
    for ((pod, id), node) in ordinary.iter().zip(&s.nodes.nodes) {
        s.wait_pod_running(pod).await;
        assert_eq!(&s.container_id(pod).await, id, "{}: restarted", node.name);
        assert!(node.oci_containers("runc").contains(id), "{}", node.name);
    }

    // Removing the shim (the Wasm pods go first: their sandboxes would keep its files)
    // leaves the nodes as they were.
    s.delete_workloads_except(&ordinary.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>())
        .await;
    s.delete().await;
    for (node, original) in s.nodes.nodes.iter().zip(&originals) {
        assert_clean(&s.c, node).await;
        assert_eq!(&node.containerd_config(), original, "{}", node.name);
    }
}

/// Starts the HTTP module under the wasmtime RuntimeClass on `node`; returns the pod's name once
/// it runs.
pub async fn start_http_module(s: &Scenario, node: &RealNode) -> String {
    let pod = s
        .create_pod(
            node,
            "wasm-http",
            json!({"runtimeClassName": "wasmtime",
                   "containers": [{"name": "http", "image": s.nodes.image("WASM_HTTP_IMAGE"),
                                   "imagePullPolicy": "IfNotPresent"}]}),
        )
        .await;
    s.wait_pod_running(&pod).await;
    pod
}

/// The HTTP module in `pod` on `node` answers with its page.
pub async fn assert_http_answer(s: &Scenario, pod: &str, node: &RealNode) {
    let port: u16 = s
        .nodes
        .image("WASM_HTTP_PORT")
        .parse()
        .expect("WASM_HTTP_PORT");
    let ip = s.pod_ip(pod).await;
    let (status, body) = poll::until(
        &format!("an HTTP answer from {pod} on {}", node.name),
        NODE_TIMEOUT,
        || async { http_get_at(ip, port, "/").await },
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(HTTP_BODY), "{}: {body:?}", node.name);
}
