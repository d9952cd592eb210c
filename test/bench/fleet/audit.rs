//! The seed's audit log, which the benchmark's control plane writes for every client
//! (`CONTROL_PLANE_AUDIT_ALL=1`): requests told apart by their User-Agent, so the controller's
//! components, gardener-resource-manager, kube-controller-manager and the benchmark itself are
//! counted separately without guessing from time windows.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary name in the controller's User-Agent.
pub const CONTROLLER_AGENT: &str = "gardener-extension-containerd-shim/";
/// The benchmark's own User-Agent (its binary name).
pub const BENCH_AGENT: &str = "fleet-benchmark";
/// Field manager of the lifecycle reconciler's writes (the health check uses another one).
const LIFECYCLE_FIELD_MANAGER: &str = "fieldManager=gardener-extension";

/// Who sent a request, from its User-Agent.
pub fn actor(user_agent: &str) -> String {
    if let Some(rest) = user_agent.strip_prefix(CONTROLLER_AGENT) {
        let component = rest
            .split_once('(')
            .and_then(|(_, c)| c.split_once(')'))
            .map_or("?", |(c, _)| c);
        return format!("controller ({component})");
    }
    if user_agent.is_empty() {
        return "(no User-Agent)".to_string();
    }
    let binary = user_agent.split(['/', ' ']).next().unwrap_or(user_agent);
    match binary {
        b if b.starts_with(BENCH_AGENT) => "benchmark".to_string(),
        b if b.contains("resource-manager") => "gardener-resource-manager".to_string(),
        b => b.to_string(),
    }
}

/// Whether an actor is one of the controller's components.
pub fn is_controller(actor: &str) -> bool {
    actor.starts_with("controller (")
}

/// One audited request.
#[derive(Clone, Debug)]
pub struct Request {
    pub at: jiff::Timestamp,
    pub actor: String,
    pub verb: String,
    /// `resource[/subresource]`.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// A status patch of the lifecycle reconciler (Processing, Success, Error).
    pub lifecycle_status_patch: bool,
}

impl Request {
    pub fn key(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }

    pub fn is_read(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }
}

/// Reads the audit log as it grows.
pub struct AuditLog {
    path: PathBuf,
    offset: u64,
    /// Requests are logged at several stages; each is counted once.
    seen: HashSet<String>,
    /// Everything read so far, in log order.
    pub requests: Vec<Request>,
}

impl AuditLog {
    /// Starts at the current end of the log: earlier requests are not counted.
    pub fn from_end(path: &Path) -> AuditLog {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        AuditLog {
            path: path.to_path_buf(),
            offset,
            seen: HashSet::new(),
            requests: Vec::new(),
        }
    }

    /// Reads what was appended since the last call (whole lines only).
    pub fn read_new(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return;
        }
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.offset += complete as u64;
        for line in bytes[..complete].split(|b| *b == b'\n') {
            if let Some(request) = self.parse(line) {
                self.requests.push(request);
            }
        }
    }

    fn parse(&mut self, line: &[u8]) -> Option<Request> {
        let event: Value = serde_json::from_slice(line).ok()?;
        let stage = event["stage"].as_str()?;
        if stage != "ResponseComplete" && stage != "ResponseStarted" {
            return None;
        }
        let id = event["auditID"].as_str()?.to_string();
        if !self.seen.insert(id) {
            return None;
        }
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("").to_string();
        if resource.is_empty() {
            // Non-resource URLs (/healthz, /metrics, discovery).
            resource = "(non-resource)".to_string();
        }
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let verb = event["verb"].as_str().unwrap_or("").to_string();
        let uri = event["requestURI"].as_str().unwrap_or("");
        let actor = actor(event["userAgent"].as_str().unwrap_or(""));
        Some(Request {
            at: event["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            lifecycle_status_patch: is_controller(&actor)
                && verb == "patch"
                && resource == "extensions/status"
                && (uri.contains(&format!("{LIFECYCLE_FIELD_MANAGER}&"))
                    || uri.ends_with(LIFECYCLE_FIELD_MANAGER)),
            actor,
            verb,
            resource,
            namespace: object["namespace"].as_str().unwrap_or("").to_string(),
            name: object["name"].as_str().unwrap_or("").to_string(),
        })
    }

    /// Reads until the log holds a request received at or after `until` (the API server logs
    /// a request when it completes), for at most 30 s.
    pub async fn catch_up(&mut self, until: jiff::Timestamp) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.read_new();
            if self.requests.iter().rev().any(|r| r.at >= until) || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The requests received in `[from, to)`.
    pub fn between(&self, from: jiff::Timestamp, to: jiff::Timestamp) -> Vec<&Request> {
        self.requests
            .iter()
            .filter(|r| r.at >= from && r.at < to)
            .collect()
    }
}

/// Requests per actor, and per actor by `verb resource`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ByActor {
    pub totals: BTreeMap<String, u64>,
    pub by_request: BTreeMap<String, BTreeMap<String, u64>>,
}

impl ByActor {
    pub fn of(requests: &[&Request]) -> ByActor {
        let mut out = ByActor::default();
        for r in requests {
            *out.totals.entry(r.actor.clone()).or_insert(0) += 1;
            *out.by_request
                .entry(r.actor.clone())
                .or_default()
                .entry(r.key())
                .or_insert(0) += 1;
        }
        out
    }

    /// All of the controller's components together.
    pub fn controller_total(&self) -> u64 {
        self.totals
            .iter()
            .filter(|(a, _)| is_controller(a))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn get(&self, actor: &str) -> u64 {
        self.totals.get(actor).copied().unwrap_or(0)
    }
}

/// The controller's requests per Extension of one reconcile episode.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Episodes {
    /// Extensions for which the episode was seen completely.
    pub extensions: usize,
    /// Writes per Extension by `verb resource` (every component of the controller).
    pub writes_per_extension: BTreeMap<String, f64>,
    /// Reads per Extension by `verb resource`.
    pub reads_per_extension: BTreeMap<String, f64>,
    pub writes_total_per_extension: f64,
    pub reads_total_per_extension: f64,
}

/// Splits each namespace's controller requests into reconcile episodes: an episode of the
/// lifecycle reconciler ends with its second status patch (Processing, then Success or
/// Error). Health-check status patches belong to no episode; the health check's other requests
/// in the namespace (reads, when it makes any) count in the episode they fall into.
pub fn episodes(
    requests: &[&Request],
    namespaces: &HashSet<String>,
    count: usize,
) -> Vec<Episodes> {
    #[derive(Clone, Default)]
    struct Tally(usize, BTreeMap<String, u64>, BTreeMap<String, u64>);
    let mut per_episode: Vec<Tally> = vec![Tally::default(); count];
    let mut by_ns: BTreeMap<&str, Vec<&Request>> = BTreeMap::new();
    for r in requests {
        let health_status = r.actor == "controller (healthcheck)" && r.verb == "patch";
        if is_controller(&r.actor) && namespaces.contains(&r.namespace) && !health_status {
            by_ns.entry(r.namespace.as_str()).or_default().push(r);
        }
    }
    for list in by_ns.values() {
        let mut episode = 0;
        let mut status_patches = 0;
        let mut writes = BTreeMap::new();
        let mut reads = BTreeMap::new();
        for r in list {
            let target = if r.is_read() { &mut reads } else { &mut writes };
            *target.entry(r.key()).or_insert(0u64) += 1;
            if r.lifecycle_status_patch {
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
        .map(|Tally(seen, writes, reads)| {
            let per = |m: &BTreeMap<String, u64>| -> BTreeMap<String, f64> {
                m.iter()
                    .map(|(k, v)| (k.clone(), *v as f64 / seen.max(1) as f64))
                    .collect()
            };
            let total =
                |m: &BTreeMap<String, u64>| m.values().sum::<u64>() as f64 / seen.max(1) as f64;
            Episodes {
                extensions: seen,
                writes_total_per_extension: total(&writes),
                reads_total_per_extension: total(&reads),
                writes_per_extension: per(&writes),
                reads_per_extension: per(&reads),
            }
        })
        .collect()
}
