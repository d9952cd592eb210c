//! What a reconcile and the health checks cost the seed's API server, counted in its audit log:
//! the real lifecycle and health-check controllers with the real actuator and checks, as the
//! controller's own (audited) identity, against the real gardener-resource-manager.
//!
//! `gardener_managed_resource::unchanged_objects_write_nothing` pins that a steady state writes
//! nothing; this pins how much a reconcile reads and that a health check whose inputs did not
//! change sends nothing at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{Cluster, ConditionStatus, Extension};
use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use gardener_extension_containerd_shim::gardener::healthcheck::{
    self, HealthCheckConfig, ManagedResourceCheck,
};
use gardener_extension_containerd_shim::shim::actuator::{ActuatorSettings, ShimActuator};
use gardener_extension_containerd_shim::shim::config::{Catalog, images};
use gardener_extension_containerd_shim::shim::health::VerifiedNodesCheck;
use gardener_extension_containerd_shim::shim::identity::{MANAGED_RESOURCE, ORIGIN};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::oneshot;

use crate::support::controller;
use crate::support::rbac::{self, rule};
use crate::support::{self, audit, gardenlet, objects, poll};

const CONDITION: &str = "SystemComponentsHealthy";
const PERIOD: Duration = Duration::from_secs(1);

/// The chart's rules for the audited identity: cluster-wide what the caches need, in `ns` what
/// a reconcile writes.
async fn grant(seed: &Client, ns: &str) -> Client {
    let name = support::unique_name("request-budget");
    let namespace_rules = vec![
        rule(
            "extensions.gardener.cloud",
            &["extensions"],
            &["list", "watch", "patch"],
        ),
        rule(
            "extensions.gardener.cloud",
            &["extensions/status"],
            &["patch"],
        ),
        rule(
            "resources.gardener.cloud",
            &["managedresources"],
            &["get", "create", "update", "patch", "delete"],
        ),
        rule("", &["secrets"], &["get", "create", "patch", "delete"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ];
    rbac::grant_controller(seed, &name, ns, rbac::cache_rules(), namespace_rules).await;
    let env = support::Env::load();
    let client = support::client_from(&env.seed_controller_kubeconfig).await;
    // One request through each binding: the ClusterRole's namespace list, the Role's read of
    // a Secret (absent: allowed is a 404, not a 403).
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    poll::until("the RBAC to take effect", poll::DEFAULT_TIMEOUT, || async {
        namespaces
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .map_err(|e| e.to_string())?;
        secrets
            .get_opt("rbac-probe")
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    client
}

/// The identity's completed requests in `ns` between two marker reads (reads of secrets that do
/// not exist), as `verb resource` with counts.
async fn requests_between(ns: &str, open: &str, close: &str) -> BTreeMap<String, u32> {
    let log = support::Env::load().seed_audit_log;
    let mut seen = BTreeMap::new();
    for request in audit::between_markers(&log, ns, open, close).await {
        if request.user == rbac::CONTROLLER_USER {
            *seen
                .entry(format!("{} {}", request.verb, request.resource))
                .or_insert(0) += 1;
        }
    }
    seen
}

async fn marker(client: &Client, ns: &str, prefix: &str) -> String {
    let name = support::unique_name(prefix);
    let found = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&name)
        .await
        .expect("marker read");
    assert!(found.is_none());
    name
}

fn counts(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test]
async fn a_reconcile_reads_nothing_and_a_steady_health_check_sends_nothing() {
    let _turn = crate::shim_lifecycle::SHOOT.lock().await;
    let c = support::Clusters::connect().await;
    crate::shim_lifecycle::clean_shoot(&c.seed, &c.shoot).await;
    let ns = support::create_shoot_namespace(&c.seed, "request-budget").await;
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot("request-budget")),
        )
        .await
        .expect("create Cluster");
    let client = grant(&c.seed, &ns).await;

    let catalog = Arc::new(Catalog::builtin().expect("catalog"));
    let images = Arc::new(images::embedded().expect("image vector"));
    let actuator = ShimActuator::new(
        client.clone(),
        catalog.clone(),
        images.clone(),
        ActuatorSettings::default(),
    );
    let _lifecycle = controller::start(
        client.clone(),
        actuator,
        controller::config("containerd-shim", &ns),
    )
    .await;
    let caches = SharedCaches::spawn_in(&client, ORIGIN, Some("containerd-shim"), Some(&ns));
    caches.wait_until_ready().await;
    let mut config = HealthCheckConfig::new("containerd-shim").register(
        CONDITION,
        vec![
            Arc::new(ManagedResourceCheck::new(MANAGED_RESOURCE)),
            Arc::new(VerifiedNodesCheck::new(
                catalog,
                images,
                "test (healthcheck)",
            )),
        ],
    );
    config.period = PERIOD;
    config.namespace = Some(ns.clone());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let health = tokio::spawn(healthcheck::run(
        client.clone(),
        caches,
        config,
        async move {
            let _ = stop_rx.await;
        },
        || {},
    ));

    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
    let wasmtime = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                          "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}]});
    let open = marker(&client, &ns, "marker-open").await;
    // Created with gardenlet's annotations, so that exactly one reconcile runs: a request that
    // came after it would rightly read the ManagedResource and Secret that gardener-resource-
    // manager has not applied yet.
    let ts = gardenlet::create_for_reconcile(
        &extensions,
        objects::extension(&ns, "containerd-shim", Some(wasmtime)),
    )
    .await;
    gardenlet::wait_ready(&extensions, "containerd-shim", Some(&ts)).await;
    gardenlet::wait_condition(&extensions, "containerd-shim", CONDITION, "True", |c| {
        c.status == ConditionStatus::True
    })
    .await;
    let close = marker(&client, &ns, "marker-close").await;
    let first = requests_between(&ns, &open, &close).await;
    let reads: BTreeMap<String, u32> = first
        .iter()
        .filter(|(k, _)| k.starts_with("get ") || k.starts_with("list "))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(
        reads,
        counts(&[("get secrets", 2)]),
        "a first reconcile reads nothing (the ManagedResource comes from the cache, the Secret \
         is created without a read), and the health check reads the shoot access secret once \
         by each of its two names (neither exists here): {first:?}"
    );

    // A requested reconcile of the converged Extension, then several health-check periods in
    // which nothing changes.
    let open = marker(&client, &ns, "marker-open").await;
    let ts = gardenlet::request_reconcile(&extensions, "containerd-shim").await;
    let converged = gardenlet::wait_ready(&extensions, "containerd-shim", Some(&ts)).await;
    let conditions = converged.status.map(|s| s.conditions).unwrap_or_default();
    poll::stays(
        "the conditions, unchanged over several health-check periods",
        PERIOD * 4,
        || async {
            let now = extensions
                .get("containerd-shim")
                .await
                .map_err(|e| e.to_string())?
                .status
                .map(|s| s.conditions)
                .unwrap_or_default();
            if now == conditions {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;
    let close = marker(&client, &ns, "marker-close").await;
    let steady = requests_between(&ns, &open, &close).await;
    assert_eq!(
        steady,
        counts(&[("patch extensions", 1), ("patch extensions/status", 2)]),
        "a requested reconcile: the annotation, Processing and Success; no read (the \
         ManagedResource comes from the cache, and gardener-resource-manager has applied the \
         Secret it references); the health checks: nothing"
    );

    let _ = stop_tx.send(());
    let _ = health.await;
}
