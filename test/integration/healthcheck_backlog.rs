//! Health checks give way to a backlog of lifecycle work: the real lifecycle controller (with
//! a recording actuator that takes a second per reconcile) and the real health-check controller
//! in one process, as the extension runs them, on the real API server. The order of the
//! Extensions' changes comes from a watch, which delivers them in the order etcd committed
//! them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ConditionStatus, Extension, OPERATION_ANNOTATION, OperationState,
};
use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use gardener_extension_containerd_shim::gardener::extension::backlog::Backlog;
use gardener_extension_containerd_shim::gardener::healthcheck::{
    self, CheckContext, CheckResult, HealthCheck, HealthCheckConfig,
};
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::oneshot;

use crate::support::actuator::{Behaviour, Recorder};
use crate::support::{self, controller, gardenlet, objects, poll};

const EXTENSION_TYPE: &str = "hc-backlog-test";
const CONDITION: &str = "SystemComponentsHealthy";
/// More Extensions than the lifecycle works on at once: a queue.
const EXTENSIONS: usize = 6;
const LIFECYCLE_CONCURRENCY: u16 = 1;
/// Each reconcile takes this long, so the backlog lasts several seconds: longer than the
/// health check's first look at an Extension that has just been reconciled.
const RECONCILE_TIME: Duration = Duration::from_secs(1);

/// A check that always finds the Extension healthy: what is under test is when it runs.
struct Healthy;

impl HealthCheck for Healthy {
    fn check<'a>(&'a self, _ctx: &'a CheckContext) -> BoxFuture<'a, CheckResult> {
        Box::pin(async { CheckResult::Successful })
    }
}

/// Whether the lifecycle controller is done with `extension`: gardenlet's request taken, the
/// spec observed, the operation succeeded.
fn settled(extension: &Extension) -> bool {
    let status = extension.status.as_ref();
    !extension.annotations().contains_key(OPERATION_ANNOTATION)
        && status.and_then(|s| s.observed_generation) == extension.metadata.generation
        && status
            .and_then(|s| s.last_operation.as_ref())
            .is_some_and(|op| op.state == OperationState::Succeeded)
}

fn has_conditions(extension: &Extension) -> bool {
    extension
        .status
        .as_ref()
        .is_some_and(|s| !s.conditions.is_empty())
}

#[tokio::test]
async fn health_checks_wait_until_the_lifecycle_queue_is_worked_off() {
    let c = support::Clusters::connect().await;
    let ns = support::create_shoot_namespace(&c.seed, "hc-backlog").await;
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot("hc-backlog")),
        )
        .await
        .expect("create Cluster");
    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);

    // Every version of every Extension, in commit order, from before the first is created.
    let history: Arc<Mutex<Vec<Extension>>> = Arc::default();
    let (listed_tx, listed_rx) = oneshot::channel::<()>();
    let recorder = {
        let history = history.clone();
        let mut listed = Some(listed_tx);
        let stream = watcher(extensions.clone(), watcher::Config::default());
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(e)) => history.lock().unwrap().push(e),
                    _ => {}
                }
            }
        })
    };
    tokio::time::timeout(poll::DEFAULT_TIMEOUT, listed_rx)
        .await
        .expect("the watch lists the namespace")
        .expect("the watch runs");

    let names: Vec<String> = (0..EXTENSIONS).map(|i| format!("ext-{i}")).collect();
    for name in &names {
        let mut ext = objects::extension(&ns, EXTENSION_TYPE, None);
        ext.metadata.name = Some(name.clone());
        gardenlet::create_for_reconcile(&extensions, ext).await;
    }

    // Both controllers start with the whole queue in front of them.
    let actuator = Recorder::default();
    actuator.set(Behaviour::Sleep(RECONCILE_TIME));
    let mut lifecycle_config = controller::config(EXTENSION_TYPE, &ns);
    lifecycle_config.max_concurrent = LIFECYCLE_CONCURRENCY;
    let _lifecycle = controller::start(c.seed.clone(), actuator.actuator(), lifecycle_config).await;
    let caches = SharedCaches::spawn_in(
        &c.seed,
        &support::unique_name("hc-backlog"),
        Some(EXTENSION_TYPE),
        Some(&ns),
    );
    let mut config =
        HealthCheckConfig::new(EXTENSION_TYPE).register(CONDITION, vec![Arc::new(Healthy)]);
    config.namespace = Some(ns.clone());
    config.lifecycle_backlog = Some(Arc::new(Backlog::new(
        caches.extensions.store().clone(),
        usize::from(LIFECYCLE_CONCURRENCY),
        config.period,
    )));
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let health = tokio::spawn(healthcheck::run(
        c.seed.clone(),
        caches,
        config,
        async move {
            let _ = stop_rx.await;
        },
        || {},
    ));

    for name in &names {
        gardenlet::wait_condition(&extensions, name, CONDITION, "True", |c| {
            c.status == ConditionStatus::True
        })
        .await;
    }
    let _ = stop_tx.send(());
    let _ = health.await;
    recorder.abort();

    // The first condition write must come after the lifecycle had at most its own concurrency
    // of Extensions left: until then, each check gave way.
    let history = history.lock().unwrap().clone();
    let mut done = BTreeSet::new();
    let first_write = history.iter().find_map(|version| {
        if has_conditions(version) {
            return Some((version.name_any(), done.len()));
        }
        if settled(version) {
            done.insert(version.name_any());
        }
        None
    });
    let (first, settled_before) = first_write.expect("the history shows the condition writes");
    let left = EXTENSIONS - settled_before;
    assert!(
        left <= usize::from(LIFECYCLE_CONCURRENCY),
        "the first health condition ({first}) was written while {left} Extensions still waited \
         for the lifecycle controller (concurrency {LIFECYCLE_CONCURRENCY}); history: {:?}",
        history
            .iter()
            .map(|e| format!(
                "{} settled={} conditions={}",
                e.name_any(),
                settled(e),
                has_conditions(e)
            ))
            .collect::<Vec<_>>()
    );
}
