//! Fault injection against the real binary: the controller killed with SIGKILL at random
//! moments while a fleet converges, the seed API server restarted under a running controller,
//! and writers racing the controller on one Extension's annotations and status.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ConditionStatus, Extension, ManagedResource, TIMESTAMP_ANNOTATION,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::process::{self, Replica, free_port};
use crate::support::{self, gardenlet, objects, poll};

const EXTENSION: &str = "containerd-shim";
const LEADER_LEASE: &str = "containerd-shim-leader-election";

/// A small deterministic generator (splitmix64), so a failing run can be repeated with the
/// seed it printed (`FAULT_SEED`).
struct Rng(u64);

impl Rng {
    fn from_env_or_clock() -> Rng {
        let seed = std::env::var("FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(7)
            });
        eprintln!("fault injection seed: FAULT_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn wasmtime_config() -> Value {
    json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
           "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}]})
}

/// A shoot namespace with its Cluster and a `containerd-shim` Extension; returns the namespace.
async fn shoot_with_extension(seed: &Client, test: &str) -> String {
    let ns = support::create_shoot_namespace(seed, test).await;
    Api::<Cluster>::all(seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot(&ns)),
        )
        .await
        .unwrap_or_else(|e| panic!("create Cluster {ns}: {e}"));
    Api::<Extension>::namespaced(seed.clone(), &ns)
        .create(
            &PostParams::default(),
            &objects::extension(&ns, EXTENSION, Some(wasmtime_config())),
        )
        .await
        .unwrap_or_else(|e| panic!("create Extension in {ns}: {e}"));
    ns
}

/// Requests a reconcile of every Extension (gardenlet's deploy step); returns the timestamps.
async fn request_all(seed: &Client, namespaces: &[String]) -> BTreeMap<String, String> {
    futures::stream::iter(namespaces.iter().cloned())
        .map(|ns| {
            let api: Api<Extension> = Api::namespaced(seed.clone(), &ns);
            async move {
                let ts = gardenlet::request_reconcile(&api, EXTENSION).await;
                (ns, ts)
            }
        })
        .buffer_unordered(10)
        .collect()
        .await
}

/// Polls until gardenlet's check passes for every Extension with the timestamp it last wrote.
async fn wait_all_ready(seed: &Client, timestamps: &BTreeMap<String, String>, timeout: Duration) {
    poll::until(
        &format!("{} Extensions ready by gardenlet's check", timestamps.len()),
        timeout,
        || async {
            let list = Api::<Extension>::all(seed.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut not_ready = Vec::new();
            for (ns, ts) in timestamps {
                let Some(ext) = list
                    .items
                    .iter()
                    .find(|e| e.namespace().as_deref() == Some(ns.as_str()))
                else {
                    not_ready.push(format!("{ns}: missing"));
                    continue;
                };
                if ext.annotations().get(TIMESTAMP_ANNOTATION) != Some(ts) {
                    not_ready.push(format!("{ns}: timestamp changed"));
                } else if let Err(why) = gardenlet::check_extension_object(ext) {
                    not_ready.push(format!("{ns}: {why:?}"));
                }
            }
            if not_ready.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} not ready, e.g. {:?}",
                    not_ready.len(),
                    &not_ready[..not_ready.len().min(3)]
                ))
            }
        },
    )
    .await;
}

/// Waits until `replica` holds the leader-election Lease in `namespace`.
async fn wait_leader(seed: &Client, namespace: &str, replica: &Replica) {
    let leases: Api<Lease> = Api::namespaced(seed.clone(), namespace);
    let prefix = replica.identity_prefix();
    poll::until("the new replica to lead", poll::DEFAULT_TIMEOUT, || async {
        let holder = leases
            .get_opt(LEADER_LEASE)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        match holder {
            Some(h) if h.starts_with(&prefix) => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
}

/// SIGKILL at random moments while 50 Extensions converge, ten times; then everything
/// converges, deletes completely and leaves no ManagedResource or secret behind.
#[tokio::test]
async fn the_fleet_survives_sigkill_at_random_moments() {
    let c = support::Clusters::connect().await;
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let mut rng = Rng::from_env_or_clock();
    let system = support::unique_name("extension-containerd-shim");
    support::create_namespace(&c.seed, &system, &[]).await;

    let namespaces: Vec<String> = futures::stream::iter(0..50)
        .map(|i| {
            let seed = c.seed.clone();
            async move { shoot_with_extension(&seed, &format!("kill{i}")).await }
        })
        .buffer_unordered(10)
        .collect()
        .await;
    let mut timestamps = request_all(&c.seed, &namespaces).await;

    for round in 0..10 {
        let replica = Replica::spawn(
            &format!("controller-r{round}"),
            &c.env.seed_kubeconfig,
            &system,
            &["--healthcheck-period=2s", "--max-concurrent-reconciles=5"],
        );
        wait_leader(&c.seed, &system, &replica).await;
        // Somewhere in the first reconciles of the fleet (each takes tens of milliseconds).
        let delay = Duration::from_millis(rng.below(2500));
        let ready = count_ready(&c.seed, &timestamps).await;
        tokio::time::sleep(delay).await;
        replica.signal("KILL");
        let mut replica = replica;
        let status = replica.wait_exit().await;
        assert!(!status.success(), "SIGKILL must end the process: {status}");
        eprintln!(
            "round {round}: killed {delay:?} after leading ({ready} of {} ready before)",
            namespaces.len()
        );
        // gardenlet asks again for some of them before the next replica starts.
        let again: Vec<String> = namespaces
            .iter()
            .filter(|_| rng.below(2) == 0)
            .cloned()
            .collect();
        timestamps.extend(request_all(&c.seed, &again).await);
    }

    let controller = Replica::spawn(
        "controller-final",
        &c.env.seed_kubeconfig,
        &system,
        &["--healthcheck-period=2s"],
    );
    wait_all_ready(&c.seed, &timestamps, Duration::from_secs(120)).await;

    // gardenlet deletes the shoots, and with them their Extensions: every deletion completes
    // and nothing is orphaned. A deleted Shoot skips the uninstall (its nodes go away); the
    // uninstall itself is not for this test: here all 50 bundles are the same objects of one
    // shoot API server, so the uninstall of one would take away what the other 49 report
    // healthy, a fight no seed can have. test/integration/shim_lifecycle.rs covers it.
    let deleted_at = jiff::Timestamp::now().to_string();
    futures::stream::iter(namespaces.iter().cloned())
        .map(|ns| {
            let clusters: Api<Cluster> = Api::all(c.seed.clone());
            let patch = json!({"spec": {"shoot": {"metadata": {"deletionTimestamp": deleted_at}}}});
            async move {
                clusters
                    .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap_or_else(|e| panic!("mark the Shoot of {ns} deleted: {e}"));
            }
        })
        .buffer_unordered(10)
        .collect::<Vec<()>>()
        .await;
    futures::stream::iter(namespaces.iter().cloned())
        .map(|ns| {
            let api: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
            async move { gardenlet::delete(&api, EXTENSION).await }
        })
        .buffer_unordered(10)
        .collect::<Vec<()>>()
        .await;
    poll::until(
        "every Extension to be deleted",
        Duration::from_secs(240),
        || async {
            let left: Vec<String> = Api::<Extension>::all(c.seed.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .filter(|e| namespaces.contains(&e.namespace().unwrap_or_default()))
                .map(|e| {
                    format!(
                        "{}: {:?}",
                        e.namespace().unwrap_or_default(),
                        e.status
                            .as_ref()
                            .and_then(|s| s.last_operation.as_ref())
                            .map(|o| o.description.clone())
                    )
                })
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} left, e.g. {:?}", left.len(), left.first()))
            }
        },
    )
    .await;
    for ns in &namespaces {
        let mrs = Api::<ManagedResource>::namespaced(c.seed.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list ManagedResources");
        assert!(
            mrs.items.is_empty(),
            "orphaned ManagedResources in {ns}: {:?}",
            mrs.items.iter().map(|m| m.name_any()).collect::<Vec<_>>()
        );
        let secrets: Vec<String> = Api::<Secret>::namespaced(c.seed.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list Secrets")
            .items
            .iter()
            .map(|s| s.name_any())
            .filter(|n| n.starts_with("managedresource-"))
            .collect();
        assert!(
            secrets.is_empty(),
            "orphaned ManagedResource secrets in {ns}: {secrets:?}"
        );
    }
    assert!(
        !controller.logs().contains("panicked"),
        "{}",
        controller.logs()
    );
}

async fn count_ready(seed: &Client, timestamps: &BTreeMap<String, String>) -> usize {
    let Ok(list) = Api::<Extension>::all(seed.clone())
        .list(&ListParams::default())
        .await
    else {
        return 0;
    };
    list.items
        .iter()
        .filter(|e| {
            e.namespace()
                .and_then(|ns| timestamps.get(&ns))
                .is_some_and(|ts| e.annotations().get(TIMESTAMP_ANNOTATION) == Some(ts))
                && gardenlet::check_extension_object(e).is_ok()
        })
        .count()
}

/// The seed API server restarts under a running controller: the same process recovers (its
/// watches and clients reconnect), reports ready again and converges new Extensions.
#[tokio::test]
async fn the_controller_recovers_from_a_seed_apiserver_restart() {
    let c = support::Clusters::connect().await;
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let system = support::unique_name("extension-containerd-shim");
    support::create_namespace(&c.seed, &system, &[]).await;
    // A leader that cannot renew its Lease within the renew deadline stops, by design (two
    // leaders must never act at once; controller-runtime exits the same way and the kubelet
    // restarts the pod). A restart of the API server takes several seconds here, longer than
    // the tests' usual 4 s deadline, so this controller gets a deadline that outlasts it:
    // what is tested is that the same process reconnects every client and watch.
    let (health_port, metrics_port) = (free_port(), free_port());
    let args = vec![
        "run".to_string(),
        format!("--kubeconfig={}", c.env.seed_kubeconfig.display()),
        format!("--leader-election-namespace={system}"),
        format!("--heartbeat-namespace={system}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        "--leader-election-lease-duration=90s".to_string(),
        "--leader-election-renew-deadline=60s".to_string(),
        "--leader-election-retry-period=1s".to_string(),
        "--healthcheck-period=2s".to_string(),
    ];
    let controller = Replica::spawn_exact("controller", args, health_port, metrics_port);
    controller.wait_ready().await;
    let pid = controller.pid().expect("the controller runs");
    let before = shoot_with_extension(&c.seed, "before-restart").await;
    let api: Api<Extension> = Api::namespaced(c.seed.clone(), &before);
    let ts = gardenlet::request_reconcile(&api, EXTENSION).await;
    gardenlet::wait_ready(&api, EXTENSION, Some(&ts)).await;

    let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/control-plane.sh");
    let output = tokio::process::Command::new(launcher)
        .args(["restart-seed-apiserver", "--dir"])
        .arg(&c.env.dir)
        .output()
        .await
        .expect("run the launcher");
    assert!(
        output.status.success(),
        "restart-seed-apiserver failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // A client of its own: the test's old connections died with the server.
    let seed = support::client_from(&c.env.seed_kubeconfig).await;
    controller.wait_ready().await;
    assert_eq!(
        controller.pid(),
        Some(pid),
        "the controller must not restart"
    );
    let after = shoot_with_extension(&seed, "after-restart").await;
    let api_after: Api<Extension> = Api::namespaced(seed.clone(), &after);
    let ts_after = gardenlet::request_reconcile(&api_after, EXTENSION).await;
    gardenlet::wait_ready(&api_after, EXTENSION, Some(&ts_after)).await;
    // The Extension from before the restart is still served too.
    let api_before: Api<Extension> = Api::namespaced(seed.clone(), &before);
    let ts_before = gardenlet::request_reconcile(&api_before, EXTENSION).await;
    gardenlet::wait_ready(&api_before, EXTENSION, Some(&ts_before)).await;
    assert_eq!(controller.pid(), Some(pid));
    let logs = controller.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Writers race the controller on one Extension: a gardenlet-like writer sets the operation and
/// timestamp annotations and owns `status.state`, another writer owns a foreign annotation and
/// `status.providerStatus`, and a Cluster toggle makes the health check rewrite its conditions
/// while the lifecycle reconciler writes `lastOperation`. No update is lost: at the end every
/// writer's last value is present and gardenlet accepts the Extension.
#[tokio::test]
async fn concurrent_writers_lose_no_update() {
    let c = support::Clusters::connect().await;
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let controller = process::start_controller(&c, &["--healthcheck-period=1s"]).await;
    let ns = shoot_with_extension(&c.seed, "writers").await;
    let api: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
    let ts = gardenlet::request_reconcile(&api, EXTENSION).await;
    gardenlet::wait_ready(&api, EXTENSION, Some(&ts)).await;

    const ROUNDS: u64 = 60;
    let gardenlet_writer = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut last_ts = String::new();
            for i in 0..ROUNDS {
                last_ts = gardenlet::request_reconcile(&api, EXTENSION).await;
                let state = json!({"status": {"state": {"writer": "gardenlet", "seq": i}}});
                api.patch_status(EXTENSION, &PatchParams::default(), &Patch::Merge(&state))
                    .await
                    .unwrap_or_else(|e| panic!("status.state write {i}: {e}"));
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            last_ts
        })
    };
    let other_writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..ROUNDS {
                let meta = json!({"metadata": {"annotations": {"example.com/other-writer": i.to_string()}}});
                api.patch(EXTENSION, &PatchParams::default(), &Patch::Merge(&meta))
                    .await
                    .unwrap_or_else(|e| panic!("annotation write {i}: {e}"));
                let status = json!({"status": {"providerStatus": {"writer": "other", "seq": i}}});
                api.patch_status(EXTENSION, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .unwrap_or_else(|e| panic!("providerStatus write {i}: {e}"));
                tokio::time::sleep(Duration::from_millis(110)).await;
            }
        })
    };
    // Hibernation on and off makes the health check write "hibernated" and back.
    let cluster_toggler = {
        let seed = c.seed.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            let clusters: Api<Cluster> = Api::all(seed);
            for i in 0..12u32 {
                let patch =
                    json!({"spec": {"shoot": {"spec": {"hibernation": {"enabled": i % 2 == 0}}}}});
                clusters
                    .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap_or_else(|e| panic!("Cluster toggle {i}: {e}"));
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
        })
    };
    let last_ts = gardenlet_writer.await.expect("gardenlet-like writer");
    other_writer.await.expect("other writer");
    cluster_toggler.await.expect("Cluster toggler");

    // The last toggle woke the shoot up: the health check reports the real state again.
    let ext = gardenlet::wait_ready(&api, EXTENSION, Some(&last_ts)).await;
    let status = ext.status.clone().unwrap_or_default();
    assert_eq!(
        status.state,
        Some(json!({"writer": "gardenlet", "seq": ROUNDS - 1})),
        "status.state lost an update"
    );
    assert_eq!(
        status.provider_status,
        Some(json!({"writer": "other", "seq": ROUNDS - 1})),
        "status.providerStatus lost an update"
    );
    assert_eq!(
        ext.annotations()
            .get("example.com/other-writer")
            .map(String::as_str),
        Some((ROUNDS - 1).to_string().as_str()),
        "the foreign annotation lost an update"
    );
    gardenlet::wait_condition(
        &api,
        EXTENSION,
        "SystemComponentsHealthy",
        "to leave the hibernated state",
        |c| !c.message.contains("hibernated"),
    )
    .await;
    let ext = api.get(EXTENSION).await.expect("get");
    let status = ext.status.unwrap_or_default();
    assert_eq!(
        status.state,
        Some(json!({"writer": "gardenlet", "seq": ROUNDS - 1}))
    );
    assert_eq!(
        status.provider_status,
        Some(json!({"writer": "other", "seq": ROUNDS - 1}))
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "SystemComponentsHealthy" && c.status != ConditionStatus::Unknown),
        "{:?}",
        status.conditions
    );
    let logs = controller.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
