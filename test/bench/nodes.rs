//! Installer-on-real-nodes benchmark (`make bench`): the real controller binary and the real
//! installer DaemonSet on the two nodes of a control plane started with
//! `--nodes containerd1,containerd2` (hack/bench.sh starts one of its own), driven the way the
//! real-node tests of test/nodes drive them (their `Scenario`, reused as it is).
//!
//! Each repetition makes six changes of the desired set, from clean nodes back to clean nodes:
//! install crun, add a second shim (`crun-b`, crun's payload under another handler), remove it
//! again with no pod of it left, add it once more, remove it while a pod of it runs on every
//! node (each node's pod is deleted once that node's removal waits for it), and delete the
//! Extension (which uninstalls everything). For every change and node:
//!
//! - **label**: from the change (the providerConfig patch followed by gardenlet's reconcile
//!   request, or gardenlet's deletion) to the node's readiness label appearing (or going, for a
//!   removal), seen by polling the Node objects every [`LABEL_POLL`];
//! - **done**: for a removal, when the shim's files left the node (`current/crun-b`), for the
//!   deletion when the installer's state directory did; for an addition, the label. The node's
//!   own part: for the first node of the rollout from the controller's return (the bundle is
//!   in the shoot) to its done, for the next from the previous node's done to its own;
//! - **pod gone** (removal with running pods): from the change to the workload pod's deletion
//!   (once the node's label is gone and its containerd restarted and answers: the removal then
//!   waits for the pod only) and to the pod object gone, and from there to the files gone;
//! - **CRI unavailable**: a probe runs inside each node for the whole change, calling
//!   `crictl version` on containerd's socket in a loop; the longest span from the last
//!   successful answer before a failed probe to the first successful answer after it, and the
//!   probe period, which is its resolution;
//! - **systemd**: containerd's restarts in the node's journal (Stopping to Started), their
//!   number, and whether the two nodes' restarts overlapped.
//!
//! A benchmark, not a test: it prints figures and writes `.local/bench/nodes-<time>.json`, and
//! asserts nothing about time; it does check that every repetition leaves the nodes clean, so
//! the real-node tests can run after it. Knobs (environment): `NODES_BENCH_REPETITIONS`
//! (default 2), `NODES_BENCH_PROBE_INTERVAL_MS` (pause between probes, default 100),
//! `NODES_BENCH_OUT_DIR` (default `.local/bench`).

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

// The real-node tests' world and their crun shim; the benchmark uses only part of them, and
// install.rs's tests are not compiled into a benchmark.
#[allow(dead_code, unused_imports)]
#[path = "../nodes/install.rs"]
mod install;
mod nodes_truth;
#[allow(dead_code)]
#[path = "../nodes/scenario.rs"]
mod scenario;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use scenario::{LABEL_PREFIX, NODE_TIMEOUT, STATE_DIR, Scenario, assert_clean};
use support::bench::{env_or, machine, sh};
use support::real_nodes::{RealNode, Restart, now_us};

/// How often the Node objects are read while a change is under way.
const LABEL_POLL: Duration = Duration::from_millis(100);

/// The probe's loop inside a node: one `crictl version` per round, each printed as
/// `<start ns> <end ns> ok|fail`, until the file named by `$1` exists. It stops by itself
/// because killing the `nsenter` that started it would leave it running inside the machine.
const PROBE_SCRIPT: &str = r#"
while [ ! -e "$1" ]; do
  start=$(date +%s%N)
  if crictl --runtime-endpoint unix:///run/containerd/containerd.sock --timeout 1s version >/dev/null 2>&1; then
    result=ok
  else
    result=fail
  fi
  echo "$start $(date +%s%N) $result"
  sleep "$2"
done
"#;

fn main() {
    support::bench::main("installer-on-real-nodes benchmark", run());
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    InstallCrun,
    AddSecondShim,
    RemoveSecondShim,
    AddSecondShimAgain,
    RemoveSecondShimWithPods,
    DeleteExtension,
}

const CHANGES: [Change; 6] = [
    Change::InstallCrun,
    Change::AddSecondShim,
    Change::RemoveSecondShim,
    Change::AddSecondShimAgain,
    Change::RemoveSecondShimWithPods,
    Change::DeleteExtension,
];

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::InstallCrun => "install crun",
            Change::AddSecondShim => "add crun-b",
            Change::RemoveSecondShim => "remove crun-b",
            Change::AddSecondShimAgain => "add crun-b again",
            Change::RemoveSecondShimWithPods => "remove crun-b, pods",
            Change::DeleteExtension => "delete Extension",
        }
    }

    /// The handler whose label shows the change done, and whether it is there afterwards.
    fn label(self) -> (&'static str, bool) {
        match self {
            Change::InstallCrun => ("crun", true),
            Change::AddSecondShim | Change::AddSecondShimAgain => ("crun-b", true),
            Change::RemoveSecondShim | Change::RemoveSecondShimWithPods => ("crun-b", false),
            Change::DeleteExtension => ("crun", false),
        }
    }

    /// What is gone from a node when the change is done there, beyond the label: the removed
    /// shim's files, or everything of ours.
    fn gone_path(self) -> Option<String> {
        match self {
            Change::RemoveSecondShim | Change::RemoveSecondShimWithPods => {
                Some(format!("{STATE_DIR}/current/crun-b"))
            }
            Change::DeleteExtension => Some(STATE_DIR.to_string()),
            _ => None,
        }
    }

    async fn make(self, s: &Scenario) {
        match self {
            Change::InstallCrun | Change::RemoveSecondShim | Change::RemoveSecondShimWithPods => {
                s.apply(install::crun()).await
            }
            Change::AddSecondShim | Change::AddSecondShimAgain => s.apply(crun_and_crun_b()).await,
            Change::DeleteExtension => s.delete().await,
        }
    }
}

/// crun and a second shim of crun's payload under a handler of its own: a change that adds a
/// runtime without a second payload image.
fn crun_and_crun_b() -> Value {
    let mut shims = install::crun();
    shims.as_array_mut().expect("crun() is a list").push(json!(
        {"name": "crun-b", "catalog": {"name": "crun"}, "options": {"SystemdCgroup": false},
         "runtimeClass": {"name": "crun-b", "handler": "crun-b"}}
    ));
    shims
}

/// One `crictl version` call inside a node.
#[derive(Clone, Copy, Debug)]
struct Sample {
    start_ns: u64,
    end_ns: u64,
    ok: bool,
}

/// The CRI probe of one node, running from [`Probe::start`] to [`Probe::stop`].
struct Probe {
    node: RealNode,
    stop_file: String,
    child: tokio::process::Child,
    samples: Arc<Mutex<Vec<Sample>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    stopped: bool,
}

impl Probe {
    fn start(node: &RealNode, interval: Duration) -> Probe {
        let stop_file = format!("/run/{}", support::unique_name("nodes-bench-probe-stop"));
        let pause = format!("{:.3}", interval.as_secs_f64());
        let mut command = node.command(&["sh", "-c", PROBE_SCRIPT, "probe", &stop_file, &pause]);
        command
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = tokio::process::Command::from(command)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the probe on {}: {e}", node.name));
        let stdout = child.stdout.take().expect("piped stdout");
        let samples = Arc::new(Mutex::new(Vec::new()));
        let record = samples.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let fields: Vec<&str> = line.split_whitespace().collect();
                if let [start, end, result] = fields[..]
                    && let (Ok(start_ns), Ok(end_ns)) = (start.parse(), end.parse())
                {
                    record.lock().unwrap().push(Sample {
                        start_ns,
                        end_ns,
                        ok: result == "ok",
                    });
                }
            }
        });
        Probe {
            node: node.clone(),
            stop_file,
            child,
            samples,
            reader: Some(reader),
            stopped: false,
        }
    }

    /// Waits for the probe's first successful answer, so that a change starts with containerd
    /// seen up and the probe's own start-up is not part of any figure.
    async fn wait_first_ok(&self) {
        support::poll::until(
            &format!("the CRI probe on {} to get an answer", self.node.name),
            Duration::from_secs(60),
            || async {
                let samples = self.samples.lock().unwrap();
                if samples.iter().any(|s| s.ok) {
                    Ok(())
                } else {
                    Err(format!("{} probes, none answered", samples.len()))
                }
            },
        )
        .await;
    }

    async fn stop(mut self) -> Vec<Sample> {
        self.node.run(&["touch", &self.stop_file]);
        // The loop notices the file after its current round: at most crictl's timeout and a
        // pause.
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the probe on {} did not stop", self.node.name))
            .expect("wait for the probe");
        assert!(
            status.success(),
            "the probe on {}: {status}",
            self.node.name
        );
        if let Some(reader) = self.reader.take() {
            reader.await.expect("the probe's reader");
        }
        self.node.run(&["rm", "-f", &self.stop_file]);
        self.stopped = true;
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// A benchmark that fails midway must not leave a probe looping inside a node.
impl Drop for Probe {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.node.exec(&["touch", &self.stop_file]);
        }
    }
}

/// A span in which no probe got an answer: from the end of the last successful probe before a
/// failed one to the end of the first successful probe after it.
#[derive(Clone, Copy, Debug)]
struct Outage {
    from_ns: u64,
    to_ns: u64,
    failed: usize,
}

impl Outage {
    fn seconds(&self) -> f64 {
        (self.to_ns - self.from_ns) as f64 / 1e9
    }

    fn overlaps(&self, other: &Outage) -> bool {
        self.from_ns <= other.to_ns && other.from_ns <= self.to_ns
    }
}

fn outages(samples: &[Sample]) -> Vec<Outage> {
    let mut out = Vec::new();
    let mut last_ok: Option<u64> = None;
    let mut failed = 0;
    for s in samples {
        if s.ok {
            if failed > 0
                && let Some(from_ns) = last_ok
            {
                out.push(Outage {
                    from_ns,
                    to_ns: s.end_ns,
                    failed,
                });
            }
            failed = 0;
            last_ok = Some(s.end_ns);
        } else {
            failed += 1;
        }
    }
    out
}

/// Median and maximum of the time between the starts of consecutive probes, in milliseconds.
fn probe_period_ms(samples: &[Sample]) -> (f64, f64) {
    let periods: Vec<f64> = samples
        .windows(2)
        .map(|w| (w[1].start_ns.saturating_sub(w[0].start_ns)) as f64 / 1e6)
        .collect();
    if periods.is_empty() {
        return (0.0, 0.0);
    }
    let max = periods.iter().copied().fold(0.0, f64::max);
    (median(periods).unwrap_or_default(), max)
}

/// What one change did on one node.
#[derive(Clone, Debug)]
struct NodeFigures {
    node: String,
    containerd: u32,
    label_s: f64,
    restarts: Vec<Restart>,
    outages: Vec<Outage>,
    failed_probes: usize,
    probes: usize,
    period_ms: (f64, f64),
    /// When the node's installer pod of the new desired set was created and became Ready,
    /// relative to the change; whole seconds of the API's timestamps. `None` for a deletion.
    pod_created_s: Option<f64>,
    pod_ready_s: Option<f64>,
    /// 1 for the node whose containerd restarted first in this change, 2 for the next: the
    /// DaemonSet's rollout order, which it chooses, and which the label times depend on.
    position: usize,
    /// From containerd's Started to the label, when the change adds a label: the installer's
    /// verification (CRI status and a pod sandbox per handler).
    verify_s: Option<f64>,
    /// When the change was done on the node (see the module's documentation), from the change.
    done_s: f64,
    /// The node's own part of the change: for the first of the rollout from the controller's
    /// return, for the next from the previous node's done.
    own_s: f64,
    /// A removal with running pods: when the node's workload pod was deleted and when it was
    /// gone from the API, from the change.
    pod_deleted_s: Option<f64>,
    pod_gone_s: Option<f64>,
}

impl NodeFigures {
    fn longest_outage(&self) -> Option<&Outage> {
        self.outages
            .iter()
            .max_by(|a, b| a.seconds().total_cmp(&b.seconds()))
    }

    fn systemd_s(&self) -> Vec<f64> {
        self.restarts
            .iter()
            .map(|r| (r.started_us - r.stopping_us) as f64 / 1e6)
            .collect()
    }
}

struct ChangeFigures {
    repetition: usize,
    change: Change,
    start_us: u64,
    /// Until `Scenario::apply` returned (gardenlet's readiness check passed and the bundle was
    /// applied into the shoot), or the Extension was gone.
    controller_s: f64,
    nodes: Vec<NodeFigures>,
}

impl ChangeFigures {
    /// When the last node was done.
    fn nodes_done_s(&self) -> f64 {
        self.nodes.iter().map(|n| n.done_s).fold(0.0, f64::max)
    }

    fn restarts_overlap(&self) -> bool {
        pairs(&self.nodes).any(|(a, b)| {
            a.restarts
                .iter()
                .any(|x| b.restarts.iter().any(|y| x.overlaps(y)))
        })
    }

    fn outages_overlap(&self) -> bool {
        pairs(&self.nodes).any(|(a, b)| {
            a.outages
                .iter()
                .any(|x| b.outages.iter().any(|y| x.overlaps(y)))
        })
    }

    fn json(&self) -> Value {
        let rel = |us: u64| (us as f64 - self.start_us as f64) / 1e6;
        json!({
            "repetition": self.repetition,
            "change": self.change.name(),
            "controllerSeconds": self.controller_s,
            "restartsOverlap": self.restarts_overlap(),
            "criOutagesOverlap": self.outages_overlap(),
            "nodes": self.nodes.iter().map(|n| json!({
                "node": n.node,
                "containerd": n.containerd,
                "labelSeconds": n.label_s,
                "restarts": n.restarts.len(),
                "restartsSystemd": n.restarts.iter().map(|r| json!({
                    "stoppingAtSeconds": rel(r.stopping_us),
                    "startedAtSeconds": rel(r.started_us),
                    "stoppingToStartedSeconds": (r.started_us - r.stopping_us) as f64 / 1e6,
                })).collect::<Vec<_>>(),
                "criUnavailableSeconds": n.longest_outage().map(Outage::seconds),
                "criOutages": n.outages.iter().map(|o| json!({
                    "fromSeconds": rel(o.from_ns / 1000),
                    "toSeconds": rel(o.to_ns / 1000),
                    "seconds": o.seconds(),
                    "failedProbes": o.failed,
                })).collect::<Vec<_>>(),
                "probes": n.probes,
                "failedProbes": n.failed_probes,
                "probePeriodMedianMs": n.period_ms.0,
                "probePeriodMaxMs": n.period_ms.1,
                "installerPodCreatedSeconds": n.pod_created_s,
                "installerPodReadySeconds": n.pod_ready_s,
                "rolloutPosition": n.position,
                "labelAfterStartedSeconds": n.verify_s,
                "doneSeconds": n.done_s,
                "ownSeconds": n.own_s,
                "workloadPodDeletedSeconds": n.pod_deleted_s,
                "workloadPodGoneSeconds": n.pod_gone_s,
                "doneAfterWorkloadPodGoneSeconds": n.pod_gone_s.map(|g| n.done_s - g),
            })).collect::<Vec<_>>(),
            "nodesDoneSeconds": self.nodes_done_s(),
        })
    }
}

fn pairs(nodes: &[NodeFigures]) -> impl Iterator<Item = (&NodeFigures, &NodeFigures)> {
    nodes
        .iter()
        .enumerate()
        .flat_map(move |(i, a)| nodes[i + 1..].iter().map(move |b| (a, b)))
}

/// Whether the node holds nothing at `path` any more (for the state directory: or only an
/// empty one, as `assert_clean` accepts).
fn gone(node: &RealNode, path: &str) -> bool {
    !node.exists(path) || (path == STATE_DIR && node.tree(path).is_empty())
}

/// What [`watch`] saw, per node, in microseconds since the epoch.
#[derive(Default)]
struct Seen {
    /// The label `key` in the wanted state (there with value `ready`, or gone).
    label: BTreeMap<String, u64>,
    /// The change's path gone from the node (when it has one).
    gone: BTreeMap<String, u64>,
    /// The node's workload pod deleted, and gone from the API.
    pod_deleted: BTreeMap<String, u64>,
    pod_gone: BTreeMap<String, u64>,
}

/// Whether a removal on the node is past its containerd restart (the label goes just before
/// it) and containerd answers again: from then on the installer only waits for the pods. A pod
/// deleted earlier meets the restart, and the kubelet's retry of the failed kill (about 10 s
/// later) would be the figure.
fn removal_waits(node: &RealNode, since_us: u64) -> bool {
    !node.containerd_restarts(since_us).is_empty()
        && node
            .exec(&[
                "crictl",
                "--runtime-endpoint",
                "unix:///run/containerd/containerd.sock",
                "--timeout",
                "1s",
                "version",
            ])
            .status
            .success()
}

/// Polls the Node objects (and the nodes' files) until every node shows the change's label
/// state and, when it has one, its path gone. With `pods` (workload pods by node), each node's
/// pod is deleted once that node's label is gone and the removal waits only for it (see
/// [`removal_waits`]), and watched until it is gone too.
async fn watch(
    s: &Scenario,
    start_us: u64,
    nodes: &[RealNode],
    key: &str,
    present: bool,
    gone_path: Option<&str>,
    pods: &BTreeMap<String, String>,
) -> Seen {
    let deadline = tokio::time::Instant::now() + NODE_TIMEOUT;
    let workloads: Api<Pod> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    let mut seen = Seen::default();
    loop {
        let labels = s.node_labels().await;
        let at = now_us();
        for node in nodes {
            let ready = labels
                .get(&node.name)
                .and_then(|l| l.get(key))
                .is_some_and(|v| v == "ready");
            if ready == present {
                seen.label.entry(node.name.clone()).or_insert(at);
            }
            if let Some(path) = gone_path
                && !seen.gone.contains_key(&node.name)
                && gone(node, path)
            {
                seen.gone.insert(node.name.clone(), now_us());
            }
            let Some(pod) = pods.get(&node.name) else {
                continue;
            };
            if seen.label.contains_key(&node.name)
                && !seen.pod_deleted.contains_key(&node.name)
                && removal_waits(node, start_us)
            {
                let deleted = now_us();
                workloads
                    .delete(pod, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("delete pod {pod}: {e}"));
                seen.pod_deleted.insert(node.name.clone(), deleted);
            }
            if seen.pod_deleted.contains_key(&node.name)
                && !seen.pod_gone.contains_key(&node.name)
                && workloads
                    .get_opt(pod)
                    .await
                    .unwrap_or_else(|e| panic!("get pod {pod}: {e}"))
                    .is_none()
            {
                seen.pod_gone.insert(node.name.clone(), now_us());
            }
        }
        let done = seen.label.len() == nodes.len()
            && (gone_path.is_none() || seen.gone.len() == nodes.len())
            && seen.pod_gone.len() == pods.len();
        if done {
            return seen;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {NODE_TIMEOUT:?} waiting for {key} (present: {present}) and {gone_path:?} gone; \
                 label: {:?}; gone: {:?}; pods gone: {:?}; labels: {labels:?}",
                seen.label, seen.gone, seen.pod_gone
            );
        }
        tokio::time::sleep(LABEL_POLL).await;
    }
}

async fn measure(
    s: &Scenario,
    nodes: &[RealNode],
    repetition: usize,
    change: Change,
    interval: Duration,
) -> ChangeFigures {
    // A pod of the shim to be removed on every node, running when the change starts.
    let mut pods = BTreeMap::new();
    if change == Change::RemoveSecondShimWithPods {
        for node in nodes {
            let pod = s.run_pod(node, Some("crun-b"), "sleep 3600").await;
            pods.insert(node.name.clone(), pod);
        }
    }
    let probes: Vec<Probe> = nodes.iter().map(|n| Probe::start(n, interval)).collect();
    for probe in &probes {
        probe.wait_first_ok().await;
    }
    let (handler, present) = change.label();
    let key = format!("{LABEL_PREFIX}{handler}");
    let gone_path = change.gone_path();
    let start_us = now_us();
    let (seen, controller_us) = tokio::join!(
        watch(
            s,
            start_us,
            nodes,
            &key,
            present,
            gone_path.as_deref(),
            &pods
        ),
        async {
            change.make(s).await;
            now_us()
        }
    );
    let labels = &seen.label;
    // The change is over on the nodes when the DaemonSet has rolled out everywhere (a deletion
    // waited for the uninstall already): no restart of it comes later.
    let mut installers = Vec::new();
    if change != Change::DeleteExtension {
        s.wait_rolled_out().await;
        let current = s.current_desired_sha256().await;
        installers = s
            .installer_pods()
            .await
            .into_iter()
            .filter(|p| p.desired_sha256 == current && !p.deleting)
            .collect();
    }
    let end_us = now_us();
    let rel = |t: jiff::Timestamp| (t.as_microsecond() as f64 - start_us as f64) / 1e6;
    let mut figures = Vec::new();
    for (node, probe) in nodes.iter().zip(probes) {
        let samples = probe.stop().await;
        let restarts: Vec<Restart> = node
            .containerd_restarts(start_us)
            .into_iter()
            .filter(|r| r.stopping_us < end_us)
            .collect();
        let pod = installers.iter().find(|p| p.node == node.name);
        let since = |at: Option<&u64>| at.map(|&us| (us as f64 - start_us as f64) / 1e6);
        let done_us = seen
            .gone
            .get(&node.name)
            .copied()
            .unwrap_or(labels[&node.name]);
        figures.push(NodeFigures {
            node: node.name.clone(),
            containerd: node.containerd_major(),
            label_s: (labels[&node.name] - start_us) as f64 / 1e6,
            restarts,
            outages: outages(&samples),
            failed_probes: samples.iter().filter(|s| !s.ok).count(),
            probes: samples.len(),
            period_ms: probe_period_ms(&samples),
            pod_created_s: pod.map(|p| rel(p.created)),
            pod_ready_s: pod.and_then(|p| p.ready_since).map(rel),
            position: 0,
            verify_s: None,
            done_s: (done_us as f64 - start_us as f64) / 1e6,
            own_s: 0.0,
            pod_deleted_s: since(seen.pod_deleted.get(&node.name)),
            pod_gone_s: since(seen.pod_gone.get(&node.name)),
        });
    }
    // A node that did not restart comes last rather than first.
    let first_restart = |n: &NodeFigures| n.restarts.first().map_or(u64::MAX, |r| r.stopping_us);
    let mut order: Vec<usize> = (0..figures.len()).collect();
    order.sort_by_key(|&i| (first_restart(&figures[i]), labels[&figures[i].node]));
    let controller_s = (controller_us as f64 - start_us as f64) / 1e6;
    let mut previous_done = None;
    for (position, &i) in order.iter().enumerate() {
        figures[i].position = position + 1;
        figures[i].own_s = own_part(figures[i].done_s, previous_done, controller_s);
        previous_done = Some(figures[i].done_s);
    }
    for n in figures.iter_mut().filter(|_| present) {
        let label_us = labels[&n.node];
        n.verify_s = n
            .restarts
            .last()
            .map(|r| (label_us as f64 - r.started_us as f64) / 1e6);
    }
    ChangeFigures {
        repetition,
        change,
        start_us,
        controller_s,
        nodes: figures,
    }
}

/// A node's own part of a change, from when it is done: the first node of the rollout from
/// when the controller returned (the bundle was in the shoot), the next from the previous
/// node's done. A node done before that start (the deletion: the controller returns after the
/// nodes) counts from the change.
fn own_part(done_s: f64, previous_done_s: Option<f64>, controller_s: f64) -> f64 {
    let from = previous_done_s.unwrap_or(controller_s);
    if done_s >= from {
        done_s - from
    } else {
        done_s
    }
}

fn header() {
    println!(
        "{:>3}  {:<19} {:<8} {:>4} {:>7} {:>6} {:>6} {:>6} {:>11} {:>9} {:>8} {:>10} {:>9} {:>10} {:>7} {:>9}  overlap",
        "rep",
        "change",
        "node",
        "ctrd",
        "label s",
        "done s",
        "own s",
        "ctrl s",
        "pod del/gone",
        "pod c/r s",
        "restarts",
        "restart@ s",
        "systemd s",
        "CRI down s",
        "failed",
        "period ms"
    );
}

fn print_change(c: &ChangeFigures) {
    let overlap = format!(
        "restarts {}, CRI {}",
        if c.restarts_overlap() { "yes" } else { "no" },
        if c.outages_overlap() { "yes" } else { "no" }
    );
    for n in &c.nodes {
        let systemd = n
            .systemd_s()
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join("+");
        let down = n
            .longest_outage()
            .map(|o| format!("{:.2}", o.seconds()))
            .unwrap_or_else(|| "-".into());
        let restart_at = n
            .restarts
            .iter()
            .map(|r| format!("{:.2}", (r.stopping_us as f64 - c.start_us as f64) / 1e6))
            .collect::<Vec<_>>()
            .join("+");
        // `+ 0.0` turns the -0 of a pod created in the change's first second into 0.
        let whole = |s: Option<f64>| {
            s.map(|s| format!("{:.0}", s.round() + 0.0))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:>3}  {:<19} {:<8} {:>4} {:>7.2} {:>6.2} {:>6.2} {:>6.2} {:>11} {:>9} {:>8} {:>10} {:>9} {:>10} {:>7} {:>9}  {}",
            c.repetition,
            c.change.name(),
            n.node,
            format!("{}.x", n.containerd),
            n.label_s,
            n.done_s,
            n.own_s,
            c.controller_s,
            match (n.pod_deleted_s, n.pod_gone_s) {
                (Some(d), Some(g)) => format!("{d:.2}/{g:.2}"),
                _ => "-".into(),
            },
            format!("{}/{}", whole(n.pod_created_s), whole(n.pod_ready_s)),
            n.restarts.len(),
            if restart_at.is_empty() {
                "-".into()
            } else {
                restart_at
            },
            if systemd.is_empty() {
                "-".into()
            } else {
                systemd
            },
            down,
            format!("{}/{}", n.failed_probes, n.probes),
            format!("{:.0}/{:.0}", n.period_ms.0, n.period_ms.1),
            overlap
        );
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

fn range(v: &[f64]) -> String {
    let Some(m) = median(v.to_vec()) else {
        return "-".into();
    };
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{m:.2} ({min:.2}-{max:.2})")
}

/// Medians (and ranges) over the repetitions, by change and by containerd version, then by
/// rollout position.
fn summary(results: &[ChangeFigures]) -> Value {
    let mut out = Vec::new();
    for (grouping, key) in [
        (
            "containerd",
            (|n: &NodeFigures| n.containerd as usize) as fn(&NodeFigures) -> usize,
        ),
        ("rolloutPosition", |n: &NodeFigures| n.position),
    ] {
        println!(
            "\n{:<19} {:>4} {:>20} {:>20} {:>20} {:>20} {:>20} {:>20} {:>20} {:>9}",
            "change",
            if grouping == "containerd" {
                "ctrd"
            } else {
                "pos"
            },
            "label s",
            "done s",
            "own s",
            "after pod gone s",
            "verify s",
            "CRI down s",
            "systemd s",
            "restarts"
        );
        for change in CHANGES {
            for group in [1, 2] {
                let rows: Vec<&NodeFigures> = results
                    .iter()
                    .filter(|c| c.change == change)
                    .flat_map(|c| c.nodes.iter())
                    .filter(|n| key(n) == group)
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let label: Vec<f64> = rows.iter().map(|n| n.label_s).collect();
                let done: Vec<f64> = rows.iter().map(|n| n.done_s).collect();
                let own: Vec<f64> = rows.iter().map(|n| n.own_s).collect();
                let after_pod: Vec<f64> = rows
                    .iter()
                    .filter_map(|n| n.pod_gone_s.map(|g| n.done_s - g))
                    .collect();
                let verify: Vec<f64> = rows.iter().filter_map(|n| n.verify_s).collect();
                let down: Vec<f64> = rows
                    .iter()
                    .filter_map(|n| n.longest_outage().map(Outage::seconds))
                    .collect();
                let systemd: Vec<f64> = rows.iter().flat_map(|n| n.systemd_s()).collect();
                let restarts: Vec<usize> = rows.iter().map(|n| n.restarts.len()).collect();
                let name = if grouping == "containerd" {
                    format!("{group}.x")
                } else {
                    format!("{group}")
                };
                println!(
                    "{:<19} {:>4} {:>20} {:>20} {:>20} {:>20} {:>20} {:>20} {:>20} {:>9}",
                    change.name(),
                    name,
                    range(&label),
                    range(&done),
                    range(&own),
                    range(&after_pod),
                    range(&verify),
                    range(&down),
                    range(&systemd),
                    format!("{restarts:?}")
                );
                out.push(json!({
                    "change": change.name(),
                    grouping: group,
                    "labelSecondsMedian": median(label),
                    "doneSecondsMedian": median(done),
                    "ownSecondsMedian": median(own),
                    "doneAfterWorkloadPodGoneSecondsMedian": median(after_pod),
                    "labelAfterStartedSecondsMedian": median(verify),
                    "criUnavailableObserved": down.len(),
                    "criUnavailableSecondsMedian": median(down),
                    "systemdStoppingToStartedSecondsMedian": median(systemd),
                    "restartsPerRepetition": restarts,
                }));
            }
        }
    }
    println!(
        "\n{:<19} {:>20} {:>20} {:>20}",
        "change", "controller s", "nodes done s", "controller - nodes s"
    );
    for change in CHANGES {
        let of: Vec<&ChangeFigures> = results.iter().filter(|c| c.change == change).collect();
        let controller: Vec<f64> = of.iter().map(|c| c.controller_s).collect();
        let nodes: Vec<f64> = of.iter().map(|c| c.nodes_done_s()).collect();
        let beyond: Vec<f64> = of
            .iter()
            .map(|c| c.controller_s - c.nodes_done_s())
            .collect();
        println!(
            "{:<19} {:>20} {:>20} {:>20}",
            change.name(),
            range(&controller),
            range(&nodes),
            range(&beyond)
        );
        out.push(json!({
            "change": change.name(),
            "controllerSecondsMedian": median(controller),
            "nodesDoneSecondsMedian": median(nodes),
            "controllerBeyondNodesSecondsMedian": median(beyond),
        }));
    }
    Value::Array(out)
}

async fn run() {
    let repetitions: usize = env_or("NODES_BENCH_REPETITIONS", 2);
    let interval = Duration::from_millis(env_or("NODES_BENCH_PROBE_INTERVAL_MS", 100));
    let out_dir = std::path::PathBuf::from(
        std::env::var("NODES_BENCH_OUT_DIR")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.local/bench").into()),
    );
    let machine = machine();
    let load_at_start = sh("cat /proc/loadavg");
    eprintln!("machine: {machine}\nload average at start: {load_at_start}");

    let s = Scenario::start("nodes-bench").await;
    let nodes: Vec<RealNode> = [1, 2]
        .iter()
        .map(|&major| s.nodes.with_containerd(major).clone())
        .collect();
    println!(
        "installer on real nodes: {repetitions} repetition(s), probe pause {interval:?}, label poll {LABEL_POLL:?}"
    );
    let mut results = Vec::new();
    let mut truth = Vec::new();
    for repetition in 1..=repetitions {
        header();
        for change in CHANGES {
            let figures = measure(&s, &nodes, repetition, change, interval).await;
            print_change(&figures);
            results.push(figures);
            if change == Change::InstallCrun {
                // crun is verified everywhere: the floor, then a drift on the 1.x node.
                for node in &nodes {
                    let floor = nodes_truth::floor(node);
                    println!("floor: {floor}");
                    truth.push(json!({"repetition": repetition, "floor": floor}));
                }
                let drift = nodes_truth::drift(&s, &nodes[0]).await;
                println!("drift: {drift}");
                truth.push(json!({"repetition": repetition, "drift": drift}));
            }
        }
        // Not a figure: the next repetition and the real-node tests need clean nodes.
        for node in &nodes {
            assert_clean(&s.c, node).await;
        }
    }
    println!("\nmedian (min-max) over {repetitions} repetition(s):");
    let summary = summary(&results);
    let load_at_end = sh("cat /proc/loadavg");
    println!("load average: at start {load_at_start}; at end {load_at_end}");

    let report = json!({
        "machine": machine,
        "loadAverageAtStart": load_at_start,
        "loadAverageAtEnd": load_at_end,
        "command": "make bench  (hack/control-plane.sh run --dir .local/bench-nodes-control-plane --nodes containerd1,containerd2 --node-images .local/images -- cargo bench --profile dev --bench nodes)",
        "profile": "dev",
        "repetitions": repetitions,
        "probePauseMs": interval.as_millis() as u64,
        "labelPollMs": LABEL_POLL.as_millis() as u64,
        "summary": summary,
        "changes": results.iter().map(ChangeFigures::json).collect::<Vec<_>>(),
        "truth": truth,
    });
    std::fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    let file = out_dir.join(format!(
        "nodes-{}.json",
        jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ")
    ));
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    println!("JSON: {}", file.display());
}
