//! The process runtime (T10a, T10b, T10d of the Gardener contract) against the seed API server
//! of the embedded control plane, mostly through the real binary: leader election and its
//! fail-over, the heartbeat Lease, start-up errors, health, readiness and metrics.
//!
//! Lease timing is shortened (6 s lease, 4 s renew deadline, 1 s retry) so fail-over takes
//! seconds; the heartbeat interval is 1 s.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::future::BoxFuture;
use gardener_extension_containerd_shim::gardener::runtime::{
    ControllerContext, Manager, Operation, OperationResult, ReconcileResult, RuntimeOptions,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::process::{BIN, EXIT_TIMEOUT, LEASE_DURATION, Replica, free_port, http_get};
use crate::support::rbac::{self, rule};
use crate::support::{self, audit, poll};

const EXTENSION: &str = "containerd-shim";
const LEADER_LEASE: &str = "containerd-shim-leader-election";
const HEARTBEAT_LEASE: &str = "gardener-extension-heartbeat";
/// These tests are about the process runtime; the Extension and health-check controllers would
/// reconcile every other test's Extensions on the shared control plane.
const HEARTBEAT_ONLY: &[&str] = &["--controllers=heartbeat"];
const HEARTBEAT_SERIES: &str =
    r#"controller_runtime_reconcile_total{controller="heartbeat",result="requeue_after"}"#;
const LEADER_SERIES: &str =
    r#"leader_election_master_status{name="containerd-shim-leader-election"}"#;

async fn lease_spec(leases: &Api<Lease>, name: &str) -> Result<LeaseSpec, String> {
    match leases.get_opt(name).await {
        Ok(Some(lease)) => Ok(lease.spec.unwrap_or_default()),
        Ok(None) => Err(format!("Lease {name} does not exist")),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until the leader-election Lease names a holder with one of `prefixes`; returns it.
async fn wait_for_holder(leases: &Api<Lease>, prefixes: &[String], timeout: Duration) -> String {
    poll::until(
        &format!("a holder starting with one of {prefixes:?}"),
        timeout,
        || async {
            let holder = lease_spec(leases, LEADER_LEASE)
                .await?
                .holder_identity
                .unwrap_or_default();
            if prefixes.iter().any(|p| holder.starts_with(p.as_str())) {
                Ok(holder)
            } else {
                Err(format!("holder is {holder:?}"))
            }
        },
    )
    .await
}

async fn test_namespace(c: &support::Clusters, prefix: &str) -> String {
    support::create_namespace(&c.seed, &support::unique_name(prefix), &[]).await
}

/// Two heartbeat-only replicas in `ns`, once one of them holds the leader-election Lease; with
/// the index of that leader.
async fn leader_and_standby(
    c: &support::Clusters,
    ns: &str,
    leases: &Api<Lease>,
) -> ([Replica; 2], usize) {
    let replicas = [
        Replica::spawn("replica-a", &c.env.seed_kubeconfig, ns, HEARTBEAT_ONLY),
        Replica::spawn("replica-b", &c.env.seed_kubeconfig, ns, HEARTBEAT_ONLY),
    ];
    let prefixes: Vec<String> = replicas.iter().map(Replica::identity_prefix).collect();
    let holder = wait_for_holder(leases, &prefixes, poll::DEFAULT_TIMEOUT).await;
    let leader_index = usize::from(!holder.starts_with(&prefixes[0]));
    (replicas, leader_index)
}

#[tokio::test]
async fn t10a_the_leader_renews_the_heartbeat_lease() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-heartbeat").await;
    let replica = Replica::spawn("replica-a", &c.env.seed_kubeconfig, &ns, HEARTBEAT_ONLY);
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);

    let spec = poll::until("the heartbeat Lease", poll::DEFAULT_TIMEOUT, || {
        lease_spec(&leases, HEARTBEAT_LEASE)
    })
    .await;
    assert_eq!(spec.holder_identity.as_deref(), Some(EXTENSION));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    let mut last = spec
        .renew_time
        .clone()
        .unwrap_or_else(|| panic!("no renewTime in {spec:?}"))
        .0;
    for renewal in 1..=2 {
        last = poll::until(
            &format!("renewal {renewal} of the heartbeat"),
            Duration::from_secs(10),
            || async {
                let renewed = lease_spec(&leases, HEARTBEAT_LEASE)
                    .await?
                    .renew_time
                    .map(|t| t.0);
                match renewed {
                    Some(t) if t > last => Ok(t),
                    other => Err(format!("renewTime is {other:?}, not after {last}")),
                }
            },
        )
        .await;
    }
    let age = jiff::Timestamp::now().duration_since(last);
    assert!(age.as_secs() < 5, "the last renewal is {age:?} old");

    assert_eq!(replica.metric(LEADER_SERIES).await, Ok(1.0));
    let beats = replica
        .metric(HEARTBEAT_SERIES)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(beats >= 3.0, "{beats} heartbeats counted");
    let holder = lease_spec(&leases, LEADER_LEASE)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .holder_identity;
    assert!(holder.is_some_and(|h| h.starts_with("replica-a_")));
}

#[tokio::test]
async fn t10a_a_stand_by_never_writes_the_heartbeat() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-standby").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    // A healthy leader elsewhere: the Lease is held and renewed for an hour.
    let held = Lease {
        metadata: ObjectMeta {
            name: Some(LEADER_LEASE.to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("elsewhere_0".to_string()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(jiff::Timestamp::now())),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    leases
        .create(&PostParams::default(), &held)
        .await
        .unwrap_or_else(|e| panic!("create Lease: {e}"));

    let replica = Replica::spawn("replica-b", &c.env.seed_kubeconfig, &ns, HEARTBEAT_ONLY);
    // Readiness does not wait for leadership: a stand-by must be Ready for rollouts to finish.
    replica.wait_ready().await;
    poll::until(
        "the stand-by's leader gauge",
        poll::DEFAULT_TIMEOUT,
        || async {
            let gauge = replica.metric(LEADER_SERIES).await?;
            if gauge == 0.0 {
                Ok(())
            } else {
                Err(format!("gauge is {gauge}"))
            }
        },
    )
    .await;
    poll::stays(
        "no heartbeat Lease from a stand-by",
        Duration::from_secs(4),
        || async {
            match leases.get_opt(HEARTBEAT_LEASE).await {
                Ok(None) => Ok(()),
                Ok(Some(lease)) => Err(format!("the stand-by wrote {lease:?}")),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    assert_eq!(replica.metric(HEARTBEAT_SERIES).await, Ok(0.0));
    let spec = lease_spec(&leases, LEADER_LEASE)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec.holder_identity.as_deref(), Some("elsewhere_0"));
}

#[tokio::test]
async fn t10b_one_of_two_replicas_leads_and_the_other_takes_over_when_it_dies() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-failover").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    let (mut replicas, leader_index) = leader_and_standby(&c, &ns, &leases).await;
    let leader = &replicas[leader_index];
    let standby = &replicas[1 - leader_index];

    poll::until(
        "the leader to send heartbeats",
        poll::DEFAULT_TIMEOUT,
        || async {
            match leader.metric(HEARTBEAT_SERIES).await? {
                n if n >= 1.0 => Ok(()),
                n => Err(format!("{n} heartbeats")),
            }
        },
    )
    .await;
    assert_eq!(leader.metric(LEADER_SERIES).await, Ok(1.0));
    // Only the leader runs controllers: the stand-by's heartbeat count stays zero.
    poll::stays("the stand-by idles", Duration::from_secs(3), || async {
        match (
            standby.metric(HEARTBEAT_SERIES).await?,
            standby.metric(LEADER_SERIES).await?,
        ) {
            (beats, gauge) if beats == 0.0 && gauge == 0.0 => Ok(()),
            (beats, gauge) => Err(format!(
                "stand-by has {beats} heartbeats and leader gauge {gauge}"
            )),
        }
    })
    .await;
    leader.wait_ready().await;
    standby.wait_ready().await;

    let killed_at = Instant::now();
    replicas[leader_index].signal("KILL");
    let status = replicas[leader_index].wait_exit().await;
    assert!(!status.success(), "{status}");
    let standby = &replicas[1 - leader_index];
    // The killed leader renewed at most a retry period ago; its Lease expires a lease duration
    // after that, then the stand-by needs one more attempt (up to ~1 s of jitter).
    let takeover_limit = LEASE_DURATION + Duration::from_secs(5);
    let new_holder = wait_for_holder(
        &leases,
        &[standby.identity_prefix()],
        takeover_limit + Duration::from_secs(10),
    )
    .await;
    let took = killed_at.elapsed();
    assert!(
        took <= takeover_limit,
        "{new_holder} took over after {took:?}"
    );
    poll::until(
        "the new leader to send heartbeats",
        Duration::from_secs(10),
        || async {
            match standby.metric(HEARTBEAT_SERIES).await? {
                n if n >= 1.0 => Ok(()),
                n => Err(format!("{n} heartbeats")),
            }
        },
    )
    .await;
    assert_eq!(standby.metric(LEADER_SERIES).await, Ok(1.0));
}

#[tokio::test]
async fn sigterm_stops_gracefully_and_releases_the_lease() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-sigterm").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    let mut replica = Replica::spawn("replica-a", &c.env.seed_kubeconfig, &ns, HEARTBEAT_ONLY);
    wait_for_holder(&leases, &[replica.identity_prefix()], poll::DEFAULT_TIMEOUT).await;

    replica.signal("TERM");
    let status = replica.wait_exit().await;
    assert!(
        status.success(),
        "SIGTERM must end in exit code 0, got {status}; log:\n{}",
        replica.logs()
    );
    let spec = lease_spec(&leases, LEADER_LEASE)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec.holder_identity, None,
        "the Lease is released for a quick take-over"
    );
}

#[tokio::test]
async fn losing_leadership_stops_the_process_with_an_error() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-failstop").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    let mut replica = Replica::spawn("replica-a", &c.env.seed_kubeconfig, &ns, HEARTBEAT_ONLY);
    wait_for_holder(&leases, &[replica.identity_prefix()], poll::DEFAULT_TIMEOUT).await;

    // Another party takes the Lease, as a stand-by does after an expiry this replica missed.
    let usurp = json!({"spec": {
        "holderIdentity": "usurper_0",
        "leaseDurationSeconds": 3600,
        "renewTime": MicroTime(jiff::Timestamp::now()),
    }});
    leases
        .patch(LEADER_LEASE, &PatchParams::default(), &Patch::Merge(&usurp))
        .await
        .unwrap_or_else(|e| panic!("patch Lease: {e}"));

    let status = replica.wait_exit().await;
    assert!(
        !status.success(),
        "a lost leadership must end in a non-zero exit, got {status}"
    );
    let logs = replica.logs();
    assert!(logs.contains("leader election lost"), "{logs}");
}

#[tokio::test]
async fn a_deleted_lease_stops_the_leader() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-deleted").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    let mut replica = Replica::spawn("replica-a", &c.env.seed_kubeconfig, &ns, HEARTBEAT_ONLY);
    wait_for_holder(&leases, &[replica.identity_prefix()], poll::DEFAULT_TIMEOUT).await;

    leases
        .delete(LEADER_LEASE, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("delete Lease: {e}"));
    let status = replica.wait_exit().await;
    assert!(
        !status.success(),
        "a deleted Lease must end the leader, got {status}"
    );
    let logs = replica.logs();
    assert!(logs.contains("the Lease was deleted"), "{logs}");
}

/// The controller's identity with exactly what a heartbeat-only process needs: the Leases in
/// `ns`, and reading what the shared caches watch.
async fn grant_runtime_rules(c: &support::Clusters, ns: &str) {
    let mut cluster_rules = rbac::cache_rules();
    cluster_rules.push(rule(
        "extensions.gardener.cloud",
        &["extensions"],
        &["list", "watch"],
    ));
    let leases = rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "patch"],
    );
    let name = support::unique_name("rt-agent");
    rbac::grant_controller(&c.seed, &name, ns, cluster_rules, vec![leases]).await;
}

/// The controller identity's completed requests in the audit log, from byte `from` on.
fn audited(path: &Path, from: usize) -> Vec<audit::Request> {
    audit::completed(path, from)
        .into_iter()
        .filter(|r| r.user == rbac::CONTROLLER_USER)
        .collect()
}

/// Every request of the process names the binary, its version and the component that sent it
/// (the audit log is where an operator looks), and the leader renews its Lease with one
/// request per renewal: after acquiring it, a patch every retry period and no read.
#[tokio::test]
async fn requests_name_their_component_and_a_renewal_is_one_request() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-agent").await;
    grant_runtime_rules(&c, &ns).await;
    let from = std::fs::metadata(&c.env.seed_audit_log)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    let replica = Replica::spawn(
        "replica-a",
        &c.env.seed_controller_kubeconfig,
        &ns,
        HEARTBEAT_ONLY,
    );
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    wait_for_holder(&leases, &[replica.identity_prefix()], poll::DEFAULT_TIMEOUT).await;
    replica.wait_ready().await;

    // Watch the Lease being renewed a few times (every second with the test timing).
    let renewals = std::cell::RefCell::new(Vec::new());
    poll::until("four renewals of the Lease", poll::DEFAULT_TIMEOUT, || {
        let (leases, renewals) = (leases.clone(), &renewals);
        async move {
            let renewed = lease_spec(&leases, LEADER_LEASE).await?.renew_time;
            let mut seen = renewals.borrow_mut();
            if seen.last() != Some(&renewed) {
                seen.push(renewed);
            }
            if seen.len() >= 5 {
                Ok(())
            } else {
                Err(format!("{} renewals seen", seen.len().saturating_sub(1)))
            }
        }
    })
    .await;
    // The heartbeat marks the end: everything before it has been logged once it is.
    let heartbeats_before = audited(&c.env.seed_audit_log, from)
        .iter()
        .filter(|r| r.name == HEARTBEAT_LEASE && r.namespace == ns)
        .count();
    let requests = poll::until(
        "the audit log to record a later heartbeat",
        poll::DEFAULT_TIMEOUT,
        || async {
            let requests = audited(&c.env.seed_audit_log, from);
            let heartbeats = requests
                .iter()
                .filter(|r| r.name == HEARTBEAT_LEASE && r.namespace == ns)
                .count();
            if heartbeats > heartbeats_before {
                Ok(requests)
            } else {
                Err(format!("{heartbeats} heartbeats logged"))
            }
        },
    )
    .await;
    drop(replica);

    let agent = |component: &str| {
        format!(
            "gardener-extension-containerd-shim/{} ({component})",
            env!("CARGO_PKG_VERSION")
        )
    };
    let ours: Vec<&audit::Request> = requests
        .iter()
        .filter(|r| r.namespace == ns && r.resource == "leases")
        .collect();
    let election: Vec<&audit::Request> = ours
        .iter()
        .copied()
        .filter(|r| r.name == LEADER_LEASE)
        .collect();
    let heartbeat: Vec<&audit::Request> = ours
        .iter()
        .copied()
        .filter(|r| r.name == HEARTBEAT_LEASE)
        .collect();
    assert!(!election.is_empty() && !heartbeat.is_empty(), "{ours:#?}");
    for r in &election {
        assert_eq!(r.user_agent, agent("leader-election"), "{r:?}");
    }
    for r in &heartbeat {
        assert_eq!(r.user_agent, agent("heartbeat"), "{r:?}");
    }
    // The caches' watches: cluster-wide, so they are told from other processes of this identity
    // by their User-Agent alone.
    assert!(
        requests.iter().any(|r| r.user_agent == agent("cache")
            && r.resource == "extensions"
            && (r.verb == "list" || r.verb == "watch")),
        "no list or watch of Extensions with the caches' User-Agent"
    );

    // Acquiring: a read, then a create. Renewing: one patch per renewal, never a read.
    let verbs: Vec<&str> = election.iter().map(|r| r.verb.as_str()).collect();
    let acquired = verbs
        .iter()
        .position(|v| *v == "create" || *v == "patch")
        .unwrap_or_else(|| panic!("the Lease was never written: {verbs:?}"));
    let renewals = &verbs[acquired + 1..];
    assert!(renewals.len() >= 4, "{verbs:?}");
    assert!(
        renewals.iter().all(|v| *v == "patch"),
        "a renewal is one patch, without a read: {verbs:?}"
    );
}

#[tokio::test]
async fn a_paused_leader_that_was_replaced_exits_when_it_resumes() {
    let c = support::Clusters::connect().await;
    let ns = test_namespace(&c, "rt-paused").await;
    let leases: Api<Lease> = Api::namespaced(c.seed.clone(), &ns);
    let (mut replicas, leader_index) = leader_and_standby(&c, &ns, &leases).await;

    // A leader that stalls (CPU starvation, a long GC-like pause) misses its renewals; the
    // stand-by takes over. When the old leader runs again it must not reconcile a moment longer.
    replicas[leader_index].signal("STOP");
    wait_for_holder(
        &leases,
        &[replicas[1 - leader_index].identity_prefix()],
        LEASE_DURATION * 4,
    )
    .await;
    replicas[leader_index].signal("CONT");
    let status = replicas[leader_index].wait_exit().await;
    assert!(
        !status.success(),
        "the replaced leader must exit non-zero, got {status}"
    );
    let logs = replicas[leader_index].logs();
    assert!(logs.contains("leader election lost"), "{logs}");
    // The Lease names the new holder a moment before that process sets its gauge.
    let new_leader = &replicas[1 - leader_index];
    poll::until("the new leader's gauge", poll::DEFAULT_TIMEOUT, || async {
        let gauge = new_leader.metric(LEADER_SERIES).await?;
        if gauge == 1.0 {
            Ok(())
        } else {
            Err(format!("gauge is {gauge}"))
        }
    })
    .await;
}

/// A kubeconfig that parses but points nowhere: start-up errors must come before any API call.
fn unreachable_kubeconfig(dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
                users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
                current-context: c\n";
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

async fn run_to_exit(args: &[String]) -> (ExitStatus, String) {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("LEADER_ELECTION_NAMESPACE")
        .env_remove("HEARTBEAT_NAMESPACE")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(EXIT_TIMEOUT, output).await {
        Ok(Ok(out)) => (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Ok(Err(e)) => panic!("cannot run {BIN}: {e}"),
        Err(_) => panic!("{BIN} {args:?} did not exit within {EXIT_TIMEOUT:?}"),
    }
}

#[tokio::test]
async fn t10d_invalid_flags_and_busy_ports_are_start_up_errors() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let base = |extra: &[&str]| -> Vec<String> {
        let mut args = vec![
            "run".to_string(),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-election=false".to_string(),
            "--heartbeat-namespace=garden".to_string(),
            "--metrics-bind-address=0".to_string(),
        ];
        if !extra.iter().any(|a| a.starts_with("--health-bind-address")) {
            args.push("--health-bind-address=0".to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };

    for (flag, value) in [
        ("--disable-controllers", "bogus"),
        ("--controllers", "extension,bogus"),
    ] {
        let (status, stderr) = run_to_exit(&base(&[&format!("{flag}={value}")])).await;
        assert!(!status.success(), "{flag}={value} must fail, got {status}");
        assert!(
            stderr.contains("bogus") && stderr.contains(flag),
            "{stderr}"
        );
    }

    // The catalog and its images are checked before anything runs: an overlay version whose
    // image the image vector does not have stops the process, naming entry, version and image.
    let overlay = dir.path().join("catalog-overlay.yaml");
    std::fs::write(
        &overlay,
        "shims:\n  spin:\n    versions:\n      v9.9.9:\n        image: containerd-shim-spin-nonexistent\n",
    )
    .unwrap_or_else(|e| panic!("write overlay: {e}"));
    let (status, stderr) = run_to_exit(&base(&[&format!(
        "--shim-catalog-overlay={}",
        overlay.display()
    )]))
    .await;
    assert!(
        !status.success(),
        "a missing catalog image must fail, got {status}"
    );
    assert!(
        stderr.contains("catalog.shims[spin].versions[v9.9.9]")
            && stderr.contains("containerd-shim-spin-nonexistent"),
        "{stderr}"
    );
    let (status, stderr) = run_to_exit(&base(&[
        "--custom-shim-download-hosts=github.com,https://evil.example",
    ]))
    .await;
    assert!(!status.success(), "a URL as a host must fail, got {status}");
    assert!(
        stderr.contains("--custom-shim-download-hosts") && stderr.contains("https://evil.example"),
        "{stderr}"
    );

    let (status, stderr) = run_to_exit(&base(&["--heartbeat-renew-interval-seconds=0"])).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--heartbeat-renew-interval-seconds") && stderr.contains("'0'"),
        "{stderr}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let port = taken
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let address = format!("127.0.0.1:{port}");
    let (status, stderr) = run_to_exit(&base(&[&format!("--health-bind-address={address}")])).await;
    assert!(!status.success(), "a busy port must fail, got {status}");
    assert!(stderr.contains(&address), "{stderr}");
}

#[derive(Debug, Parser)]
struct TestCli {
    #[command(flatten)]
    runtime: RuntimeOptions,
}

/// An in-process manager; stopped when dropped.
struct Running {
    stop: CancellationToken,
    task: Option<
        tokio::task::JoinHandle<
            Result<(), gardener_extension_containerd_shim::gardener::runtime::RuntimeError>,
        >,
    >,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

#[tokio::test]
async fn t10d_readyz_waits_for_caches_and_healthz_fails_only_after_the_sync_window() {
    let env = support::Env::load();
    let health = free_port();
    let metrics = free_port();
    let window = Duration::from_secs(5);
    let cli = TestCli::try_parse_from([
        "test".to_string(),
        format!("--kubeconfig={}", env.seed_kubeconfig.display()),
        "--leader-election=false".to_string(),
        "--disable-controllers=heartbeat".to_string(),
        format!("--health-bind-address=127.0.0.1:{health}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        "--healthz-cache-sync-timeout=5s".to_string(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let mut manager = Manager::new(
        cli.runtime,
        EXTENSION,
        &["extension", "healthcheck", "heartbeat"],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    manager
        .add_controller(
            "extension",
            |ctx: ControllerContext| -> BoxFuture<'static, ()> {
                Box::pin(async move {
                    if ctx.wait_until_leader().await.is_err() {
                        return;
                    }
                    ctx.metrics.observe_reconcile(
                        "extension",
                        ReconcileResult::Success,
                        Duration::from_millis(3),
                    );
                    ctx.metrics.observe(
                        "extension",
                        Operation::Reconcile,
                        OperationResult::Succeeded,
                        Duration::from_millis(3),
                    );
                    ctx.shutdown.cancelled().await;
                })
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let cache = manager.readiness().register("extension-cache");
    let registered = Instant::now();
    let stop = CancellationToken::new();
    let mut running = Running {
        stop: stop.clone(),
        task: Some(tokio::spawn(
            manager.run_until(stop.clone().cancelled_owned()),
        )),
    };

    let probe = |path: &'static str| async move { http_get(health, path).await };
    poll::until("/readyz failing and /healthz passing", window, || async {
        match (probe("/readyz").await?, probe("/healthz").await?) {
            ((500, ready), (200, _)) if ready.contains("extension-cache") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let failed_after = poll::until("/healthz failing", poll::DEFAULT_TIMEOUT, || async {
        match probe("/healthz").await? {
            (500, body) if body.contains("extension-cache") => Ok(registered.elapsed()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        failed_after >= window,
        "/healthz failed after {failed_after:?}, before the {window:?} window"
    );
    assert_eq!(probe("/readyz").await.map(|(s, _)| s), Ok(500));

    cache.mark_synced();
    poll::until(
        "/readyz and /healthz passing",
        poll::DEFAULT_TIMEOUT,
        || async {
            match (probe("/readyz").await?, probe("/healthz").await?) {
                ((200, _), (200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    let text = match http_get(metrics, "/metrics").await {
        Ok((200, body)) => body,
        other => panic!("/metrics: {other:?}"),
    };
    for series in [
        r#"controller_runtime_reconcile_total{controller="extension",result="success"} 1"#,
        r#"controller_runtime_reconcile_errors_total{controller="extension"} 0"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="extension"} 1"#,
        r#"gardener_extension_operations_total{controller="extension",operation="reconcile",result="succeeded"} 1"#,
        r#"gardener_extension_operation_duration_seconds_count{controller="extension",operation="reconcile"} 1"#,
        r#"controller_runtime_reconcile_total{controller="healthcheck",result="success"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l == series),
            "missing {series} in\n{text}"
        );
    }
    assert!(
        !text.contains(r#"controller="heartbeat""#),
        "heartbeat is disabled:\n{text}"
    );
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );

    stop.cancel();
    let task = running
        .task
        .take()
        .unwrap_or_else(|| panic!("task taken twice"));
    match tokio::time::timeout(EXIT_TIMEOUT, task).await {
        Ok(Ok(Ok(()))) => {}
        other => panic!("the manager did not stop cleanly: {other:?}"),
    }
    assert!(
        http_get(health, "/healthz").await.is_err(),
        "the health server stops with the manager"
    );
}
