//! The health-check controller: watches the Extensions of one type, checks each one
//! periodically and on relevant changes, and writes the registered conditions.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use kube::Client;
use kube::runtime::applier;
use kube::runtime::controller::{self, Action, ReconcileReason, ReconcileRequest};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use super::bookkeeping::{Bookkeeping, retry_delay};
use super::config::HealthCheckConfig;
use super::error::HealthCheckError;
use super::reconcile::{Context, reconcile};
use super::triggers::{Change, ExtensionEvents, changes, extensions_in};
use crate::gardener::api::Extension;
use crate::gardener::cache::SharedCaches;

/// How long a triggered check waits for more triggers of the same Extension: during a
/// rollout gardener-resource-manager rewrites a ManagedResource's status several times within
/// a second or two, and one check after the burst writes what all of them would have.
pub const TRIGGER_DEBOUNCE: Duration = Duration::from_secs(1);

/// How far the Extension filter may fall behind the shared cache before the cache waits.
const EVENT_BUFFER: usize = 1024;

/// Runs the health-check controller until `shutdown` completes.
///
/// Call it on the leader only, with caches that are already synced (a check reading an
/// unsynced cache would report a ManagedResource as missing). It follows the Extensions of
/// `config.extension_type` in the shared Extension cache; `on_synced` is called once, when it
/// has taken them over (the moment to report ready). It is not called if `shutdown` comes
/// first.
///
/// An Extension is checked when it is first seen, when its generation changes, when a
/// ManagedResource in its namespace, its Cluster or another input a check watches changes
/// (after [`TRIGGER_DEBOUNCE`]), and otherwise every `config.period`. A check computes from
/// the caches and writes only what changed, so a check whose inputs did not change sends no
/// request. After `shutdown`, running checks are abandoned and no further write is started;
/// `run` returns once everything has stopped.
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
    let store = caches.extensions.store().clone();
    caches.extensions.wait_until_ready().await;

    let mut sources = vec![
        extension_triggers(&caches, &config, &bookkeeping),
        managed_resource_triggers(&caches, &config),
        cluster_triggers(&caches, &config),
    ];
    sources.extend(check_triggers(&caches, &config));
    let queue = stream::select_all(sources)
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
        store,
        queue,
        controller::Config::default()
            .concurrency(concurrency)
            .debounce(TRIGGER_DEBOUNCE),
    )
    .for_each(|result| {
        log_applier_result(result);
        future::ready(())
    });
    on_synced();

    tokio::pin!(reconciles);
    tokio::select! {
        _ = &mut reconciles => {}
        () = shutdown => {
            tracing::info!("stopping the health-check controller");
            stop_tx.send_replace(true);
            reconciles.await;
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

/// Follows the shared Extension cache: every Extension of ours once at the start, then new
/// ones and new generations.
fn extension_triggers(
    caches: &SharedCaches,
    config: &Arc<HealthCheckConfig>,
    bookkeeping: &Arc<Bookkeeping>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    let changes = caches.extensions.subscribe(EVENT_BUFFER);
    let mut events = ExtensionEvents::new(
        config.clone(),
        bookkeeping.clone(),
        caches.extensions.store().clone(),
    );
    let initial = events.start();
    let updates = stream::unfold((changes, events), |(mut changes, mut events)| async move {
        let change = changes.recv().await?;
        let triggers = events.on_event(change);
        Some((stream::iter(triggers), (changes, events)))
    })
    .flatten();
    stream::iter(initial)
        .chain(updates)
        .map(|r| request(r, "Extension created or its generation changed"))
        .boxed()
}

fn managed_resource_triggers(
    caches: &SharedCaches,
    config: &Arc<HealthCheckConfig>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    let extensions = caches.extensions.clone();
    let config = config.clone();
    changes(caches.managed_resources.subscribe())
        .flat_map(move |change| {
            let refs = match change {
                Change::Changed(mr) => match mr.namespace {
                    Some(namespace) => {
                        extensions_in(&extensions.in_namespace(&namespace), &config, false)
                    }
                    None => Vec::new(),
                },
                Change::Missed => all(extensions.store(), &config),
            };
            stream::iter(refs)
        })
        .map(|r| request(r, "a ManagedResource in its namespace changed"))
        .boxed()
}

fn cluster_triggers(
    caches: &SharedCaches,
    config: &Arc<HealthCheckConfig>,
) -> BoxStream<'static, ReconcileRequest<Extension>> {
    let extensions = caches.extensions.clone();
    let config = config.clone();
    changes(caches.clusters.subscribe())
        .flat_map(move |change| {
            let refs = match change {
                // A Cluster is named like the shoot namespace it belongs to.
                Change::Changed(cluster) => {
                    extensions_in(&extensions.in_namespace(&cluster.name), &config, true)
                }
                Change::Missed => all(extensions.store(), &config),
            };
            stream::iter(refs)
        })
        .map(|r| request(r, "its Cluster changed"))
        .boxed()
}

/// The namespaces in which an input a check watches itself changed (the shoot's nodes, say).
fn check_triggers(
    caches: &SharedCaches,
    config: &Arc<HealthCheckConfig>,
) -> Vec<BoxStream<'static, ReconcileRequest<Extension>>> {
    config
        .registrations
        .iter()
        .flat_map(|r| r.checks.iter())
        .filter_map(|check| check.changes())
        .map(|namespaces| {
            let extensions = caches.extensions.clone();
            let config = config.clone();
            changes(namespaces)
                .flat_map(move |change| {
                    let refs = match change {
                        Change::Changed(namespace) => {
                            extensions_in(&extensions.in_namespace(&namespace), &config, false)
                        }
                        Change::Missed => all(extensions.store(), &config),
                    };
                    stream::iter(refs)
                })
                .map(|r| request(r, "an input of one of its checks changed"))
                .boxed()
        })
        .collect()
}

fn all(store: &Store<Extension>, config: &HealthCheckConfig) -> Vec<ObjectRef<Extension>> {
    store
        .state()
        .iter()
        .filter(|e| config.handles(e))
        .map(|e| ObjectRef::from_obj(e.as_ref()))
        .collect()
}

fn error_policy(extension: Arc<Extension>, error: &HealthCheckError, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(extension.as_ref());
    let failures = ctx.bookkeeping.record_failure(&key);
    let delay = retry_delay(failures, ctx.config.period);
    if matches!(error, HealthCheckError::Conflict { .. }) && failures < 3 {
        // Another writer was a moment faster: routine, not worth a warning.
        tracing::debug!(extension = %key, %error, retry_in = ?delay, "health check meets a concurrent change");
    } else {
        tracing::warn!(extension = %key, %error, failures, retry_in = ?delay, "health check failed");
    }
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
