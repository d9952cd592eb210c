//! The installer against the real (shoot) API server: the Lease-slot restart budget with
//! several simulated nodes competing, a crashed holder losing its slot, and the readiness
//! labels on real Node objects, observed at the moments containerd restarts and verifies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gardener_extension_containerd_shim::desired_shims::{ready_label, restart_lease};
use gardener_extension_containerd_shim::installer::cluster::Cluster;
use gardener_extension_containerd_shim::installer::converge::{Installer, Settings};
use gardener_extension_containerd_shim::installer::host::{Host, HostEvent, TestHost};
use gardener_extension_containerd_shim::installer::node::{BudgetTiming, KubeCluster};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use crate::support::installer::{
    STATE_DIR, binary_content, containerd, corpus, desired, spin, uninstall,
};
use crate::support::nodes::create_nodes;
use crate::support::poll;
use crate::support::{Clusters, create_namespace, unique_name};

/// A simulated node's host and installer talking to the shoot API server.
struct SimNode {
    name: String,
    _dir: tempfile::TempDir,
    host: Arc<TestHost>,
    installer: Installer<KubeCluster>,
}

fn sim_node(client: &Client, namespace: &str, name: &str, timing: BudgetTiming) -> SimNode {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
    std::fs::write(
        root.join("etc/containerd/config.toml"),
        corpus("v2-gardener.toml"),
    )
    .unwrap();
    let shim = spin("v0.22.0");
    std::fs::create_dir_all(staging.join("spin")).unwrap();
    std::fs::write(
        staging.join("spin/containerd-shim-spin-v2"),
        binary_content(&shim, "containerd-shim-spin-v2"),
    )
    .unwrap();
    let host = Arc::new(TestHost::new(&root, containerd(2)));
    host.start_containerd().unwrap();
    let cluster = KubeCluster::new(client.clone(), namespace, name, timing);
    let installer = Installer::new(
        host.clone() as Arc<dyn Host>,
        cluster,
        Settings::new(STATE_DIR, &staging),
        None,
    );
    SimNode {
        name: name.to_string(),
        _dir: dir,
        host,
        installer,
    }
}

fn restart_intervals(host: &TestHost) -> Vec<(Instant, Instant)> {
    host.events()
        .into_iter()
        .filter_map(|event| match event {
            HostEvent::Restart {
                started, finished, ..
            } => Some((started, finished)),
            _ => None,
        })
        .collect()
}

/// The largest number of intervals that overlap at one instant.
fn max_overlap(intervals: &[(Instant, Instant)]) -> usize {
    let mut points: Vec<(Instant, i32)> = Vec::new();
    for (start, end) in intervals {
        points.push((*start, 1));
        points.push((*end, -1));
    }
    // Ends sort before starts at the same instant: touching intervals do not overlap.
    points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut current = 0;
    let mut max = 0;
    for (_, delta) in points {
        current += delta;
        max = max.max(current);
    }
    max as usize
}

async fn lease_holder(leases: &Api<Lease>, slot: u32) -> Option<String> {
    leases
        .get_opt(&restart_lease(slot))
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_max_concurrent_restarts_nodes_restart_at_once() {
    let clusters = Clusters::connect().await;
    let namespace = create_namespace(&clusters.shoot, &unique_name("installer-budget"), &[]).await;
    let pool = unique_name("budget");
    let names: Vec<String> = (0..5)
        .map(|i| unique_name(&format!("budget-node-{i}")))
        .collect();
    create_nodes(&clusters.shoot, &names, &pool).await;
    let timing = BudgetTiming {
        lease_duration: Duration::from_secs(10),
        retry_period: Duration::from_millis(100),
    };
    let mut nodes: Vec<SimNode> = names
        .iter()
        .map(|name| sim_node(&clusters.shoot, &namespace, name, timing))
        .collect();
    for node in &nodes {
        node.host.set_restart_duration(Duration::from_millis(800));
    }
    let mut want = desired(vec![spin("v0.22.0")]);
    want.rollout.max_concurrent_restarts = 2;

    let started = Instant::now();
    let runs = futures::future::join_all(nodes.iter_mut().map(|node| {
        let want = want.clone();
        async move { node.installer.run(&want).await }
    }))
    .await;
    for (node, run) in nodes.iter().zip(runs) {
        let outcome = run.unwrap_or_else(|err| panic!("{}: {err}", node.name));
        assert!(outcome.status.ready, "{}: {:?}", node.name, outcome.status);
    }
    let intervals: Vec<(Instant, Instant)> = nodes
        .iter()
        .flat_map(|node| restart_intervals(&node.host))
        .collect();
    for node in &nodes {
        assert_eq!(
            restart_intervals(&node.host).len(),
            1,
            "{} restarts once",
            node.name
        );
    }
    let overlap = max_overlap(&intervals);
    assert!(
        overlap <= 2,
        "{overlap} nodes restarted containerd at the same time"
    );
    assert!(overlap >= 1);
    // Five restarts of 0.8 s, two at a time, take at least three rounds.
    assert!(started.elapsed() >= Duration::from_millis(3 * 800));
    println!(
        "max concurrent restarts: {overlap}, total {:?}",
        started.elapsed()
    );

    // Every node is labelled; every slot is free again; no slot beyond the budget exists.
    let api: Api<Node> = Api::all(clusters.shoot.clone());
    for name in &names {
        let node = api.get(name).await.unwrap();
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(&ready_label("spin")).map(String::as_str),
            Some("ready"),
            "{name}"
        );
    }
    let leases: Api<Lease> = Api::namespaced(clusters.shoot.clone(), &namespace);
    for slot in 0..2 {
        assert_eq!(
            lease_holder(&leases, slot).await,
            None,
            "slot {slot} released"
        );
    }
    assert!(leases.get_opt(&restart_lease(2)).await.unwrap().is_none());
    for name in &names {
        let _ = api.delete(name, &Default::default()).await;
    }
}

#[tokio::test]
async fn a_crashed_holder_loses_its_slot_after_the_lease_duration() {
    let clusters = Clusters::connect().await;
    let namespace = create_namespace(&clusters.shoot, &unique_name("installer-crash"), &[]).await;
    let timing = BudgetTiming {
        lease_duration: Duration::from_secs(3),
        retry_period: Duration::from_millis(100),
    };
    let a = KubeCluster::new(clusters.shoot.clone(), &namespace, "node-a", timing);
    let b = KubeCluster::new(clusters.shoot.clone(), &namespace, "node-b", timing);
    let leases: Api<Lease> = Api::namespaced(clusters.shoot.clone(), &namespace);

    // A live holder keeps its slot well past the lease duration (it renews).
    let slot = a.acquire_restart_slot(1).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(7), b.acquire_restart_slot(1)).await;
    assert!(waited.is_err(), "node-b took a slot that node-a renews");
    assert_eq!(lease_holder(&leases, 0).await.as_deref(), Some("node-a"));

    // A released slot is free at once.
    a.release_restart_slot(slot).await.unwrap();
    let started = Instant::now();
    let slot_b = tokio::time::timeout(Duration::from_secs(5), b.acquire_restart_slot(1))
        .await
        .expect("a released slot is free");
    assert!(started.elapsed() < Duration::from_secs(2));
    b.release_restart_slot(slot_b.unwrap()).await.unwrap();

    // node-a takes it and crashes: no renewals, no release.
    let crashed = a.acquire_restart_slot(1).await.unwrap();
    let taken_at = Instant::now();
    drop(crashed);
    let slot_b = tokio::time::timeout(Duration::from_secs(20), b.acquire_restart_slot(1))
        .await
        .expect("the crashed holder's slot expires")
        .unwrap();
    let waited = taken_at.elapsed();
    assert!(
        waited >= Duration::from_millis(2500),
        "taken over after only {waited:?}"
    );
    assert_eq!(lease_holder(&leases, 0).await.as_deref(), Some("node-b"));
    let lease = leases.get(&restart_lease(0)).await.unwrap();
    assert!(lease.spec.unwrap().lease_transitions.unwrap() >= 2);
    b.release_restart_slot(slot_b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_set_after_verification_and_removed_before_uninstall() {
    let clusters = Clusters::connect().await;
    let namespace = create_namespace(&clusters.shoot, &unique_name("installer-labels"), &[]).await;
    let name = unique_name("labels-node");
    create_nodes(
        &clusters.shoot,
        std::slice::from_ref(&name),
        &unique_name("pool"),
    )
    .await;
    let mut node = sim_node(&clusters.shoot, &namespace, &name, BudgetTiming::default());

    // At each restart and verification, look at the Node as the scheduler would.
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let api: Api<Node> = Api::all(clusters.shoot.clone());
    let handle = tokio::runtime::Handle::current();
    let (record, hook_api, hook_name) = (seen.clone(), api.clone(), name.clone());
    node.host.on_command(move |what| {
        let node = handle.block_on(hook_api.get(&hook_name)).unwrap();
        let labelled = node
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(&ready_label("spin"));
        record.lock().unwrap().push((what.to_string(), labelled));
    });

    let outcome = node
        .installer
        .run(&desired(vec![spin("v0.22.0")]))
        .await
        .unwrap();
    assert!(outcome.status.ready);
    let labels = |node: Node| node.metadata.labels.unwrap_or_default();
    assert!(labels(api.get(&name).await.unwrap()).contains_key(&ready_label("spin")));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("restart".to_string(), false),
            ("verify".to_string(), false)
        ],
        "not labelled before containerd was verified"
    );

    seen.lock().unwrap().clear();
    let outcome = node.installer.run(&uninstall()).await.unwrap();
    assert!(outcome.status.ready, "{:?}", outcome.status);
    assert_eq!(
        seen.lock().unwrap().first().cloned(),
        Some(("restart".to_string(), false)),
        "the label is gone before the uninstall restarts containerd"
    );
    let current = labels(api.get(&name).await.unwrap());
    assert!(!current.contains_key(&ready_label("spin")), "{current:?}");
    // Other labels are untouched.
    assert!(current.contains_key("worker.gardener.cloud/pool"));
    poll::stays("no label comes back", Duration::from_secs(1), || async {
        let labels: BTreeMap<String, String> = labels(api.get(&name).await.unwrap());
        if labels.contains_key(&ready_label("spin")) {
            Err(labels)
        } else {
            Ok(())
        }
    })
    .await;
    let _ = api.delete(&name, &Default::default()).await;
}
