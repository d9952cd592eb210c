//! The manager: builds the client, metrics and readiness from the flags, then runs the HTTP
//! servers, leader election, the heartbeat and the extension's controllers, and stops them.
//!
//! Controllers start on every replica, so that their caches sync and every replica becomes
//! Ready; each waits for leadership before it reconciles. Stopping:
//!
//! - SIGTERM/SIGINT: controllers are told to stop and get the graceful-shutdown timeout, then
//!   the leader-election Lease is released so a stand-by takes over at once.
//! - Leadership lost: fail-stop. Controllers are aborted at once (another replica may already
//!   be reconciling) and `run` returns an error; the process exits non-zero and restarts.
//! - A controller panics or returns, a server fails: like SIGTERM, but `run` returns the error.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::Instrument;

use super::context::ControllerContext;
use super::error::RuntimeError;
use super::heartbeat::{self, HEARTBEAT_CONTROLLER, HeartbeatConfig};
use super::http;
use super::leader::{self, LeaderElectionConfig};
use super::lifecycle::{Started, Stops};
use super::metrics::{LeaderMetrics, ReconcileMetrics};
use super::options::RuntimeOptions;
use super::readiness::Readiness;
use crate::user_agent;

/// The User-Agent component of the leader election's requests.
pub const LEADER_ELECTION_COMPONENT: &str = "leader-election";

/// Where a pod's service account tells its namespace.
const IN_CLUSTER_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Builds a controller's task from its context. It is called before the HTTP servers start,
/// so readiness checks registered in its synchronous part exist before `/readyz` answers.
pub type ControllerFactory = Box<dyn FnOnce(ControllerContext) -> BoxFuture<'static, ()> + Send>;

/// What the flags resolve to for this extension.
#[derive(Debug)]
struct Plan {
    known: Vec<&'static str>,
    enabled: BTreeSet<&'static str>,
    leader_election: Option<LeaderElectionConfig>,
    heartbeat: Option<HeartbeatConfig>,
}

fn plan(
    options: &RuntimeOptions,
    extension_name: &str,
    controllers: &[&'static str],
    in_cluster_namespace: Option<String>,
) -> Result<Plan, RuntimeError> {
    // The heartbeat is built in, so every extension knows its name.
    let mut known: Vec<&'static str> = Vec::new();
    for name in controllers.iter().copied().chain([HEARTBEAT_CONTROLLER]) {
        if !known.contains(&name) {
            known.push(name);
        }
    }
    let enabled = options.enabled_controllers(&known)?;
    let timing = options.leader_election_timing()?;

    let leader_election = if options.leader_election {
        let lease_name = options
            .leader_election_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{extension_name}-leader-election"));
        let namespace = options
            .leader_election_namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .or(in_cluster_namespace)
            .ok_or_else(|| RuntimeError::MissingFlag {
                flag: "--leader-election-namespace",
                why: "with --leader-election outside a cluster (or set LEADER_ELECTION_NAMESPACE)"
                    .to_string(),
            })?;
        Some(LeaderElectionConfig {
            lease_name,
            namespace,
            identity: leader::identity(),
            timing,
        })
    } else {
        None
    };

    let heartbeat = if enabled.contains(HEARTBEAT_CONTROLLER) {
        let namespace = options
            .heartbeat_namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .ok_or_else(|| RuntimeError::MissingFlag {
                flag: "--heartbeat-namespace",
                why: "while the heartbeat controller is enabled (or set HEARTBEAT_NAMESPACE, or \
                      --disable-controllers=heartbeat)"
                    .to_string(),
            })?;
        Some(HeartbeatConfig {
            namespace,
            holder: extension_name.to_string(),
            interval: options.heartbeat_interval(),
        })
    } else {
        None
    };

    Ok(Plan {
        known,
        enabled,
        leader_election,
        heartbeat,
    })
}

/// The plan of this process, whose leader-election namespace defaults to its pod's.
fn plan_in_this_pod(
    options: &RuntimeOptions,
    extension_name: &str,
    controllers: &[&'static str],
) -> Result<Plan, RuntimeError> {
    plan(options, extension_name, controllers, in_cluster_namespace())
}

fn in_cluster_namespace() -> Option<String> {
    std::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The client for `--kubeconfig` (a `:`-separated list is merged), else the inferred one.
async fn build_client(kubeconfig: Option<&OsStr>) -> Result<Client, RuntimeError> {
    let paths: Vec<_> = kubeconfig
        .map(|k| {
            std::env::split_paths(k)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let config = if paths.is_empty() {
        Config::infer().await.map_err(RuntimeError::InferConfig)?
    } else {
        let shown = paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let mut merged: Option<Kubeconfig> = None;
        for path in &paths {
            let file = Kubeconfig::read_from(path).map_err(|source| RuntimeError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            merged = Some(match merged {
                None => file,
                Some(m) => m.merge(file).map_err(|source| RuntimeError::Kubeconfig {
                    path: shown.clone(),
                    source,
                })?,
            });
        }
        let merged = merged.unwrap_or_default();
        Config::from_custom_kubeconfig(merged, &KubeConfigOptions::default())
            .await
            .map_err(|source| RuntimeError::Kubeconfig {
                path: shown,
                source,
            })?
    };
    Client::try_from(config).map_err(RuntimeError::Client)
}

/// `base` sending `agent`; a User-Agent that is no valid header value (a control character
/// in a component name) leaves the requests without one rather than failing.
fn client_with_agent(base: &Client, agent: &str) -> Client {
    user_agent::client_with(base, agent).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "Sending requests without a User-Agent");
        base.clone()
    })
}

/// The runtime of one extension process.
pub struct Manager {
    extension_name: Arc<str>,
    /// The binary name in every client's User-Agent.
    agent: String,
    options: RuntimeOptions,
    plan: Plan,
    client: Client,
    registry: Registry,
    metrics: ReconcileMetrics,
    leader_metrics: LeaderMetrics,
    readiness: Readiness,
    controllers: Vec<(&'static str, ControllerFactory)>,
}

impl Manager {
    /// Checks the flags against the extension (`controllers` are its controller names; the
    /// built-in `heartbeat` is added) and builds the client. Flag errors come first, so they
    /// are reported even without cluster access.
    pub async fn new(
        options: RuntimeOptions,
        extension_name: &str,
        controllers: &[&'static str],
    ) -> Result<Manager, RuntimeError> {
        let plan = plan_in_this_pod(&options, extension_name, controllers)?;
        let client = build_client(options.kubeconfig.as_deref()).await?;
        Ok(Manager::assemble(options, extension_name, plan, client))
    }

    /// Like [`Manager::new`] with a client built elsewhere; `--kubeconfig` is ignored.
    pub fn with_client(
        options: RuntimeOptions,
        extension_name: &str,
        controllers: &[&'static str],
        client: Client,
    ) -> Result<Manager, RuntimeError> {
        let plan = plan_in_this_pod(&options, extension_name, controllers)?;
        Ok(Manager::assemble(options, extension_name, plan, client))
    }

    fn assemble(
        options: RuntimeOptions,
        extension_name: &str,
        plan: Plan,
        client: Client,
    ) -> Manager {
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        let leader_metrics = LeaderMetrics::register(&mut registry);
        for name in &plan.enabled {
            metrics.init_controller(name);
        }
        let readiness = Readiness::new(options.healthz_cache_sync_timeout);
        Manager {
            extension_name: Arc::from(extension_name),
            agent: format!("gardener-extension-{extension_name}"),
            options,
            plan,
            client,
            registry,
            metrics,
            leader_metrics,
            readiness,
            controllers: Vec::new(),
        }
    }

    /// The client every other client of the process is derived from. It sends no
    /// User-Agent; prefer [`Manager::client_for`].
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sets the binary name in the User-Agent (default `gardener-extension-<extension name>`,
    /// Gardener's naming of extension binaries).
    pub fn set_user_agent_binary(&mut self, binary: &str) {
        self.agent = binary.to_string();
    }

    /// The User-Agent of `component` (a controller, `leader-election`, `cache`):
    /// `<binary>/<version> (<component>)`.
    pub fn user_agent(&self, component: &str) -> String {
        user_agent::user_agent(&self.agent, component)
    }

    /// A client that names `component` in its User-Agent and shares the connections of
    /// every other client of the process.
    pub fn client_for(&self, component: &str) -> Client {
        client_with_agent(&self.client, &self.user_agent(component))
    }

    pub fn metrics(&self) -> &ReconcileMetrics {
        &self.metrics
    }

    /// For registering more metric families before [`Manager::run`].
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// Whether `name` runs, per `--controllers` and `--disable-controllers`.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.plan.enabled.contains(name)
    }

    /// The leader-election identity, when leader election is on.
    pub fn identity(&self) -> Option<&str> {
        self.plan
            .leader_election
            .as_ref()
            .map(|l| l.identity.as_str())
    }

    /// Adds a controller. A disabled controller's factory is never called. `name` must be one
    /// of the names given to [`Manager::new`], and each is added once.
    pub fn add_controller<F>(&mut self, name: &'static str, factory: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(ControllerContext) -> BoxFuture<'static, ()> + Send + 'static,
    {
        if name == HEARTBEAT_CONTROLLER || self.controllers.iter().any(|(n, _)| *n == name) {
            return Err(RuntimeError::DuplicateController {
                name: name.to_string(),
            });
        }
        if !self.plan.known.contains(&name) {
            return Err(RuntimeError::UnregisteredController {
                name: name.to_string(),
                known: self.plan.known.join(", "),
            });
        }
        self.controllers.push((name, Box::new(factory)));
        Ok(())
    }

    /// Runs until SIGTERM or SIGINT (then `Ok` after a graceful stop) or a failure.
    pub async fn run(self) -> Result<(), RuntimeError> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|source| RuntimeError::Signal {
            signal: "SIGTERM",
            source,
        })?;
        let mut int = signal(SignalKind::interrupt()).map_err(|source| RuntimeError::Signal {
            signal: "SIGINT",
            source,
        })?;
        self.run_until(async move {
            let received = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = received, "Received signal, shutting down");
        })
        .await
    }

    /// Runs until `shutdown` completes (then `Ok` after a graceful stop) or a failure.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), RuntimeError> {
        let span = tracing::info_span!("manager", logger = "manager");
        self.run_inner(shutdown).instrument(span).await
    }

    async fn run_inner(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), RuntimeError> {
        tracing::info!(
            extension = %self.extension_name,
            gardenerVersion = self.options.gardener_version.as_deref().unwrap_or("unknown"),
            controllers = %self.plan.enabled.iter().copied().collect::<Vec<_>>().join(","),
            leaderElection = self.plan.leader_election.is_some(),
            "Starting manager"
        );

        let stop = Stops::default();
        // Without leader election this replica leads from the start.
        let (leader_tx, leader_rx) = watch::channel(self.plan.leader_election.is_none());
        let context = |name: &'static str| ControllerContext {
            name,
            extension_name: self.extension_name.clone(),
            client: client_with_agent(&self.client, &user_agent::user_agent(&self.agent, name)),
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            leader: leader_rx.clone(),
            // A controller cancelling its own token must not stop the others.
            shutdown: stop.controllers.child_token(),
        };
        let starting = controller_tasks(&self.plan, self.controllers, context);

        let servers = http::start(
            &self.options.health_bind_address,
            &self.options.metrics_bind_address,
            self.readiness.clone(),
            Arc::new(self.registry),
            stop.servers.clone(),
        )
        .await?;

        let election = self.plan.leader_election.clone().map(|config| {
            let client = client_with_agent(
                &self.client,
                &user_agent::user_agent(&self.agent, LEADER_ELECTION_COMPONENT),
            );
            (client, config, self.leader_metrics.clone())
        });
        let mut started = Started::start(starting, servers, election, leader_tx, stop);
        let event = started.first_event(shutdown).await;
        let failure = match started.failure_of(event) {
            Ok(failure) => failure,
            Err(lost) => return Err(lost),
        };
        if let Some(e) = &failure {
            tracing::error!(error = %e, "Stopping after a failure");
        }
        let drained = started.stop(self.options.graceful_shutdown_timeout).await;
        tracing::info!("Manager stopped");
        match failure.or(drained) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The controllers to start, in order: the built-in heartbeat first, then the extension's
/// enabled ones. Built before the HTTP servers start (see [`ControllerFactory`]).
fn controller_tasks(
    plan: &Plan,
    controllers: Vec<(&'static str, ControllerFactory)>,
    context: impl Fn(&'static str) -> ControllerContext,
) -> Vec<(&'static str, BoxFuture<'static, ()>)> {
    let mut starting: Vec<(&'static str, BoxFuture<'static, ()>)> = Vec::new();
    if let Some(config) = plan.heartbeat.clone() {
        starting.push((
            HEARTBEAT_CONTROLLER,
            Box::pin(heartbeat::run(context(HEARTBEAT_CONTROLLER), config)),
        ));
    }
    for (name, factory) in controllers {
        if plan.enabled.contains(name) {
            starting.push((name, factory(context(name))));
        } else {
            tracing::info!(controller = name, "Controller disabled");
        }
    }
    starting
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::options::testing::parse_ok;
    use super::*;

    const CONTROLLERS: &[&str] = &["extension", "healthcheck"];

    #[test]
    fn heartbeat_is_always_known_and_needs_its_namespace() {
        let o = parse_ok(&["--leader-election=false"]);
        let err = plan(&o, "containerd-shim", CONTROLLERS, None)
            .expect_err("heartbeat needs a namespace");
        assert!(err.to_string().contains("--heartbeat-namespace"), "{err}");

        let o = parse_ok(&["--leader-election=false", "--disable-controllers=heartbeat"]);
        let p = plan(&o, "containerd-shim", CONTROLLERS, None).expect("heartbeat disabled");
        assert_eq!(p.known, ["extension", "healthcheck", "heartbeat"]);
        assert!(p.heartbeat.is_none() && p.leader_election.is_none());

        let o = parse_ok(&[
            "--leader-election=false",
            "--heartbeat-namespace=garden",
            "--heartbeat-renew-interval-seconds=7",
        ]);
        let p = plan(&o, "containerd-shim", CONTROLLERS, None).expect("valid");
        let hb = p.heartbeat.expect("heartbeat enabled");
        assert_eq!(
            (hb.namespace.as_str(), hb.holder.as_str(), hb.interval),
            ("garden", "containerd-shim", Duration::from_secs(7))
        );
    }

    #[test]
    fn leader_election_defaults() {
        let o = parse_ok(&["--disable-controllers=heartbeat"]);
        let err = plan(&o, "containerd-shim", CONTROLLERS, None)
            .expect_err("no namespace outside a cluster");
        assert!(
            err.to_string().contains("--leader-election-namespace"),
            "{err}"
        );

        let p = plan(
            &o,
            "containerd-shim",
            CONTROLLERS,
            Some("extension-x".into()),
        )
        .expect("in-cluster namespace");
        let le = p.leader_election.expect("leader election on by default");
        assert_eq!(le.lease_name, "containerd-shim-leader-election");
        assert_eq!(le.namespace, "extension-x");
        assert!(!le.identity.is_empty());

        let o = parse_ok(&[
            "--disable-controllers=heartbeat",
            "--leader-election-id=custom",
            "--leader-election-namespace=ns",
        ]);
        let le = plan(&o, "containerd-shim", CONTROLLERS, Some("ignored".into()))
            .expect("valid")
            .leader_election
            .expect("on");
        assert_eq!(
            (le.lease_name.as_str(), le.namespace.as_str()),
            ("custom", "ns")
        );
    }

    #[test]
    fn unknown_controllers_fail_before_anything_else() {
        let o = parse_ok(&["--disable-controllers=bogus"]);
        let err = plan(&o, "containerd-shim", CONTROLLERS, None).expect_err("bogus");
        assert!(
            matches!(err, RuntimeError::UnknownController { ref name, .. } if name == "bogus"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn add_controller_checks_names() {
        let o = parse_ok(&[
            "--leader-election=false",
            "--disable-controllers=heartbeat",
            "--kubeconfig=/nonexistent",
        ]);
        let config = Config::new("https://127.0.0.1:1".parse().expect("uri"));
        let client = Client::try_from(config).expect("client");
        let mut m = Manager::with_client(o, "containerd-shim", CONTROLLERS, client).expect("valid");
        let noop = |_ctx: ControllerContext| -> BoxFuture<'static, ()> { Box::pin(async {}) };
        assert!(m.add_controller("extension", noop).is_ok());
        assert!(matches!(
            m.add_controller("extension", noop),
            Err(RuntimeError::DuplicateController { .. })
        ));
        assert!(matches!(
            m.add_controller("heartbeat", noop),
            Err(RuntimeError::DuplicateController { .. })
        ));
        assert!(matches!(
            m.add_controller("other", noop),
            Err(RuntimeError::UnregisteredController { .. })
        ));
        assert!(m.is_enabled("extension") && !m.is_enabled("heartbeat"));
        assert!(m.identity().is_none());
    }
}
