//! The health-check controller against the real control plane: real watches, the real status
//! subresource with its optimistic locking, and a real gardener-resource-manager writing the
//! ManagedResource conditions the checks read.
//!
//! Every test runs its own controller, limited to its own namespace, with its own caches (its
//! own `origin` label), so tests run in parallel on one control plane.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, Condition, ConditionStatus, ErrorCode, Extension, ManagedResource,
    ManagedResourceSpec, managed_resource::LocalObjectReference,
};
use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use gardener_extension_containerd_shim::gardener::healthcheck::{
    self, HealthCheckConfig, ManagedResourceCheck,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{self, objects, poll};

const EXTENSION_TYPE: &str = "hc-test";
const CONDITION: &str = "SystemComponentsHealthy";
const MR: &str = "hc-bundle";
/// A class no gardener-resource-manager serves: the test writes the ManagedResource's status
/// itself, to get states the real one passes through too fast to observe.
const UNMANAGED_CLASS: &str = "hc-test-unmanaged";
/// Long enough that nothing in a test can be explained by a periodic check.
const NO_PERIOD: Duration = Duration::from_secs(3600);
const SHORT_PERIOD: Duration = Duration::from_secs(1);

/// One test's world: a shoot namespace with its Cluster, caches for it, and API handles.
struct World {
    seed: Client,
    shoot: Client,
    ns: String,
    /// The `origin` label of the ManagedResources the test's caches see.
    origin: String,
    caches: SharedCaches,
    extensions: Api<Extension>,
    mrs: Api<ManagedResource>,
    secrets: Api<Secret>,
    clusters: Api<Cluster>,
}

impl World {
    async fn new(test: &str, shoot: Value) -> World {
        let c = support::Clusters::connect().await;
        let ns = support::create_shoot_namespace(&c.seed, test).await;
        let clusters: Api<Cluster> = Api::all(c.seed.clone());
        clusters
            .create(&PostParams::default(), &objects::cluster(&ns, shoot))
            .await
            .expect("create Cluster");
        let origin = support::unique_name("hc-origin");
        let caches = SharedCaches::spawn_in(&c.seed, &origin, Some(EXTENSION_TYPE), Some(&ns));
        tokio::time::timeout(poll::DEFAULT_TIMEOUT, caches.wait_until_ready())
            .await
            .expect("the caches sync");
        World {
            extensions: Api::namespaced(c.seed.clone(), &ns),
            mrs: Api::namespaced(c.seed.clone(), &ns),
            secrets: Api::namespaced(c.seed.clone(), &ns),
            clusters,
            seed: c.seed,
            shoot: c.shoot,
            ns,
            origin,
            caches,
        }
    }

    fn config(&self, period: Duration) -> HealthCheckConfig {
        let mut config = HealthCheckConfig::new(EXTENSION_TYPE)
            .register(CONDITION, vec![Arc::new(ManagedResourceCheck::new(MR))]);
        config.period = period;
        config.namespace = Some(self.ns.clone());
        config
    }

    async fn start(&self, period: Duration) -> Running {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(healthcheck::run(
            self.seed.clone(),
            self.caches.clone(),
            self.config(period),
            async move {
                let _ = stop_rx.await;
            },
            move || {
                let _ = ready_tx.send(());
            },
        ));
        tokio::time::timeout(poll::DEFAULT_TIMEOUT, ready_rx)
            .await
            .expect("the controller reports its Extension cache synced")
            .expect("the controller is still running");
        Running {
            stop: stop_tx,
            task,
        }
    }

    async fn create_extension(
        &self,
        name: &str,
        annotations: &[(&str, &str)],
        finalizers: &[&str],
    ) -> Extension {
        let ext = objects::extension(&self.ns, EXTENSION_TYPE, None);
        let ext = objects::named(ext, name, annotations, finalizers);
        self.extensions
            .create(&PostParams::default(), &ext)
            .await
            .unwrap_or_else(|e| panic!("create Extension {name}: {e}"))
    }

    /// A secret holding one object for gardener-resource-manager to apply into the shoot.
    async fn create_bundle_secret(&self, name: &str, manifest: &str) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.ns.clone()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "data.yaml".to_string(),
                ByteString(manifest.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        self.secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }

    /// The ManagedResource the check looks at, labelled so that the test's caches see it.
    async fn create_mr(&self, secret: &str, class: Option<&str>) {
        let mut mr = ManagedResource::new(
            MR,
            ManagedResourceSpec {
                class: class.map(String::from),
                secret_refs: vec![LocalObjectReference {
                    name: secret.to_string(),
                }],
                ..Default::default()
            },
        );
        mr.metadata.labels = Some(BTreeMap::from([(
            "origin".to_string(),
            self.origin.clone(),
        )]));
        self.mrs
            .create(&PostParams::default(), &mr)
            .await
            .expect("create ManagedResource");
    }

    /// Writes the status of an unmanaged ManagedResource as gardener-resource-manager would.
    async fn set_mr_status(&self, observed_generation: i64, applied: &str, healthy: &str) {
        let condition = |type_: &str, status: &str| {
            json!({"type": type_, "status": status, "reason": "Test", "message": format!("{type_} is {status}"),
                   "lastTransitionTime": "2026-01-01T00:00:00Z", "lastUpdateTime": "2026-01-01T00:00:00Z"})
        };
        let patch = json!({"status": {
            "observedGeneration": observed_generation,
            "conditions": [condition("ResourcesApplied", applied), condition("ResourcesHealthy", healthy)],
        }});
        self.mrs
            .patch_status(MR, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch ManagedResource status");
    }

    async fn condition(&self, name: &str) -> Result<(Extension, Condition), String> {
        let ext = self.extensions.get(name).await.map_err(|e| e.to_string())?;
        let found = ext
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION))
            .cloned();
        match found {
            Some(c) => Ok((ext, c)),
            None => Err(format!(
                "no {CONDITION} condition yet; status: {:?}",
                ext.status
            )),
        }
    }

    /// Waits until the condition satisfies `accept`, and returns it.
    async fn wait_condition(
        &self,
        name: &str,
        what: &str,
        accept: impl Fn(&Condition) -> bool,
    ) -> (Extension, Condition) {
        poll::until(what, poll::DEFAULT_TIMEOUT, || async {
            let (ext, c) = self.condition(name).await?;
            if accept(&c) {
                Ok((ext, c))
            } else {
                Err(format!("{c:?}"))
            }
        })
        .await
    }

    async fn resource_version(&self, name: &str) -> String {
        self.extensions
            .get(name)
            .await
            .expect("read Extension")
            .resource_version()
            .unwrap_or_default()
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), healthcheck::HealthCheckError>>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(poll::DEFAULT_TIMEOUT, self.task)
            .await
            .expect("the controller stops after shutdown")
            .expect("the controller task did not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}

fn hello_configmap(target_ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {target_ns}\ndata:\n  greeting: hi\n"
    )
}

fn is(status: ConditionStatus, reason: &str) -> impl Fn(&Condition) -> bool {
    let reason = reason.to_string();
    move |c| c.status == status && c.reason == reason
}

#[tokio::test]
async fn t8a_real_managed_resource_drives_system_components_healthy() {
    let w = World::new("hc-grm", objects::shoot("hc-grm")).await;
    let target_ns = support::unique_name("hc-target");
    support::create_namespace(&w.shoot, &target_ns, &[]).await;
    w.create_extension(EXTENSION_TYPE, &[], &[]).await;
    let controller = w.start(NO_PERIOD).await;

    // No ManagedResource yet.
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "False: not found",
            is(ConditionStatus::False, "HealthCheckUnsuccessful"),
        )
        .await;
    assert_eq!(
        c.message,
        format!(
            "Managed Resource \"{MR}\" in namespace \"{}\" not found.",
            w.ns
        )
    );

    // gardener-resource-manager applies it into the shoot and reports it healthy.
    w.create_bundle_secret(
        "managedresource-hc-good",
        &hello_configmap(&target_ns, "hello"),
    )
    .await;
    w.create_mr("managedresource-hc-good", None).await;
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "True once the resource manager applied the bundle",
            is(ConditionStatus::True, "HealthCheckSuccessful"),
        )
        .await;
    assert_eq!(c.message, "All health checks successful");
    assert!(c.codes.is_empty());

    // An object the shoot's API server rejects is a configuration problem. The bundle changes
    // in place (same generation): when a new generation fails to apply, the resource manager
    // leaves observedGeneration behind and the check reports the outdated generation instead,
    // as Gardener's does.
    let invalid = hello_configmap(&target_ns, "Not_A_Valid_Name");
    w.secrets
        .patch(
            "managedresource-hc-good",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"data.yaml": ByteString(invalid.into_bytes())}})),
        )
        .await
        .expect("make the bundle invalid");
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "False with ERR_CONFIGURATION_PROBLEM",
            |c| c.status == ConditionStatus::False && c.codes == [ErrorCode::ConfigurationProblem],
        )
        .await;
    assert_eq!(c.reason, "HealthCheckUnsuccessful");
    assert!(c.message.contains("is invalid:"), "{}", c.message);
    assert!(
        c.message.starts_with(&format!(
            "managed resource \"{MR}\" in namespace \"{}\" is unhealthy",
            w.ns
        )),
        "{}",
        c.message
    );

    // A missing secret is unhealthy too, but nothing the shoot owner did.
    w.secrets
        .delete("managedresource-hc-good", &DeleteParams::default())
        .await
        .expect("delete the bundle secret");
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "False without codes for a missing secret",
            |c| {
                c.status == ConditionStatus::False
                    && c.codes.is_empty()
                    && c.message.contains("managedresource-hc-good")
            },
        )
        .await;
    assert_eq!(c.reason, "HealthCheckUnsuccessful");

    // Deleted: not found again (the resource manager removes its finalizer first).
    w.mrs
        .delete(MR, &DeleteParams::default())
        .await
        .expect("delete ManagedResource");
    w.wait_condition(EXTENSION_TYPE, "False: not found after deletion", |c| {
        c.status == ConditionStatus::False && c.message.ends_with("not found.")
    })
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn t8a_outdated_observed_generation_is_unsuccessful_although_both_conditions_are_true() {
    let w = World::new("hc-gen", objects::shoot("hc-gen")).await;
    w.create_extension(EXTENSION_TYPE, &[], &[]).await;
    w.create_mr("unused", Some(UNMANAGED_CLASS)).await;
    w.set_mr_status(0, "True", "True").await; // generation is 1
    let controller = w.start(NO_PERIOD).await;

    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "False: outdated generation",
            is(ConditionStatus::False, "HealthCheckUnsuccessful"),
        )
        .await;
    assert!(c.message.contains("outdated (0/1)"), "{}", c.message);
    assert!(c.codes.is_empty());

    // The resource manager catches up: the ManagedResource change alone re-checks.
    w.set_mr_status(1, "True", "True").await;
    w.wait_condition(
        EXTENSION_TYPE,
        "True once observed",
        is(ConditionStatus::True, "HealthCheckSuccessful"),
    )
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn t8d_hibernated_shoot_reports_hibernated_until_the_cluster_wakes_it() {
    let mut shoot = objects::shoot("hc-hib");
    shoot["spec"]["hibernation"] = json!({"enabled": true});
    let w = World::new("hc-hib", shoot).await;
    w.create_extension(EXTENSION_TYPE, &[], &[]).await;
    let controller = w.start(NO_PERIOD).await;

    // No ManagedResource exists: only hibernation explains True.
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "True: hibernated",
            is(ConditionStatus::True, "HealthCheckSuccessful"),
        )
        .await;
    assert_eq!(c.message, "Shoot is hibernated");
    let hibernated_since = c.last_transition_time.clone();

    // Waking up is a Cluster change; with a period of an hour, only the Cluster watch can
    // explain that the checks run again.
    w.clusters
        .patch(
            &w.ns,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"shoot": {"spec": {"hibernation": {"enabled": false}}}}}),
            ),
        )
        .await
        .expect("wake the shoot up");
    let (_, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "False: checks resumed",
            is(ConditionStatus::False, "HealthCheckUnsuccessful"),
        )
        .await;
    assert!(c.message.ends_with("not found."), "{}", c.message);
    assert!(c.last_transition_time >= hibernated_since);
    controller.stop().await;
}

#[tokio::test]
async fn t8e_migrating_and_deleting_extensions_get_no_condition_writes() {
    let w = World::new("hc-skip", objects::shoot("hc-skip")).await;
    const FINALIZER: &str = "test.gardener.cloud/keep";
    w.create_extension("control", &[], &[]).await;
    w.create_extension(
        "migrate-annotated",
        &[("gardener.cloud/operation", "migrate")],
        &[],
    )
    .await;
    w.create_extension("migrate-operation", &[], &[]).await;
    w.extensions
        .patch_status(
            "migrate-operation",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastOperation": {
                "type": "Migrate", "state": "Succeeded", "progress": 100,
                "description": "migrated", "lastUpdateTime": "2026-01-01T00:00:00Z"}}})),
        )
        .await
        .expect("mark as migrated");
    w.create_extension("deleting", &[], &[FINALIZER]).await;
    w.extensions
        .delete("deleting", &DeleteParams::default())
        .await
        .expect("delete");
    let skipped = ["migrate-annotated", "migrate-operation", "deleting"];
    let mut versions = Vec::new();
    for name in skipped {
        versions.push(w.resource_version(name).await);
    }

    let controller = w.start(SHORT_PERIOD).await;
    // The controller is running and checking this namespace.
    w.wait_condition("control", "the control Extension is checked", |_| true)
        .await;
    // A Cluster change re-checks every Extension of the namespace.
    w.clusters
        .patch(
            &w.ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test": "poke"}}})),
        )
        .await
        .expect("poke the Cluster");

    poll::stays(
        "no writes to migrating or deleting Extensions",
        SHORT_PERIOD * 3,
        || async {
            for (name, before) in skipped.iter().zip(&versions) {
                let ext = w.extensions.get(name).await.map_err(|e| e.to_string())?;
                let conditions = ext.status.as_ref().map(|s| s.conditions.len()).unwrap_or(0);
                if ext.resource_version().as_ref() != Some(before) || conditions != 0 {
                    return Err(format!("{name} was written: {:?}", ext.status));
                }
            }
            Ok::<(), String>(())
        },
    )
    .await;

    // The annotation alone held the checks back: once it is gone, the next trigger checks.
    w.extensions
        .patch(
            "migrate-annotated",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}})),
        )
        .await
        .expect("remove the migrate annotation");
    w.clusters
        .patch(
            &w.ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test": "poke-again"}}})),
        )
        .await
        .expect("poke the Cluster again");
    w.wait_condition(
        "migrate-annotated",
        "a check after the migration ended",
        |_| true,
    )
    .await;
    controller.stop().await;

    w.extensions
        .patch(
            "deleting",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the finalizer");
}

#[tokio::test]
async fn t7_a_concurrent_status_and_annotation_writer_loses_nothing() {
    let w = World::new("hc-race", objects::shoot("hc-race")).await;
    w.create_extension(EXTENSION_TYPE, &[], &[]).await;
    w.create_mr("unused", Some(UNMANAGED_CLASS)).await;
    w.set_mr_status(1, "True", "True").await;
    let controller = w.start(SHORT_PERIOD).await;
    w.wait_condition(
        EXTENSION_TYPE,
        "True before the race",
        is(ConditionStatus::True, "HealthCheckSuccessful"),
    )
    .await;

    // Like the lifecycle reconciler and gardenlet: merge patches without a lock, for as long
    // as the health keeps changing.
    let flipping = AtomicBool::new(true);
    let writer = async {
        let mut round = 0;
        while flipping.load(Ordering::Relaxed) {
            round += 1;
            let status = json!({"status": {
                "lastOperation": {"type": "Reconcile", "state": "Succeeded", "progress": 100,
                                  "description": format!("writer-{round}"), "lastUpdateTime": "2026-01-01T00:00:00Z"},
                "observedGeneration": 1,
                "state": {"round": round},
            }});
            w.extensions
                .patch_status(
                    EXTENSION_TYPE,
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await
                .expect("status patch");
            let meta = json!({"metadata": {"annotations": {"test/writer": round.to_string()}}});
            w.extensions
                .patch(
                    EXTENSION_TYPE,
                    &PatchParams::default(),
                    &Patch::Merge(&meta),
                )
                .await
                .expect("annotation patch");
        }
        round
    };
    // Meanwhile the health flips, so the controller writes while the writer writes.
    let flipper = async {
        for round in 0..10 {
            let healthy = if round % 2 == 0 { "False" } else { "True" };
            w.set_mr_status(1, "True", healthy).await;
            let expected = if healthy == "True" {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            };
            w.wait_condition(EXTENSION_TYPE, "the flip to be reported", |c| {
                c.status == expected
            })
            .await;
        }
        flipping.store(false, Ordering::Relaxed);
    };
    let (last, ()) = tokio::join!(writer, flipper);

    let (ext, c) = w
        .wait_condition(
            EXTENSION_TYPE,
            "the last flip (True)",
            is(ConditionStatus::True, "HealthCheckSuccessful"),
        )
        .await;
    let status = ext.status.expect("status");
    assert_eq!(
        status.last_operation.map(|op| op.description),
        Some(format!("writer-{last}"))
    );
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.state, Some(json!({"round": last})));
    assert_eq!(
        ext.metadata
            .annotations
            .unwrap_or_default()
            .get("test/writer"),
        Some(&last.to_string())
    );
    assert_eq!(c.message, "All health checks successful");
    controller.stop().await;
}

#[tokio::test]
async fn t8c_a_steady_state_writes_nothing_across_periods() {
    let w = World::new("hc-steady", objects::shoot("hc-steady")).await;
    let target_ns = support::unique_name("hc-steady-target");
    support::create_namespace(&w.shoot, &target_ns, &[]).await;
    w.create_extension(EXTENSION_TYPE, &[], &[]).await;
    w.create_bundle_secret(
        "managedresource-hc-steady",
        &hello_configmap(&target_ns, "hello"),
    )
    .await;
    w.create_mr("managedresource-hc-steady", None).await;
    let controller = w.start(SHORT_PERIOD).await;

    let (ext, first) = w
        .wait_condition(
            EXTENSION_TYPE,
            "True",
            is(ConditionStatus::True, "HealthCheckSuccessful"),
        )
        .await;
    let version = ext.resource_version();
    poll::stays(
        "the Extension unchanged over four periods",
        SHORT_PERIOD * 4,
        || async {
            let (ext, c) = w.condition(EXTENSION_TYPE).await?;
            if ext.resource_version() != version || c != first {
                return Err(format!("written: {:?} -> {:?}", first, c));
            }
            Ok(())
        },
    )
    .await;
    controller.stop().await;
}
