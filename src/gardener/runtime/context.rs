//! What the manager hands each controller. Its own module so that the manager and the
//! controllers it runs itself (the heartbeat) both depend on it, not on each other.

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::ReconcileMetrics;
use super::readiness::Readiness;

/// What a controller gets from the manager.
#[derive(Clone)]
pub struct ControllerContext {
    /// The controller's name, for metrics and logs.
    pub name: &'static str,
    /// The extension's name (e.g. `containerd-shim`).
    pub extension_name: Arc<str>,
    /// A client whose User-Agent names this controller.
    pub client: Client,
    pub metrics: ReconcileMetrics,
    pub readiness: Readiness,
    /// Whether this replica leads. Once true it stays true: a leader that loses the Lease
    /// stops the process.
    pub leader: watch::Receiver<bool>,
    /// Cancelled when the controller must stop.
    pub shutdown: CancellationToken,
}

/// The process is stopping; returned by waits that did not finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the process is shutting down")]
pub struct ShuttingDown;

impl ControllerContext {
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Waits until this replica leads; `Err` when the process stops first.
    pub async fn wait_until_leader(&self) -> Result<(), ShuttingDown> {
        let mut leader = self.leader.clone();
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => Err(ShuttingDown),
            led = leader.wait_for(|l| *l) => led.map(|_| ()).map_err(|_| ShuttingDown),
        }
    }
}

impl std::fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerContext")
            .field("name", &self.name)
            .field("extension_name", &self.extension_name)
            .field("leader", &*self.leader.borrow())
            .field("shutdown", &self.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::Config;
    use prometheus_client::registry::Registry;

    use super::*;

    #[tokio::test]
    async fn wait_until_leader_follows_the_channel_and_shutdown() {
        let config = Config::new("https://127.0.0.1:1".parse().expect("uri"));
        let client = Client::try_from(config).expect("client");
        let mut registry = Registry::default();
        let (tx, rx) = watch::channel(false);
        let ctx = ControllerContext {
            name: "extension",
            extension_name: Arc::from("x"),
            client,
            metrics: ReconcileMetrics::register(&mut registry),
            readiness: Readiness::new(Duration::from_secs(1)),
            leader: rx,
            shutdown: CancellationToken::new(),
        };
        let waiting = tokio::spawn({
            let ctx = ctx.clone();
            async move { ctx.wait_until_leader().await }
        });
        assert!(!ctx.is_leader());
        tx.send(true).expect("receiver alive");
        assert_eq!(waiting.await.ok(), Some(Ok(())));
        assert!(ctx.is_leader());

        let (_tx, rx) = watch::channel(false);
        let follower = ControllerContext {
            leader: rx,
            ..ctx.clone()
        };
        follower.shutdown.cancel();
        assert_eq!(follower.wait_until_leader().await, Err(ShuttingDown));
    }
}
