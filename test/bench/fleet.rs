//! Fleet benchmark: the release-built controller binary against a real seed with N shoot
//! namespaces, each holding a Cluster and a `containerd-shim` Extension with a catalog shim.
//!
//! For every N it reports how long until gardenlet would accept every Extension, the
//! controller's CPU time and peak RSS (`/proc/<pid>/stat`, `VmHWM`), the seed API server's
//! request counters (`apiserver_request_total` deltas from its own `/metrics`, all clients),
//! the controller's own requests (the seed's audit log records the controller identity), and
//! the requests per Extension of each reconcile "episode" (split per namespace at the
//! lifecycle reconciler's second status patch).
//!
//! Two controller processes run one after the other:
//! 1. the first reconcile of all N, with the production resync period (1 h), so that no
//!    resync competes with the first wave;
//! 2. a controller with a short resync period (at least `FLEET_RESYNC_SECONDS`, and 1.5 times
//!    the first wave, so that the waves do not overlap): gardenlet requests a reconcile of
//!    every Extension, then one resync of all N is measured, then another one (no-op).
//!
//! It is a benchmark, not a test: it prints figures and a JSON file and asserts nothing about
//! time. Run it with `make bench` (a fresh control plane of its own). Knobs (environment):
//! `FLEET_SIZES` (default `10,100,500`), `FLEET_RESYNC_SECONDS` (default 20),
//! `FLEET_OUT_DIR` (default `.local/bench`).

#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, Extension, OPERATION_ANNOTATION, TIMESTAMP_ANNOTATION,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use support::process::{Replica, free_port};
use support::{gardenlet, objects};

/// The controller's identity in the seed (`SEED_CONTROLLER_KUBECONFIG`); the audit policy of
/// the control plane records exactly its requests.
const CONTROLLER_USER: &str = "containerd-shim-controller";
/// Field manager of the lifecycle reconciler's writes (the health check uses another one).
const LIFECYCLE_FIELD_MANAGER: &str = "fieldManager=gardener-extension&";
const LABEL: &str = "bench.containerd-shim/run";
/// How long one phase may take before the benchmark gives up on it (a failure, not a figure).
const PHASE_LIMIT: Duration = Duration::from_secs(15 * 60);
/// Reserved for the node-installer micro-benchmark (issue 7, installer part): it will add its
/// figures beside the fleet's once the installer is finished.
const INSTALLER_BENCH: &str =
    "not yet measured (the node installer is being finished; see docs/performance.md)";

fn main() {
    // `cargo test --all-targets` runs bench targets without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("fleet benchmark: run it with `make bench`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start tokio: {e}"));
    runtime.block_on(run());
}

/// Requests this process made, so they can be told apart from the API server's totals.
#[derive(Default)]
struct OwnRequests {
    lists: AtomicU64,
}

async fn run() {
    let sizes: Vec<usize> = std::env::var("FLEET_SIZES")
        .unwrap_or_else(|_| "10,100,500".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let resync = Duration::from_secs(
        std::env::var("FLEET_RESYNC_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let out_dir = PathBuf::from(
        std::env::var("FLEET_OUT_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.local/bench").into()),
    );
    let c = support::Clusters::connect().await;
    grant_controller(&c.seed).await;
    let machine = machine();
    eprintln!("machine: {machine}");

    let mut results = Vec::new();
    for (i, n) in sizes.iter().copied().enumerate() {
        eprintln!("\n=== N = {n} ===");
        let last = i + 1 == sizes.len();
        let result = bench_one(&c, n, resync, &format!("r{i}"), !last).await;
        print_table(std::slice::from_ref(&result));
        results.push(result);
    }
    println!("\n===== fleet benchmark (minimum resync period {resync:?}) =====");
    print_table(&results);
    let report = json!({
        "machine": machine,
        "command": "make bench  (hack/control-plane.sh run --dir .local/bench-control-plane -- cargo bench --bench fleet)",
        "minimumResyncPeriodSeconds": resync.as_secs(),
        "loadAverageAtEnd": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "targets": {
            "steadyStateResyncWritesNoManagedResourceOrSecret": true,
            "peakRssAt500BelowMiB": 64,
            "allSucceededAt500WithinSeconds": 60,
        },
        "fleet": results,
        "installer": INSTALLER_BENCH,
    });
    std::fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    let file = out_dir.join(format!(
        "fleet-{}.json",
        jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ")
    ));
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    println!("JSON: {}", file.display());
    println!("node installer: {INSTALLER_BENCH}");
}

fn machine() -> Value {
    let sh = |cmd: &str| -> String {
        std::process::Command::new("sh")
            .args(["-c", cmd])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    json!({
        "nproc": sh("nproc"),
        "free_g": sh("free -g"),
        "cpu_model": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-"),
        "kernel": sh("uname -r"),
        "load_average_at_start": sh("cat /proc/loadavg"),
    })
}

/// The controller identity may do everything: the benchmark measures work, not RBAC.
async fn grant_controller(seed: &Client) {
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("bench-containerd-shim-controller".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: CONTROLLER_USER.into(),
            ..Default::default()
        }]),
    };
    match Api::<ClusterRoleBinding>::all(seed.clone())
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("cannot bind the controller identity: {e}"),
    }
}

/// One phase's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct Phase {
    seconds: f64,
    cpu_seconds: f64,
    /// `apiserver_request_total` deltas (all clients, minus the benchmark's own LISTs), by
    /// `VERB resource[/subresource]`.
    apiserver_requests: BTreeMap<String, u64>,
    /// The controller identity's requests in the audit log, by `verb resource[/subresource]`.
    controller_requests: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct Episodes {
    /// Extensions for which the episode was seen completely.
    extensions: usize,
    /// Write requests per Extension by `verb resource[/subresource]` (lifecycle reconciler).
    writes_per_extension: BTreeMap<String, f64>,
    /// Read requests per Extension by `verb resource[/subresource]`.
    reads_per_extension: BTreeMap<String, f64>,
    writes_total_per_extension: f64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct FleetResult {
    n: usize,
    setup_seconds: f64,
    ready_seconds: f64,
    /// From the controller's start until gardenlet's check passes for every Extension.
    all_succeeded_seconds: f64,
    /// Peak RSS over both controller processes, and of the first one alone.
    peak_rss_mib: f64,
    peak_rss_first_run_mib: f64,
    rss_at_end_mib: f64,
    /// The resync period of the second controller: the requested minimum, or 1.5 times the
    /// first wave when that is longer.
    resync_period_seconds: u64,
    /// From gardenlet's reconcile request for every Extension until all are ready again.
    requested_wave_seconds: f64,
    first_reconcile: Phase,
    requested_reconcile: Phase,
    first_resync: Phase,
    noop_resync: Phase,
    /// Per-Extension request counts from the audit log, by reconcile episode.
    episode_first: Episodes,
    episode_requested: Episodes,
    episode_resync: Episodes,
    episode_noop: Episodes,
    /// Health-check status writes per Extension over the whole run.
    healthcheck_writes_per_extension: f64,
    targets: BTreeMap<String, String>,
    controller_panicked: bool,
}

/// CPU seconds (user + system) and RSS figures of a process.
struct ProcStats {
    cpu_seconds: f64,
    vm_hwm_kib: u64,
    vm_rss_kib: u64,
}

fn proc_stats(pid: u32) -> ProcStats {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat: {e}"));
    // Fields after the command name (which may contain spaces) start at field 3.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> f64 {
        fields
            .get(i - 3)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let hz = clock_ticks();
    let cpu_seconds = (ticks(14) + ticks(15)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    ProcStats {
        cpu_seconds,
        vm_hwm_kib: kib("VmHWM:"),
        vm_rss_kib: kib("VmRSS:"),
    }
}

fn clock_ticks() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// `apiserver_request_total` by `VERB resource[/subresource]`, summed over the other labels.
async fn apiserver_requests(seed: &Client) -> BTreeMap<String, u64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = seed
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("cannot read the seed API server's /metrics: {e}"));
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let labels = parse_labels(labels);
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let mut resource = get("resource");
        let sub = get("subresource");
        if !sub.is_empty() {
            resource = format!("{resource}/{sub}");
        }
        if resource.is_empty() {
            continue; // non-resource URLs (/readyz, /metrics)
        }
        *out.entry(format!("{} {resource}", get("verb")))
            .or_insert(0) += value as u64;
    }
    out
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        value.push(next);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(*before.get(k).unwrap_or(&0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// One audited request of the controller identity.
#[derive(Clone, Debug)]
struct Audited {
    at: jiff::Timestamp,
    verb: String,
    resource: String,
    namespace: String,
    lifecycle_status_patch: bool,
    healthcheck_status_patch: bool,
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The controller identity's requests in the audit log from byte `from` on.
fn read_audit(path: &Path, from: u64) -> (Vec<Audited>, u64) {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("cannot open the audit log {}: {e}", path.display()));
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(from));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    // Only whole lines: the API server may be writing the last one.
    let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let mut out = Vec::new();
    for line in text[..complete].lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" || event["user"]["username"] != CONTROLLER_USER {
            continue;
        }
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("").to_string();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let verb = event["verb"].as_str().unwrap_or("").to_string();
        let uri = event["requestURI"].as_str().unwrap_or("");
        let status_patch = verb == "patch" && resource == "extensions/status";
        out.push(Audited {
            at: event["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            lifecycle_status_patch: status_patch
                && (uri.contains(LIFECYCLE_FIELD_MANAGER)
                    || uri.ends_with("fieldManager=gardener-extension")),
            healthcheck_status_patch: status_patch && uri.contains("healthcheck"),
            verb,
            resource,
            namespace: object["namespace"].as_str().unwrap_or("").to_string(),
        });
    }
    (out, from + complete.min(len as usize) as u64)
}

fn count_between(
    events: &[Audited],
    from: jiff::Timestamp,
    to: jiff::Timestamp,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in events.iter().filter(|e| e.at >= from && e.at < to) {
        *out.entry(format!("{} {}", e.verb, e.resource)).or_insert(0) += 1;
    }
    out
}

/// Extensions seen, and their writes and reads, for one episode.
#[derive(Clone, Default)]
struct Tally(usize, BTreeMap<String, u64>, BTreeMap<String, u64>);

/// Splits each namespace's requests into reconcile episodes: an episode of the lifecycle
/// reconciler ends with its second status patch (Processing, then Success or Error). Health-check
/// status patches belong to no episode.
fn episodes(events: &[Audited], namespaces: &[String]) -> Vec<Episodes> {
    let mut per_episode: Vec<Tally> = vec![Tally::default(); 3];
    let wanted: std::collections::BTreeSet<&str> = namespaces.iter().map(String::as_str).collect();
    let mut by_ns: BTreeMap<&str, Vec<&Audited>> = BTreeMap::new();
    for e in events {
        if wanted.contains(e.namespace.as_str()) && !e.healthcheck_status_patch {
            by_ns.entry(e.namespace.as_str()).or_default().push(e);
        }
    }
    for list in by_ns.values() {
        let mut episode = 0;
        let mut status_patches = 0;
        let mut writes = BTreeMap::new();
        let mut reads = BTreeMap::new();
        for e in list {
            let key = format!("{} {}", e.verb, e.resource);
            if is_write(&e.verb) {
                *writes.entry(key).or_insert(0u64) += 1;
            } else {
                *reads.entry(key).or_insert(0u64) += 1;
            }
            if e.lifecycle_status_patch {
                status_patches += 1;
                if status_patches == 2 {
                    if let Some(slot) = per_episode.get_mut(episode) {
                        slot.0 += 1;
                        for (k, v) in std::mem::take(&mut writes) {
                            *slot.1.entry(k).or_insert(0) += v;
                        }
                        for (k, v) in std::mem::take(&mut reads) {
                            *slot.2.entry(k).or_insert(0) += v;
                        }
                    }
                    episode += 1;
                    status_patches = 0;
                }
            }
        }
    }
    per_episode
        .into_iter()
        .map(|Tally(count, writes, reads)| {
            let per = |m: BTreeMap<String, u64>| -> BTreeMap<String, f64> {
                m.into_iter()
                    .map(|(k, v)| (k, v as f64 / count.max(1) as f64))
                    .collect()
            };
            let total: u64 = writes.values().sum();
            Episodes {
                extensions: count,
                writes_total_per_extension: total as f64 / count.max(1) as f64,
                writes_per_extension: per(writes),
                reads_per_extension: per(reads),
            }
        })
        .collect()
}

/// The controller process of one phase.
fn spawn_controller(c: &support::Clusters, system: &str, resync: Duration) -> Replica {
    let health_port = free_port();
    let metrics_port = free_port();
    let args = vec![
        "run".to_string(),
        format!(
            "--kubeconfig={}",
            c.env.seed_controller_kubeconfig.display()
        ),
        format!("--leader-election-namespace={system}"),
        format!("--heartbeat-namespace={system}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--resync-period={}s", resync.as_secs()),
    ];
    Replica::spawn_exact("bench-controller", args, health_port, metrics_port)
}

/// Waits until gardenlet's check passes for all `n` Extensions of this run (with the
/// timestamp `timestamp`, when given).
async fn wait_all_ready(
    extensions: &Api<Extension>,
    selector: &str,
    n: usize,
    timestamp: Option<&str>,
    own: &OwnRequests,
) {
    wait_phase("every Extension ready by gardenlet's check", || async {
        own.lists.fetch_add(1, Ordering::Relaxed);
        let list = extensions
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| e.to_string())?;
        let not_ready: Vec<String> = list
            .items
            .iter()
            .filter_map(|e| {
                let stale = timestamp.is_some_and(|ts| {
                    e.annotations()
                        .get(TIMESTAMP_ANNOTATION)
                        .map(String::as_str)
                        != Some(ts)
                });
                if stale {
                    return Some(format!(
                        "{}: old timestamp",
                        e.namespace().unwrap_or_default()
                    ));
                }
                gardenlet::check_extension_object(e)
                    .err()
                    .map(|why| format!("{}: {why:?}", e.namespace().unwrap_or_default()))
            })
            .collect();
        if list.items.len() == n && not_ready.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} of {n} listed, {} not ready, e.g. {:?}",
                list.items.len(),
                not_ready.len(),
                not_ready.first()
            ))
        }
    })
    .await;
}

/// Waits until the controller has counted `target` successful `reconcile` operations.
async fn wait_reconciles(controller: &Replica, target: usize) {
    wait_phase(&format!("{target} reconcile operations"), || async {
        let done = controller
            .metric(r#"gardener_extension_operations_total{controller="extension",operation="reconcile",result="succeeded"}"#)
            .await
            .unwrap_or(0.0) as usize;
        if done >= target {
            Ok(())
        } else {
            Err(format!("{done} of {target}"))
        }
    })
    .await
}

async fn bench_one(
    c: &support::Clusters,
    n: usize,
    min_resync: Duration,
    run: &str,
    clean_up: bool,
) -> FleetResult {
    let own = Arc::new(OwnRequests::default());
    let mut result = FleetResult {
        n,
        ..Default::default()
    };
    let system = support::unique_name("bench-extension-system");
    support::create_namespace(&c.seed, &system, &[]).await;

    // Setup: N shoot namespaces with a Cluster and an Extension each, created as gardenlet
    // creates them (operation=reconcile and a timestamp).
    let setup = Instant::now();
    let names: Vec<String> = (0..n)
        .map(|i| support::unique_name(&format!("shoot--bench--{run}-{i}")))
        .collect();
    let timestamp = jiff::Timestamp::now().to_string();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = c.seed.clone();
            let timestamp = timestamp.clone();
            let run = run.to_string();
            async move { create_shoot(&seed, &ns, &run, &timestamp).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    result.setup_seconds = setup.elapsed().as_secs_f64();
    eprintln!(
        "created {n} namespaces, Clusters and Extensions in {:.1} s",
        result.setup_seconds
    );

    let audit_path = c.env.seed_audit_log.clone();
    let extensions: Api<Extension> = Api::all(c.seed.clone());
    let selector = format!("{LABEL}={run}");

    // Phase 1, the first reconcile: the controller as it runs in production (resync 1 h),
    // so that no resync competes with the first wave.
    let (_, audit_first) = read_audit(&audit_path, 0);
    let metrics_before = apiserver_requests(&c.seed).await;
    let started_at = jiff::Timestamp::now();
    let started = Instant::now();
    let controller = spawn_controller(c, &system, Duration::from_secs(3600));
    let pid = controller
        .pid()
        .unwrap_or_else(|| panic!("the controller exited at once"));
    controller.wait_ready().await;
    result.ready_seconds = started.elapsed().as_secs_f64();
    wait_all_ready(&extensions, &selector, n, None, &own).await;
    result.all_succeeded_seconds = started.elapsed().as_secs_f64();
    let converged_at = jiff::Timestamp::now();
    let first = proc_stats(pid);
    let metrics_first = apiserver_requests(&c.seed).await;
    let lists_first = own.lists.swap(0, Ordering::Relaxed);
    eprintln!(
        "N={n}: all Succeeded {:.1} s after start (ready after {:.1} s), CPU {:.2} s",
        result.all_succeeded_seconds, result.ready_seconds, first.cpu_seconds
    );
    result.controller_panicked |= controller.logs().contains("panicked");
    drop(controller);

    // Phase 2, resyncs: a controller with a short resync period, longer than one wave takes,
    // so that the waves do not overlap. gardenlet's next shoot reconcile starts it: every
    // Extension is reconciled once on request, then once per resync period.
    let wave = Duration::from_secs_f64(result.all_succeeded_seconds);
    let resync = min_resync.max(Duration::from_secs((wave.as_secs_f64() * 1.5).ceil() as u64));
    result.resync_period_seconds = resync.as_secs();
    let (_, audit_second) = read_audit(&audit_path, 0);
    let controller = spawn_controller(c, &system, resync);
    let pid = controller
        .pid()
        .unwrap_or_else(|| panic!("the controller exited at once"));
    controller.wait_ready().await;
    let requested = jiff::Timestamp::now().to_string();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let api: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
            let requested = requested.clone();
            async move {
                let body = json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile", TIMESTAMP_ANNOTATION: requested}}});
                api.patch("containerd-shim", &PatchParams::default(), &Patch::Merge(&body))
                    .await
                    .unwrap_or_else(|e| panic!("request a reconcile of {ns}: {e}"));
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let requested_at = Instant::now();
    wait_all_ready(&extensions, &selector, n, Some(&requested), &own).await;
    result.requested_wave_seconds = requested_at.elapsed().as_secs_f64();
    let waved_at = jiff::Timestamp::now();
    let cpu_wave = proc_stats(pid).cpu_seconds;
    let metrics_wave = apiserver_requests(&c.seed).await;
    let lists_wave = own.lists.swap(0, Ordering::Relaxed);

    let resync_started = Instant::now();
    wait_reconciles(&controller, 2 * n).await;
    let resynced_at = jiff::Timestamp::now();
    let cpu_resync = proc_stats(pid).cpu_seconds;
    let metrics_resync = apiserver_requests(&c.seed).await;
    let resync_seconds = resync_started.elapsed().as_secs_f64();
    eprintln!("N={n}: first resync of all done after {resync_seconds:.1} s (period {resync:?})");
    let noop_started = Instant::now();
    wait_reconciles(&controller, 3 * n).await;
    let noop_at = jiff::Timestamp::now();
    let end = proc_stats(pid);
    let metrics_noop = apiserver_requests(&c.seed).await;
    let noop_seconds = noop_started.elapsed().as_secs_f64();
    result.controller_panicked |= controller.logs().contains("panicked");
    drop(controller);

    // The audit log lags a little behind the requests it records.
    let (events, _) = poll_audit(&audit_path, audit_first, noop_at).await;
    let own_list = |m: BTreeMap<String, u64>, lists: u64| -> BTreeMap<String, u64> {
        let mut m = m;
        if let Some(v) = m.get_mut("LIST extensions") {
            *v = v.saturating_sub(lists);
        }
        m
    };
    result.first_reconcile = Phase {
        seconds: result.all_succeeded_seconds,
        cpu_seconds: first.cpu_seconds,
        apiserver_requests: own_list(delta(&metrics_first, &metrics_before), lists_first),
        controller_requests: count_between(&events, started_at, converged_at),
    };
    result.requested_reconcile = Phase {
        seconds: result.requested_wave_seconds,
        cpu_seconds: cpu_wave,
        apiserver_requests: own_list(delta(&metrics_wave, &metrics_first), lists_wave),
        controller_requests: count_between(&events, converged_at, waved_at),
    };
    result.first_resync = Phase {
        seconds: resync_seconds,
        cpu_seconds: cpu_resync - cpu_wave,
        apiserver_requests: delta(&metrics_resync, &metrics_wave),
        controller_requests: count_between(&events, waved_at, resynced_at),
    };
    result.noop_resync = Phase {
        seconds: noop_seconds,
        cpu_seconds: end.cpu_seconds - cpu_resync,
        apiserver_requests: delta(&metrics_noop, &metrics_resync),
        controller_requests: count_between(&events, resynced_at, noop_at),
    };
    let first_run: Vec<Audited> = events
        .iter()
        .filter(|e| e.at < converged_at)
        .cloned()
        .collect();
    let second_run: Vec<Audited> = events
        .iter()
        .filter(|e| e.at >= converged_at)
        .cloned()
        .collect();
    let _ = audit_second;
    result.episode_first = episodes(&first_run, &names)
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut eps = episodes(&second_run, &names).into_iter();
    result.episode_requested = eps.next().unwrap_or_default();
    result.episode_resync = eps.next().unwrap_or_default();
    result.episode_noop = eps.next().unwrap_or_default();
    let wanted: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
    result.healthcheck_writes_per_extension = events
        .iter()
        .filter(|e| e.healthcheck_status_patch && wanted.contains(e.namespace.as_str()))
        .count() as f64
        / n as f64;
    result.peak_rss_mib = first.vm_hwm_kib.max(end.vm_hwm_kib) as f64 / 1024.0;
    result.peak_rss_first_run_mib = first.vm_hwm_kib as f64 / 1024.0;
    result.rss_at_end_mib = end.vm_rss_kib as f64 / 1024.0;
    result.targets = targets(&result);

    // The last size needs no clean-up: the control plane goes away with the benchmark.
    if clean_up {
        cleanup(c, &names, &system).await;
    }
    result
}

async fn create_shoot(seed: &Client, ns: &str, run: &str, timestamp: &str) {
    support::create_namespace(seed, ns, &[("gardener.cloud/role", "shoot")]).await;
    Api::<Cluster>::all(seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(ns, objects::shoot(ns)),
        )
        .await
        .unwrap_or_else(|e| panic!("create Cluster {ns}: {e}"));
    let config = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                        "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}]});
    let mut ext = objects::extension(ns, "containerd-shim", Some(config));
    ext.metadata.labels = Some(BTreeMap::from([(LABEL.to_string(), run.to_string())]));
    ext.metadata.annotations = Some(BTreeMap::from([
        (OPERATION_ANNOTATION.to_string(), "reconcile".to_string()),
        (TIMESTAMP_ANNOTATION.to_string(), timestamp.to_string()),
    ]));
    Api::<Extension>::namespaced(seed.clone(), ns)
        .create(&PostParams::default(), &ext)
        .await
        .unwrap_or_else(|e| panic!("create Extension {ns}: {e}"));
}

/// Polls once a second (a LIST of 500 Extensions is not free for the API server the
/// controller is measured against) until `check` passes; gives up after [`PHASE_LIMIT`].
async fn wait_phase<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not reached within {PHASE_LIMIT:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Reads the audit log until it holds an event received after `until` (it is written when a
/// request completes), or for at most 30 s.
async fn poll_audit(path: &Path, from: u64, until: jiff::Timestamp) -> (Vec<Audited>, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (events, end) = read_audit(path, from);
        if events.iter().any(|e| e.at >= until) || Instant::now() >= deadline {
            return (events, end);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn targets(r: &FleetResult) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    let steady_writes: Vec<String> = [&r.episode_resync, &r.episode_noop]
        .iter()
        .flat_map(|e| e.writes_per_extension.iter())
        .filter(|(k, v)| (k.contains("managedresources") || k.contains("secrets")) && **v > 0.0)
        .map(|(k, v)| format!("{k}: {v:.2}"))
        .collect();
    t.insert(
        "steady-state resync writes no ManagedResource and no Secret".into(),
        if steady_writes.is_empty() && r.episode_resync.extensions > 0 {
            "met".into()
        } else {
            format!("MISSED {steady_writes:?}")
        },
    );
    if r.n >= 500 {
        t.insert(
            "peak RSS at N=500 below 64 MiB".into(),
            verdict(r.peak_rss_mib < 64.0, format!("{:.1} MiB", r.peak_rss_mib)),
        );
        t.insert(
            "all N=500 Succeeded within 60 s".into(),
            verdict(
                r.all_succeeded_seconds <= 60.0,
                format!("{:.1} s", r.all_succeeded_seconds),
            ),
        );
    }
    t
}

fn verdict(ok: bool, figure: String) -> String {
    if ok {
        format!("met ({figure})")
    } else {
        format!("MISSED ({figure})")
    }
}

/// Stops using the namespaces: finalizers off (the controller is gone), namespaces and
/// Clusters deleted, and waits until the namespaces are gone so the next size starts clean.
async fn cleanup(c: &support::Clusters, names: &[String], system: &str) {
    let started = Instant::now();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = c.seed.clone();
            async move {
                let api: Api<Extension> = Api::namespaced(seed.clone(), &ns);
                let _ = api
                    .patch(
                        "containerd-shim",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = Api::<Cluster>::all(seed.clone())
                    .delete(&ns, &DeleteParams::default())
                    .await;
                let _ = Api::<Namespace>::all(seed)
                    .delete(&ns, &DeleteParams::default())
                    .await;
                Ok::<(), ()>(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .ok();
    let _ = Api::<Namespace>::all(c.seed.clone())
        .delete(system, &DeleteParams::default())
        .await;
    let namespaces: Api<Namespace> = Api::all(c.seed.clone());
    let wanted: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
    support::poll::until(
        "the benchmark's namespaces to be deleted",
        PHASE_LIMIT,
        || async {
            let left = namespaces
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .filter(|n| wanted.contains(n.name_any().as_str()))
                .count();
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} left"))
            }
        },
    )
    .await;
    eprintln!("cleaned up in {:.1} s", started.elapsed().as_secs_f64());
}

fn fmt_map(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_counts(m: &BTreeMap<String, u64>, top: usize) -> String {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.into_iter()
        .take(top)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_table(results: &[FleetResult]) {
    println!(
        "\n{:>5} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "N",
        "ready s",
        "all OK s",
        "CPU 1st s",
        "req wave s",
        "CPU rsync",
        "CPU noop",
        "peak MiB",
        "end MiB",
        "resync s",
        "w/ext 1st",
        "w/ext rsync",
        "w/ext noop"
    );
    for r in results {
        println!(
            "{:>5} {:>7.1} {:>9.1} {:>9.2} {:>9.1} {:>9.2} {:>8.2} {:>8.1} {:>8.1} {:>8} {:>9.2} {:>9.2} {:>9.2}",
            r.n,
            r.ready_seconds,
            r.all_succeeded_seconds,
            r.first_reconcile.cpu_seconds,
            r.requested_wave_seconds,
            r.first_resync.cpu_seconds,
            r.noop_resync.cpu_seconds,
            r.peak_rss_mib,
            r.rss_at_end_mib,
            r.resync_period_seconds,
            r.episode_first.writes_total_per_extension,
            r.episode_resync.writes_total_per_extension,
            r.episode_noop.writes_total_per_extension,
        );
    }
    for r in results {
        println!("\nN={}:", r.n);
        for (name, e) in [
            ("first reconcile", &r.episode_first),
            ("requested reconcile", &r.episode_requested),
            ("first resync", &r.episode_resync),
            ("no-op resync", &r.episode_noop),
        ] {
            println!(
                "  writes/Extension, {name} ({} seen): {}",
                e.extensions,
                fmt_map(&e.writes_per_extension)
            );
            println!(
                "  reads/Extension,  {name}: {}",
                fmt_map(&e.reads_per_extension)
            );
        }
        println!(
            "  health-check status writes/Extension (whole run): {:.2}",
            r.healthcheck_writes_per_extension
        );
        for (name, phase) in [
            ("first reconcile", &r.first_reconcile),
            ("requested reconcile", &r.requested_reconcile),
            ("first resync", &r.first_resync),
            ("no-op resync", &r.noop_resync),
        ] {
            println!(
                "  API server requests, {name} ({:.1} s, all clients): {}",
                phase.seconds,
                fmt_counts(&phase.apiserver_requests, 12)
            );
            println!(
                "  controller requests, {name} (audit log): {}",
                fmt_counts(&phase.controller_requests, 12)
            );
        }
        for (k, v) in &r.targets {
            println!("  target: {k}: {v}");
        }
        if r.controller_panicked {
            println!("  WARNING: the controller log contains \"panicked\"");
        }
    }
}
