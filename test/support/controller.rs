//! Runs the real Extension controller in-process for one test, watching only the test's
//! namespace so tests do not see each other's objects.

use std::sync::Arc;

use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use gardener_extension_containerd_shim::gardener::extension::{
    Actuator, Context, NoObserver, ReconcilerConfig, controller,
};
use kube::Client;
use tokio::sync::oneshot;

use super::poll;

/// A running controller; dropping it stops it.
pub struct RunningController {
    /// The controller's own caches, so a test can wait until the controller has seen a change.
    pub caches: SharedCaches,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningController {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

/// A config for `extension_type` restricted to `namespace`, with a resync long enough that it
/// never fires during a test unless the test asks for it.
pub fn config(extension_type: &str, namespace: &str) -> ReconcilerConfig {
    let mut c = ReconcilerConfig::new(extension_type);
    c.namespace = Some(namespace.to_string());
    c
}

/// Starts the controller and returns once its caches are synced, so every later change is
/// seen as an event.
pub async fn start<A: Actuator>(
    client: Client,
    actuator: A,
    config: ReconcilerConfig,
) -> RunningController {
    let caches = SharedCaches::spawn_in(
        &client,
        // The shim actuator reads its ManagedResource from this cache, as in production.
        gardener_extension_containerd_shim::shim::identity::ORIGIN,
        Some(&config.extension_type),
        config.namespace.as_deref(),
    );
    let ctx = Arc::new(Context::new(
        client,
        actuator,
        caches.clone(),
        config,
        Arc::new(NoObserver),
    ));
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let (synced_tx, synced_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        controller::run(
            ctx,
            async {},
            async move {
                let _ = shutdown_rx.await;
            },
            move || {
                let _ = synced_tx.send(());
            },
        )
        .await;
    });
    match tokio::time::timeout(poll::DEFAULT_TIMEOUT, synced_rx).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("the controller stopped before its caches synced"),
        Err(_) => panic!(
            "the controller's caches did not sync within {:?}",
            poll::DEFAULT_TIMEOUT
        ),
    }
    RunningController {
        caches,
        shutdown: Some(shutdown_tx),
        task,
    }
}
