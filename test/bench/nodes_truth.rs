//! Figures of the installer following the handler's truth, and the floor they stand on, once per
//! repetition with crun installed (between "install crun" and "add crun-b"):
//!
//! - **floor**: on each node, a bare `systemctl restart containerd` until `crictl info` answers
//!   again, and one `crictl runp` (and its removal) with the crun handler in the node's network
//!   namespace, as the installer's verification does;
//! - **drift**: on the containerd 1.x node, containerd's original file written back and
//!   containerd restarted, as an operator would: the time until the node's crun label is gone,
//!   and until it is back (repaired and verified).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::scenario::{LABEL_PREFIX, NODE_TIMEOUT, Scenario};
use crate::support::real_nodes::RealNode;

const POLL: Duration = Duration::from_millis(50);

/// A pod sandbox in the node's network namespace (no CNI), as the installer's verification
/// starts one.
const SANDBOX: &str = r#"{"metadata":{"name":"bench-floor","namespace":"default","uid":"bench-floor","attempt":0},"linux":{"security_context":{"namespace_options":{"network":2}}}}"#;
const CRI: &str = "unix:///run/containerd/containerd.sock";

fn crictl_ok(node: &RealNode, args: &str) -> bool {
    node.exec(&[
        "sh",
        "-c",
        &format!("crictl --runtime-endpoint {CRI} --timeout 2s {args} >/dev/null 2>&1"),
    ])
    .status
    .success()
}

/// Seconds of a bare restart until the CRI answers again, and of one `crictl runp` + removal.
pub fn floor(node: &RealNode) -> Value {
    let started = Instant::now();
    node.run(&["systemctl", "restart", "containerd"]);
    let restarted = started.elapsed();
    let deadline = Instant::now() + NODE_TIMEOUT;
    while !crictl_ok(node, "info") {
        assert!(
            Instant::now() < deadline,
            "{}: no CRI after a restart",
            node.name
        );
        std::thread::sleep(POLL);
    }
    let cri_back = started.elapsed();
    node.run(&[
        "sh",
        "-c",
        &format!("printf '%s' '{SANDBOX}' > /tmp/bench-floor.json"),
    ]);
    let started = Instant::now();
    let id = node.run(&[
        "crictl",
        "--runtime-endpoint",
        CRI,
        "runp",
        "--runtime",
        "crun",
        "/tmp/bench-floor.json",
    ]);
    let runp = started.elapsed();
    let id = id.trim();
    node.run(&["crictl", "--runtime-endpoint", CRI, "stopp", id]);
    node.run(&["crictl", "--runtime-endpoint", CRI, "rmp", id]);
    let with_removal = started.elapsed();
    json!({
        "node": node.name,
        "systemctlRestartS": restarted.as_secs_f64(),
        "restartUntilCriS": cri_back.as_secs_f64(),
        "runpS": runp.as_secs_f64(),
        "runpAndRemoveS": with_removal.as_secs_f64(),
    })
}

async fn labelled(s: &Scenario, node: &str, key: &str) -> bool {
    s.node_labels()
        .await
        .get(node)
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == "ready")
}

/// From the drift (the original file back, containerd restarted) to the crun label gone, and
/// to it back.
pub async fn drift(s: &Scenario, node: &RealNode) -> Value {
    let key = format!("{LABEL_PREFIX}crun");
    assert!(
        labelled(s, &node.name, &key).await,
        "crun is not verified on {}",
        node.name
    );
    let started = Instant::now();
    node.run(&[
        "sh",
        "-c",
        "cp /etc/containerd/config.toml.containerd-shim.bak /etc/containerd/config.toml \
         && systemctl restart containerd",
    ]);
    let deadline = Instant::now() + NODE_TIMEOUT;
    while labelled(s, &node.name, &key).await {
        assert!(
            Instant::now() < deadline,
            "the label stayed on {}",
            node.name
        );
        tokio::time::sleep(POLL).await;
    }
    let gone = started.elapsed();
    while !labelled(s, &node.name, &key).await {
        assert!(
            Instant::now() < deadline,
            "the label did not come back on {}",
            node.name
        );
        tokio::time::sleep(POLL).await;
    }
    let back = started.elapsed();
    json!({"node": node.name, "labelGoneS": gone.as_secs_f64(), "labelBackS": back.as_secs_f64()})
}
