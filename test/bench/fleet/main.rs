//! Fleet benchmark: the release-built controller binary against a real seed with N shoot
//! namespaces, each holding a Cluster and a `containerd-shim` Extension with a catalog shim.
//!
//! For every N (default 10, 100, 500, 2000):
//!
//! 1. **Floor** (`floor.rs`): the fastest this API server takes the minimal request chain of a
//!    first reconcile for N objects at the controller's concurrency, sent by the benchmark
//!    itself. Every wave is reported as a ratio to it.
//! 2. **First wave**: a controller with the production resync period (1 h) starts; the time
//!    until gardenlet's readiness check passes for all N (a watch, no polling), its CPU
//!    seconds and peak RSS. Then the time until every Extension also has its health
//!    condition and its first Event: the reports that give way to the wave.
//! 3. **Idle** (at N = `FLEET_IDLE_AT`, default 500): the same process, nothing changing, for
//!    `FLEET_IDLE_SECONDS` (default 300): requests per Extension and minute, the leader election
//!    and the heartbeat separately, and the RSS the process keeps.
//! 4. **Requested wave and resyncs**: the first process stops gracefully (it releases its
//!    Lease); a second one with a resync period of at least `FLEET_RESYNC_SECONDS` and 1.5
//!    times the first wave takes over, gardenlet requests a reconcile of every Extension, then
//!    one resync of all N and a second one in which nothing changed are measured.
//!
//! Requests are counted from the seed's audit log, which the benchmark's control plane writes
//! for every client (`CONTROL_PLANE_AUDIT_ALL=1`, set by `hack/bench.sh`), and split by
//! User-Agent: the controller's components, gardener-resource-manager, kube-controller-manager
//! and the benchmark itself.
//!
//! It is a benchmark, not a test: it prints figures and a JSON file and asserts nothing about
//! time. Run it with `make bench`. Knobs (environment): `FLEET_SIZES`, `FLEET_RESYNC_SECONDS`,
//! `FLEET_IDLE_AT`, `FLEET_IDLE_SECONDS`, `FLEET_OUT_DIR` (default `.local/bench`),
//! `FLEET_EXTRA_ARGS` (more flags for the controller, for experiments).

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../support/mod.rs"]
mod support;

mod audit;
mod floor;
mod report;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, Extension, OPERATION_ANNOTATION, TIMESTAMP_ANNOTATION,
};
use gardener_extension_containerd_shim::gardener::managed_resource::SecretData;
use gardener_extension_containerd_shim::shim::actuator::{ActuatorSettings, ShimActuator};
use gardener_extension_containerd_shim::shim::controllers::{self, CatalogOptions};
use gardener_extension_containerd_shim::shim::identity::ORIGIN;
use gardener_extension_containerd_shim::user_agent;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use audit::{AuditLog, ByActor, Episodes};
use floor::Floor;
use support::bench::{env_or, machine};
use support::gardenlet;
use support::process::{Replica, free_port};

/// The controller's identity in the seed (`SEED_CONTROLLER_KUBECONFIG`).
const CONTROLLER_USER: &str = "containerd-shim-controller";
const LABEL: &str = "bench.containerd-shim/run";
/// How long one phase may take before the benchmark gives up on it (a failure, not a figure).
const PHASE_LIMIT: Duration = Duration::from_secs(20 * 60);
/// The controller's default `--max-concurrent-reconciles`, which the floor uses too.
const CONCURRENCY: usize = 5;
/// The production resync period of the first process.
const PRODUCTION_RESYNC: Duration = Duration::from_secs(3600);

fn main() {
    support::bench::main("fleet benchmark", run());
}

/// What the environment asks for.
struct Knobs {
    sizes: Vec<usize>,
    min_resync: Duration,
    idle_at: usize,
    idle: Duration,
}

/// The benchmark's clients, each naming its purpose in the User-Agent.
struct Clients {
    setup: Client,
    floor: Client,
    observer: Client,
    gardenlet: Client,
}

impl Clients {
    fn new(seed: &Client) -> Clients {
        let with = |purpose: &str| {
            user_agent::client_with(seed, &user_agent::user_agent(audit::BENCH_AGENT, purpose))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        Clients {
            setup: with("setup"),
            floor: with("floor"),
            observer: with("observer"),
            gardenlet: with("gardenlet"),
        }
    }
}

async fn run() {
    let knobs = Knobs {
        sizes: std::env::var("FLEET_SIZES")
            .unwrap_or_else(|_| "10,100,500,2000".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        min_resync: Duration::from_secs(env_or("FLEET_RESYNC_SECONDS", 20)),
        idle_at: env_or("FLEET_IDLE_AT", 500),
        idle: Duration::from_secs(env_or("FLEET_IDLE_SECONDS", 300)),
    };
    let out_dir = std::path::PathBuf::from(
        std::env::var("FLEET_OUT_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.local/bench").into()),
    );
    let c = support::Clusters::connect().await;
    let clients = Clients::new(&c.seed);
    grant_controller(&clients.setup).await;
    let mut log = AuditLog::from_end(&c.env.seed_audit_log);
    require_full_audit(&clients.setup, &mut log).await;
    let bundle = bundle();
    let machine = machine();
    eprintln!("machine: {machine}");

    let mut results = Vec::new();
    for (i, n) in knobs.sizes.iter().copied().enumerate() {
        eprintln!("\n=== N = {n} ===");
        let last = i + 1 == knobs.sizes.len();
        let result = bench_one(
            &c,
            &clients,
            &mut log,
            &knobs,
            &bundle,
            n,
            &format!("r{i}"),
            !last,
        )
        .await;
        report::print(std::slice::from_ref(&result));
        results.push(result);
        // What the phases of this size left in memory is not needed any more.
        log.requests.clear();
    }
    println!(
        "\n===== fleet benchmark (minimum resync period {:?}) =====",
        knobs.min_resync
    );
    report::print(&results);
    let growth = report::growth(&results);
    let report = json!({
        "machine": machine,
        "command": "make bench  (hack/control-plane.sh run --dir .local/bench-control-plane -- cargo bench --bench fleet, CONTROL_PLANE_AUDIT_ALL=1)",
        "minimumResyncPeriodSeconds": knobs.min_resync.as_secs(),
        "idleSeconds": knobs.idle.as_secs(),
        "loadAverageAtEnd": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "rssGrowthPerExtensionKiB": growth,
        "targets": report::targets(&results, growth),
        "fleet": results,
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
    for (target, verdict) in report::targets(&results, growth) {
        println!("target: {target}: {verdict}");
    }
    println!("JSON: {}", file.display());
}

/// The packed bundle the controller writes for the benchmark's Extensions: the floor's
/// Secrets carry the same bytes.
fn bundle() -> SecretData {
    let options = CatalogOptions {
        allow_custom_shims: false,
        ..CatalogOptions::default()
    };
    let (catalog, images) = controllers::load_catalog_and_images(&options)
        .unwrap_or_else(|e| panic!("catalog and image vector: {e}"));
    let client = Client::try_from(kube::Config::new(
        "https://127.0.0.1:1"
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let actuator = ShimActuator::new(
        client,
        Arc::new(catalog),
        Arc::new(images),
        ActuatorSettings::default(),
    );
    let ext = fleet_extension("bench-bundle", "r");
    let shoot_json = support::objects::shoot("bench-bundle");
    let shoot = serde_json::from_value(shoot_json).unwrap_or_else(|e| panic!("shoot: {e}"));
    actuator
        .install_bundle(&ext, &shoot)
        .unwrap_or_else(|e| panic!("the benchmark's bundle: {e}"))
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

/// Fails with the fix when the control plane records only the controller's requests.
async fn require_full_audit(seed: &Client, log: &mut AuditLog) {
    let probe = support::unique_name("bench-audit-probe");
    let _ = Api::<Namespace>::all(seed.clone()).get_opt(&probe).await;
    log.catch_up(jiff::Timestamp::now()).await;
    let recorded = log
        .requests
        .iter()
        .any(|r| r.actor == "benchmark" && r.name == probe);
    assert!(
        recorded,
        "the seed's audit log does not record the benchmark's own requests: start the control \
         plane with CONTROL_PLANE_AUDIT_ALL=1 (`make bench` does)"
    );
    log.requests.clear();
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
        cpu_seconds: (ticks(14) + ticks(15)) / hz,
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

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One phase's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Phase {
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// Every client's requests, by User-Agent.
    pub requests: ByActor,
}

/// The idle phase's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Idle {
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// The controller's requests per Extension and minute, leader election and heartbeat
    /// excluded (they do not grow with the fleet).
    pub per_extension_per_minute: f64,
    /// The controller's requests per minute by component.
    pub controller_per_minute: BTreeMap<String, f64>,
    /// gardener-resource-manager's requests per minute.
    pub grm_per_minute: f64,
    pub rss_mib: f64,
    pub requests: ByActor,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FleetResult {
    pub n: usize,
    /// The floor with gardener-resource-manager applying the bundles, as in a wave.
    pub floor: Floor,
    /// The floor of the API server alone.
    pub floor_api: Floor,
    pub setup_seconds: f64,
    pub ready_seconds: f64,
    /// From the controller's start until gardenlet's check passes for every Extension.
    pub all_succeeded_seconds: f64,
    /// From the controller's start until every Extension also has its health condition and its
    /// first outcome Event: the reports that give way while the wave lasts.
    pub reports_seconds: f64,
    /// The first wave divided by the floor (with GRM), and by the API server's alone.
    pub floor_ratio: f64,
    pub floor_api_ratio: f64,
    /// Peak RSS over both controller processes, and of the first one alone.
    pub peak_rss_mib: f64,
    pub peak_rss_first_run_mib: f64,
    pub rss_at_end_mib: f64,
    /// The resync period of the second controller.
    pub resync_period_seconds: u64,
    /// From gardenlet's reconcile request for every Extension until all are ready again.
    pub requested_wave_seconds: f64,
    pub first_reconcile: Phase,
    pub idle: Option<Idle>,
    pub requested_reconcile: Phase,
    pub first_resync: Phase,
    pub noop_resync: Phase,
    /// The controller's reads (every component, every verb) of the Extensions' namespaces per
    /// Extension in the first wave.
    pub first_wave_reads_per_extension: f64,
    /// Its other reads in the first wave (cluster-wide start-up lists in pages, watches, the
    /// Lease): once per process, not per Extension.
    pub first_wave_other_reads: usize,
    pub episode_first: Episodes,
    pub episode_requested: Episodes,
    pub episode_resync: Episodes,
    pub episode_noop: Episodes,
    /// Health-check status writes per Extension over the whole run.
    pub healthcheck_writes_per_extension: f64,
    pub controller_panicked: bool,
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
    let mut args = args;
    args.extend(
        std::env::var("FLEET_EXTRA_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from),
    );
    Replica::spawn_exact("bench-controller", args, health_port, metrics_port)
}

/// Waits, on a watch, until gardenlet's check passes for all `n` Extensions of this run (with
/// the timestamp `timestamp`, when given).
async fn wait_all_ready(
    extensions: &Api<Extension>,
    selector: &str,
    n: usize,
    timestamp: Option<&str>,
) {
    let ready = |e: &Extension| -> bool {
        let current = timestamp.is_none_or(|ts| {
            e.annotations()
                .get(TIMESTAMP_ANNOTATION)
                .map(String::as_str)
                == Some(ts)
        });
        current && gardenlet::check_extension_object(e).is_ok()
    };
    let mut states: HashMap<String, bool> = HashMap::new();
    let mut listed: Option<HashMap<String, bool>> = None;
    let mut events = watcher::watcher(
        extensions.clone(),
        watcher::Config::default().labels(selector),
    )
    .boxed();
    let deadline = tokio::time::Instant::now() + PHASE_LIMIT;
    loop {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let event = match next {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(e))) => {
                eprintln!("watching the fleet failed ({e}); retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Ok(None) => panic!("the watch of the fleet ended"),
            Err(_) => panic!(
                "not every Extension ready within {PHASE_LIMIT:?}: {} of {n}",
                states.values().filter(|r| **r).count()
            ),
        };
        match event {
            Event::Apply(e) => {
                states.insert(e.namespace().unwrap_or_default(), ready(&e));
            }
            Event::Delete(e) => {
                states.remove(&e.namespace().unwrap_or_default());
            }
            Event::Init => listed = Some(HashMap::new()),
            Event::InitApply(e) => {
                if let Some(l) = &mut listed {
                    l.insert(e.namespace().unwrap_or_default(), ready(&e));
                }
            }
            Event::InitDone => {
                if let Some(l) = listed.take() {
                    states = l;
                }
            }
        }
        if listed.is_none() && states.len() == n && states.values().all(|r| *r) {
            return;
        }
    }
}

/// Waits until every Extension of the fleet has a health condition and a `CreateSucceeded`
/// Event, polling.
async fn wait_reports(
    extensions: &Api<Extension>,
    observer: &Client,
    selector: &str,
    namespaces: &HashSet<String>,
) {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(observer.clone());
    let n = namespaces.len();
    let what = "every Extension's health condition and CreateSucceeded Event";
    support::poll::until_every(what, PHASE_LIMIT, Duration::from_secs(2), || async {
        // A failed list is the state observed, reported if it lasts until the deadline.
        let with_conditions = extensions
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| format!("list the fleet: {e}"))?
            .items
            .iter()
            .filter(|e| e.status.as_ref().is_some_and(|s| !s.conditions.is_empty()))
            .count();
        let published: HashSet<String> = events
            .list(&ListParams::default().fields("reason=CreateSucceeded"))
            .await
            .map_err(|e| format!("list the Events: {e}"))?
            .items
            .into_iter()
            .filter_map(|e| e.metadata.namespace)
            .filter(|ns| namespaces.contains(ns))
            .collect();
        if with_conditions == n && published.len() == n {
            Ok(())
        } else {
            Err(format!(
                "{with_conditions} of {n} with a condition, {} with the Event",
                published.len()
            ))
        }
    })
    .await;
}

/// Fails with the controller's log when it has ended (the benchmark never stops it but in
/// [`stop`]; something else on the machine did, or it crashed).
fn require_running(controller: &mut Replica) {
    if let Some(status) = controller.exited() {
        panic!(
            "the controller ended unexpectedly ({status}):\n{}",
            controller.logs()
        );
    }
}

/// Waits until the controller has counted `target` successful `reconcile` operations.
async fn wait_reconciles(controller: &mut Replica, target: usize) {
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        require_running(controller);
        let done = controller
            .metric(r#"gardener_extension_operations_total{controller="extension",operation="reconcile",result="succeeded"}"#)
            .await
            .unwrap_or(0.0) as usize;
        if done >= target {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{target} reconcile operations: only {done} within {PHASE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Stops a controller the way the kubelet does (SIGTERM), so it releases its Lease; returns its
/// figures just before.
async fn stop(mut controller: Replica) -> (ProcStats, bool) {
    require_running(&mut controller);
    let pid = controller
        .pid()
        .unwrap_or_else(|| panic!("the controller exited early:\n{}", controller.logs()));
    let stats = proc_stats(pid);
    controller.signal("TERM");
    let status = controller.wait_exit().await;
    let logs = controller.logs();
    assert!(
        status.success(),
        "the controller did not stop cleanly ({status}):\n{logs}"
    );
    (stats, logs.contains("panicked"))
}

#[allow(clippy::too_many_arguments)]
async fn bench_one(
    c: &support::Clusters,
    clients: &Clients,
    log: &mut AuditLog,
    knobs: &Knobs,
    bundle: &SecretData,
    n: usize,
    run: &str,
    clean_up: bool,
) -> FleetResult {
    let mut result = FleetResult {
        n,
        ..Default::default()
    };
    eprintln!("N={n}: floor ({n} chains of 5 requests, {CONCURRENCY} at a time)");
    result.floor_api = floor::measure(&clients.floor, run, n, CONCURRENCY, bundle, false).await;
    result.floor = floor::measure(&clients.floor, run, n, CONCURRENCY, bundle, true).await;
    eprintln!(
        "N={n}: floor {:.1} s with gardener-resource-manager applying, {:.1} s for the API server alone",
        result.floor.seconds, result.floor_api.seconds
    );

    let system = support::unique_name("bench-extension-system");
    support::create_namespace(&clients.setup, &system, &[]).await;
    let setup = Instant::now();
    let names: Vec<String> = (0..n)
        .map(|i| support::unique_name(&format!("shoot--bench--{run}-{i}")))
        .collect();
    let timestamp = jiff::Timestamp::now().to_string();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = clients.setup.clone();
            let (timestamp, run) = (timestamp.clone(), run.to_string());
            async move { create_shoot(&seed, &ns, &run, &timestamp).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    result.setup_seconds = setup.elapsed().as_secs_f64();
    let selector = format!("{LABEL}={run}");
    let extensions: Api<Extension> = Api::all(clients.observer.clone());
    let namespaces: HashSet<String> = names.iter().cloned().collect();

    // Phase 1: the first wave, with the production resync period.
    let started_at = jiff::Timestamp::now();
    let started = Instant::now();
    let mut controller = spawn_controller(c, &system, PRODUCTION_RESYNC);
    let pid = controller
        .pid()
        .unwrap_or_else(|| panic!("the controller exited at once"));
    controller.wait_ready().await;
    result.ready_seconds = started.elapsed().as_secs_f64();
    wait_all_ready(&extensions, &selector, n, None).await;
    require_running(&mut controller);
    result.all_succeeded_seconds = started.elapsed().as_secs_f64();
    result.floor_ratio = result.all_succeeded_seconds / result.floor.seconds.max(f64::EPSILON);
    result.floor_api_ratio =
        result.all_succeeded_seconds / result.floor_api.seconds.max(f64::EPSILON);
    let converged_at = jiff::Timestamp::now();
    let first = proc_stats(pid);
    eprintln!(
        "N={n}: all Succeeded {:.1} s after start ({:.2}× the floor, {:.2}× the API server's alone), CPU {:.2} s, peak RSS {:.1} MiB",
        result.all_succeeded_seconds,
        result.floor_ratio,
        result.floor_api_ratio,
        first.cpu_seconds,
        mib(first.vm_hwm_kib)
    );

    // The reports held back during the wave are sent before anything else is measured.
    wait_reports(&extensions, &clients.observer, &selector, &namespaces).await;
    result.reports_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "N={n}: every health condition and first Event written {:.1} s after start",
        result.reports_seconds
    );

    // Phase 2: idle, the same process.
    let mut idle_window = None;
    if n == knobs.idle_at && !knobs.idle.is_zero() {
        settle(log).await;
        let cpu_before = proc_stats(pid).cpu_seconds;
        let from = jiff::Timestamp::now();
        eprintln!("N={n}: idle for {:?}", knobs.idle);
        tokio::time::sleep(knobs.idle).await;
        require_running(&mut controller);
        let to = jiff::Timestamp::now();
        let after = proc_stats(pid);
        idle_window = Some((
            from,
            to,
            after.cpu_seconds - cpu_before,
            mib(after.vm_rss_kib),
        ));
    }
    let (first_end, panicked) = stop(controller).await;
    result.controller_panicked |= panicked;

    // Phase 3: a second process with a short resync period takes over; gardenlet requests a
    // reconcile of every Extension, then the resyncs follow.
    let wave = Duration::from_secs_f64(result.all_succeeded_seconds);
    let resync = knobs
        .min_resync
        .max(Duration::from_secs((wave.as_secs_f64() * 1.5).ceil() as u64));
    result.resync_period_seconds = resync.as_secs();
    let mut controller = spawn_controller(c, &system, resync);
    let pid = controller
        .pid()
        .unwrap_or_else(|| panic!("the controller exited at once"));
    controller.wait_ready().await;
    let requested = jiff::Timestamp::now().to_string();
    let requested_at = jiff::Timestamp::now();
    let requested_started = Instant::now();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let api: Api<Extension> = Api::namespaced(clients.gardenlet.clone(), &ns);
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
    wait_all_ready(&extensions, &selector, n, Some(&requested)).await;
    result.requested_wave_seconds = requested_started.elapsed().as_secs_f64();
    let waved_at = jiff::Timestamp::now();
    let cpu_wave = proc_stats(pid).cpu_seconds;

    let resync_started = Instant::now();
    wait_reconciles(&mut controller, 2 * n).await;
    let resynced_at = jiff::Timestamp::now();
    let cpu_resync = proc_stats(pid).cpu_seconds;
    let resync_seconds = resync_started.elapsed().as_secs_f64();
    eprintln!("N={n}: first resync of all done after {resync_seconds:.1} s (period {resync:?})");
    let noop_started = Instant::now();
    wait_reconciles(&mut controller, 3 * n).await;
    let noop_at = jiff::Timestamp::now();
    let noop_seconds = noop_started.elapsed().as_secs_f64();
    let (end, panicked) = stop(controller).await;
    result.controller_panicked |= panicked;

    // The audit log lags a little behind the requests it records.
    log.catch_up(noop_at).await;
    let phase = |from, to, seconds, cpu| Phase {
        seconds,
        cpu_seconds: cpu,
        requests: ByActor::of(&log.between(from, to)),
    };
    result.first_reconcile = phase(
        started_at,
        converged_at,
        result.all_succeeded_seconds,
        first.cpu_seconds,
    );
    let first_wave = log.between(started_at, converged_at);
    let (fleet_reads, other_reads): (Vec<&&audit::Request>, Vec<&&audit::Request>) = first_wave
        .iter()
        .filter(|r| audit::is_controller(&r.actor) && r.is_read())
        .partition(|r| namespaces.contains(&r.namespace));
    result.first_wave_reads_per_extension = fleet_reads.len() as f64 / n as f64;
    result.first_wave_other_reads = other_reads.len();
    if let Some((from, to, cpu, rss)) = idle_window {
        result.idle = Some(idle(
            &log.between(from, to),
            n,
            to.duration_since(from),
            cpu,
            rss,
        ));
    }
    result.requested_reconcile = phase(
        requested_at,
        waved_at,
        result.requested_wave_seconds,
        cpu_wave,
    );
    result.first_resync = phase(waved_at, resynced_at, resync_seconds, cpu_resync - cpu_wave);
    result.noop_resync = phase(
        resynced_at,
        noop_at,
        noop_seconds,
        end.cpu_seconds - cpu_resync,
    );

    let first_run = log.between(started_at, converged_at);
    result.episode_first = audit::episodes(&first_run, &namespaces, 1)
        .into_iter()
        .next()
        .unwrap_or_default();
    let second_run = log.between(requested_at, noop_at);
    let mut eps = audit::episodes(&second_run, &namespaces, 3).into_iter();
    result.episode_requested = eps.next().unwrap_or_default();
    result.episode_resync = eps.next().unwrap_or_default();
    result.episode_noop = eps.next().unwrap_or_default();
    result.healthcheck_writes_per_extension = log
        .between(started_at, noop_at)
        .iter()
        .filter(|r| {
            r.actor == "controller (healthcheck)"
                && r.verb == "patch"
                && namespaces.contains(&r.namespace)
        })
        .count() as f64
        / n as f64;
    result.peak_rss_first_run_mib = mib(first_end.vm_hwm_kib);
    result.peak_rss_mib = mib(first_end.vm_hwm_kib.max(end.vm_hwm_kib));
    result.rss_at_end_mib = mib(end.vm_rss_kib);

    // The last size needs no clean-up: the control plane goes away with the benchmark.
    if clean_up {
        cleanup(&clients.setup, &names, &system).await;
    }
    result
}

/// Waits until neither the lifecycle nor the health check has written for 15 s (at most two
/// minutes): gardener-resource-manager finishes its work on the last bundles after the wave.
async fn settle(log: &mut AuditLog) {
    let quiet = Duration::from_secs(15);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        log.read_new();
        let now = jiff::Timestamp::now();
        let last_write = log
            .requests
            .iter()
            .rev()
            .find(|r| {
                audit::is_controller(&r.actor)
                    && !r.is_read()
                    && r.resource.starts_with("extensions")
            })
            .map(|r| r.at);
        let silent =
            last_write.is_none_or(|at| now.duration_since(at).as_secs_f64() >= quiet.as_secs_f64());
        if silent || Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn idle(
    requests: &[&audit::Request],
    n: usize,
    span: jiff::SignedDuration,
    cpu: f64,
    rss: f64,
) -> Idle {
    let by_actor = ByActor::of(requests);
    let minutes = span.as_secs_f64() / 60.0;
    let controller_per_minute: BTreeMap<String, f64> = by_actor
        .totals
        .iter()
        .filter(|(a, _)| audit::is_controller(a))
        .map(|(a, count)| (a.clone(), *count as f64 / minutes))
        .collect();
    let fleet_bound: f64 = controller_per_minute
        .iter()
        .filter(|(a, _)| !a.contains("(leader-election)") && !a.contains("(heartbeat)"))
        .map(|(_, v)| v)
        .sum::<f64>()
        // An empty sum of floats is -0.0.
        + 0.0;
    Idle {
        seconds: span.as_secs_f64(),
        cpu_seconds: cpu,
        per_extension_per_minute: fleet_bound / n as f64,
        controller_per_minute,
        grm_per_minute: by_actor.get("gardener-resource-manager") as f64 / minutes,
        rss_mib: rss,
        requests: by_actor,
    }
}

fn fleet_extension(ns: &str, run: &str) -> Extension {
    let config = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                        "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}]});
    let mut ext = support::objects::extension(ns, "containerd-shim", Some(config));
    ext.metadata.labels = Some(BTreeMap::from([(LABEL.to_string(), run.to_string())]));
    ext
}

/// A shoot namespace with its Cluster and Extension, created as gardenlet creates them
/// (operation=reconcile and a timestamp).
async fn create_shoot(seed: &Client, ns: &str, run: &str, timestamp: &str) {
    support::create_namespace(seed, ns, &[("gardener.cloud/role", "shoot")]).await;
    Api::<Cluster>::all(seed.clone())
        .create(
            &PostParams::default(),
            &support::objects::cluster(ns, support::objects::shoot(ns)),
        )
        .await
        .unwrap_or_else(|e| panic!("create Cluster {ns}: {e}"));
    let mut ext = fleet_extension(ns, run);
    ext.metadata.annotations = Some(BTreeMap::from([
        (OPERATION_ANNOTATION.to_string(), "reconcile".to_string()),
        (TIMESTAMP_ANNOTATION.to_string(), timestamp.to_string()),
    ]));
    Api::<Extension>::namespaced(seed.clone(), ns)
        .create(&PostParams::default(), &ext)
        .await
        .unwrap_or_else(|e| panic!("create Extension {ns}: {e}"));
}

/// Finalizers off (the controller is gone), namespaces and Clusters deleted; waits until the
/// namespaces are gone so the next size starts clean.
async fn cleanup(seed: &Client, names: &[String], system: &str) {
    let started = Instant::now();
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = seed.clone();
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
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let _ = Api::<Namespace>::all(seed.clone())
        .delete(system, &DeleteParams::default())
        .await;
    floor::release_managed_resources(seed, names, ORIGIN).await;
    floor::wait_gone(seed, names).await;
    eprintln!("cleaned up in {:.1} s", started.elapsed().as_secs_f64());
}
