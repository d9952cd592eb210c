//! The health-check controller: watches the Extensions of one type, checks each one
//! periodically and on relevant changes, and writes the registered conditions.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use kube::runtime::controller::{self, Action, ReconcileReason, ReconcileRequest};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, applier, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use super::bookkeeping::{Bookkeeping, retry_delay};
use super::config::HealthCheckConfig;
use super::error::HealthCheckError;
use super::reconcile::{Context, reconcile};
use super::triggers::{Change, ExtensionEvents, changes, extensions_in};
use crate::gardener::api::Extension;
use crate::gardener::cache::{SharedCaches, trim_managed_fields};

/// Runs the health-check controller until `shutdown` completes.
///
/// Call it on the leader only, with caches that are already synced (a check reading an
/// unsynced cache would report a ManagedResource as missing). It watches the Extensions of
/// `config.extension_type` itself; `on_synced` is called once, when that watch has delivered
/// its first complete list (the moment to report ready). It is not called if `shutdown`
/// comes first.
///
/// An Extension is checked when it is first seen, when its generation changes, when a
/// ManagedResource in its namespace or its Cluster changes, and otherwise every
/// `config.period`. After `shutdown`, running checks are abandoned and no further write is
/// started; `run` returns once everything has stopped.
///
/// Fails at once, without starting anything, when the configuration is invalid.
pub async fn run<S, R>(
    client: Client,
    caches: SharedCaches,
    config: HealthCheckConfig,
    shutdown: S,
    on_synced: R,
) -> Result<(), HealthCheckError>
where
    S: Future<Output = ()> + Send,
    R: FnOnce() + Send,
{
    config.validate()?;
    let config = Arc::new(config);
    let bookkeeping = Arc::new(Bookkeeping::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (store, writer) = reflector::store::<Extension>();

    let queue = stream::select_all([
        extension_triggers(&client, &config, &bookkeeping, writer),
        managed_resource_triggers(&caches, store.clone()),
        cluster_triggers(&caches, store.clone()),
    ])
    .take_until(stopped(stop_rx.clone()))
    .map(Ok::<_, Infallible>);

    let concurrency = u16::try_from(config.max_concurrent).unwrap_or(u16::MAX);
    let ctx = Arc::new(Context {
        client,
        caches,
        config,
        bookkeeping,
        stop: stop_rx,
    });
    let reconciles = applier(
        |extension, ctx| Box::pin(reconcile(extension, ctx)),
        error_policy,
        ctx,
        store.clone(),
        queue,
        controller::Config::default().concurrency(concurrency),
    )
    .for_each(|result| {
        log_applier_result(result);
        future::ready(())
    });
    let synced = async move {
        // Fails only when the watch is gone, i.e. on shutdown before the first list.
        if store.wait_until_ready().await.is_ok() {
            on_synced();
        }
    };

    let work = async { tokio::join!(reconciles, synced) };
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => {}
        () = shutdown => {
            tracing::info!("stopping the health-check controller");
            stop_tx.send_replace(true);
            work.await;
        }
    }
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the sender is gone, which is a stop as well.
    let _ = stop.wait_for(|stopped| *stopped).await;
}

fn request(obj_ref: ObjectRef<Extension>, reason: &'static str) -> ReconcileRequest<Extension> {
    ReconcileRequest {
        obj_ref,
        reason: ReconcileReason::Custom {
            reason: reason.into(),
        },
    }
}

/// Watches the Extensions, keeps the store of ours current and triggers checks of new ones and
/// of new generations.
fn extension_triggers(
    client: &Client,
    config: &Arc<HealthCheckConfig>,
    bookkeeping: &Arc<Bookkeeping>,
    mut writer: reflector::store::Writer<Extension>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    let api: Api<Extension> = match &config.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let mut events = ExtensionEvents::new(config.clone(), bookkeeping.clone());
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim_managed_fields::<Extension>)
        .flat_map(move |event| {
            let triggers = match event {
                Ok(event) => {
                    let filtered = events.on_event(event);
                    // Store first: the applier looks the object up when the trigger arrives.
                    if let Some(store_event) = &filtered.store_event {
                        writer.apply_watcher_event(store_event);
                    }
                    filtered.triggers
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching Extensions failed; retrying with backoff");
                    Vec::new()
                }
            };
            stream::iter(triggers)
        })
        .map(|r| request(r, "Extension created or its generation changed"))
        .boxed()
}

fn managed_resource_triggers(
    caches: &SharedCaches,
    store: Store<Extension>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    changes(caches.managed_resources.subscribe())
        .flat_map(move |change| {
            let refs = match change {
                Change::Changed(mr) => match mr.namespace {
                    Some(namespace) => extensions_in(&store.state(), &namespace, false),
                    None => Vec::new(),
                },
                Change::Missed => all(&store),
            };
            stream::iter(refs)
        })
        .map(|r| request(r, "a ManagedResource in its namespace changed"))
        .boxed()
}

fn cluster_triggers(
    caches: &SharedCaches,
    store: Store<Extension>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    changes(caches.clusters.subscribe())
        .flat_map(move |change| {
            let refs = match change {
                // A Cluster is named like the shoot namespace it belongs to.
                Change::Changed(cluster) => extensions_in(&store.state(), &cluster.name, true),
                Change::Missed => all(&store),
            };
            stream::iter(refs)
        })
        .map(|r| request(r, "its Cluster changed"))
        .boxed()
}

fn all(store: &Store<Extension>) -> Vec<ObjectRef<Extension>> {
    store
        .state()
        .iter()
        .map(|e| ObjectRef::from_obj(e.as_ref()))
        .collect()
}

fn error_policy(extension: Arc<Extension>, error: &HealthCheckError, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(extension.as_ref());
    let failures = ctx.bookkeeping.record_failure(&key);
    let delay = retry_delay(failures, ctx.config.period);
    tracing::warn!(extension = %key, %error, failures, retry_in = ?delay, "health check failed");
    Action::requeue(delay)
}

fn log_applier_result(
    result: Result<(ObjectRef<Extension>, Action), controller::Error<HealthCheckError, Infallible>>,
) {
    match result {
        Ok((extension, action)) => tracing::debug!(%extension, ?action, "checked"),
        // Logged with its details by the error policy.
        Err(controller::Error::ReconcilerFailed(..)) => {}
        // A scheduled check of an Extension deleted meanwhile.
        Err(controller::Error::ObjectNotFound(extension)) => {
            tracing::debug!(%extension, "not checking an Extension that is gone")
        }
        Err(e) => tracing::error!(error = %e, "health-check controller error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// The process runtime spawns the controller on a multi-threaded runtime.
    #[allow(dead_code)]
    fn run_is_send(client: Client, caches: SharedCaches, config: HealthCheckConfig) {
        assert_send(&run(client, caches, config, std::future::pending(), || {}));
    }

    #[tokio::test]
    async fn an_invalid_configuration_starts_nothing() {
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let caches = SharedCaches::spawn(&client, "test");
        let result = run(
            client,
            caches,
            HealthCheckConfig::new("containerd-shim"),
            std::future::pending(),
            || panic!("must not report synced"),
        )
        .await;
        assert!(
            matches!(result, Err(HealthCheckError::InvalidConfig(_))),
            "{result:?}"
        );
    }
}
