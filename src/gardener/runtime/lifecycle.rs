//! Running what the manager started and stopping it in order: the first event ends the run;
//! lost leadership stops everything at once, anything else stops controllers gracefully, then
//! the leader election, then the HTTP servers.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::error::RuntimeError;
use super::http::ServerTasks;
use super::leader::{self, LeaderElectionConfig, LeaderEnd};
use super::metrics::LeaderMetrics;

/// How long stopping servers may take after controllers stopped.
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// One token per group, because they stop in order: controllers, then the election (which
/// releases the Lease only once nothing reconciles), then the servers.
#[derive(Default)]
pub(super) struct Stops {
    pub controllers: CancellationToken,
    pub leader: CancellationToken,
    pub servers: CancellationToken,
}

/// What the manager runs.
pub(super) struct Started {
    controllers: JoinSet<()>,
    names: HashMap<Id, &'static str>,
    servers: ServerTasks,
    leader: Option<JoinHandle<LeaderEnd>>,
    /// Without leader election nobody else holds the sender; it must outlive the controllers,
    /// or waiting for leadership would see a closed channel.
    idle_leader_tx: Option<watch::Sender<bool>>,
    stop: Stops,
}

impl Started {
    pub(super) fn start(
        starting: Vec<(&'static str, BoxFuture<'static, ()>)>,
        servers: ServerTasks,
        election: Option<(Client, LeaderElectionConfig, LeaderMetrics)>,
        leader_tx: watch::Sender<bool>,
        stop: Stops,
    ) -> Started {
        let (leader, idle_leader_tx) = match election {
            Some((client, config, metrics)) => {
                let election = leader::run(client, config, leader_tx, stop.leader.clone(), metrics)
                    .instrument(tracing::info_span!(
                        "leader-election",
                        logger = "leader-election"
                    ));
                (Some(tokio::spawn(election)), None)
            }
            None => (None, Some(leader_tx)),
        };
        let mut controllers: JoinSet<()> = JoinSet::new();
        let mut names: HashMap<Id, &'static str> = HashMap::new();
        for (name, task) in starting {
            let span = tracing::info_span!("controller", logger = %format!("{name}-controller"), controller = name);
            let handle = controllers.spawn(task.instrument(span));
            names.insert(handle.id(), name);
            tracing::info!(controller = name, "Started controller");
        }
        Started {
            controllers,
            names,
            servers,
            leader,
            idle_leader_tx,
            stop,
        }
    }

    /// Waits for the first event: every event ends the run, normally or not.
    pub(super) async fn first_event(&mut self, shutdown: impl Future<Output = ()>) -> Event {
        let leader_done = async {
            match self.leader.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown => Event::Shutdown,
            end = leader_done => Event::Leader(end),
            Some(done) = self.controllers.join_next_with_id() => Event::Controller(done),
            Some(done) = self.servers.join_next() => Event::Server(done),
        }
    }

    /// The failure an event means (`None` for a requested shutdown). Lost leadership is
    /// `Err`: everything is stopped at once, since another replica may already reconcile.
    pub(super) fn failure_of(
        &mut self,
        event: Event,
    ) -> Result<Option<RuntimeError>, RuntimeError> {
        Ok(match event {
            Event::Shutdown => None,
            Event::Leader(end) => {
                self.leader = None;
                match end {
                    Ok(LeaderEnd::Lost(reason)) => {
                        tracing::error!(reason = %reason, "Leadership lost, stopping immediately");
                        self.stop.controllers.cancel();
                        self.controllers.abort_all();
                        self.stop.servers.cancel();
                        return Err(RuntimeError::LeadershipLost(reason));
                    }
                    Ok(LeaderEnd::Failed(reason)) => Some(RuntimeError::LeaderElection(reason)),
                    Ok(LeaderEnd::Stopped) => {
                        Some(RuntimeError::LeaderElection("stopped unexpectedly".into()))
                    }
                    Err(e) => Some(RuntimeError::LeaderElection(format!(
                        "the task failed: {e}"
                    ))),
                }
            }
            Event::Controller(done) => Some(controller_failure(done, &mut self.names)),
            Event::Server(done) => Some(server_failure(done)),
        })
    }

    /// The graceful stop: controllers (within `timeout`), then the election, then the servers.
    /// Returns what went wrong while the controllers stopped.
    pub(super) async fn stop(mut self, timeout: Duration) -> Option<RuntimeError> {
        self.stop.controllers.cancel();
        let drained = drain(&mut self.controllers, &mut self.names, timeout).await;
        self.stop.leader.cancel();
        if let Some(task) = self.leader.take() {
            // The task bounds its own release; this only guards against a stuck API call.
            match tokio::time::timeout(Duration::from_secs(30), task).await {
                Ok(Ok(LeaderEnd::Lost(reason))) => {
                    tracing::warn!(reason = %reason, "Leadership lost while shutting down")
                }
                Ok(_) => {}
                Err(_) => tracing::warn!("Timed out stopping leader election"),
            }
        }
        drop(self.idle_leader_tx.take());
        self.stop.servers.cancel();
        let _ = tokio::time::timeout(SERVER_STOP_TIMEOUT, async {
            while self.servers.join_next().await.is_some() {}
        })
        .await;
        drained
    }
}

pub(super) enum Event {
    Shutdown,
    Leader(Result<LeaderEnd, JoinError>),
    Controller(Result<(Id, ()), JoinError>),
    Server(Result<(&'static str, String, std::io::Result<()>), JoinError>),
}

fn controller_failure(
    done: Result<(Id, ()), JoinError>,
    running: &mut HashMap<Id, &'static str>,
) -> RuntimeError {
    match done {
        Ok((id, ())) => RuntimeError::ControllerExited {
            name: running.remove(&id).unwrap_or("unknown"),
        },
        Err(e) => {
            let name = running.remove(&e.id()).unwrap_or("unknown");
            RuntimeError::ControllerPanicked {
                name,
                message: join_error_message(e),
            }
        }
    }
}

fn server_failure(
    done: Result<(&'static str, String, std::io::Result<()>), JoinError>,
) -> RuntimeError {
    match done {
        Ok((server, address, result)) => RuntimeError::Server {
            server,
            address,
            reason: match result {
                Ok(()) => "stopped unexpectedly".to_string(),
                Err(e) => e.to_string(),
            },
        },
        Err(e) => RuntimeError::Server {
            server: "HTTP",
            address: "unknown".to_string(),
            reason: join_error_message(e),
        },
    }
}

fn join_error_message(e: JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Waits up to `timeout` for the controllers to stop, then aborts the rest. Returns the first
/// panic, or the timeout.
async fn drain(
    tasks: &mut JoinSet<()>,
    running: &mut HashMap<Id, &'static str>,
    timeout: Duration,
) -> Option<RuntimeError> {
    let mut first_error = None;
    let finished = tokio::time::timeout(timeout, async {
        while let Some(done) = tasks.join_next_with_id().await {
            match done {
                Ok((id, ())) => {
                    running.remove(&id);
                }
                Err(e) => {
                    let name = running.remove(&e.id()).unwrap_or("unknown");
                    let message = join_error_message(e);
                    tracing::error!(controller = name, panic = %message, "Controller panicked while stopping");
                    first_error.get_or_insert(RuntimeError::ControllerPanicked { name, message });
                }
            }
        }
    })
    .await;
    if finished.is_err() {
        let mut names: Vec<&str> = running.values().copied().collect();
        names.sort_unstable();
        tasks.abort_all();
        tracing::error!(controllers = %names.join(", "), "Controllers did not stop in time, aborting them");
        first_error.get_or_insert(RuntimeError::ShutdownTimeout {
            names: names.join(", "),
            timeout,
        });
    }
    first_error
}
