//! The containerd-shim extension end to end on the control plane: the real controller with the
//! real actuator, the real gardener-resource-manager applying the bundle into the shoot API
//! server, and simulated nodes reporting through the installer pods' readiness.
//!
//! The bundle's shoot objects have fixed names (one installer per shoot), so these tests take
//! turns on the one shoot API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gardener_extension_containerd_shim::desired_shims::{DesiredShims, Mode};
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ErrorCode, Extension, ManagedResource, OperationState, OperationType,
};
use gardener_extension_containerd_shim::gardener::managed_resource;
use gardener_extension_containerd_shim::shim::actuator::{ActuatorSettings, ShimActuator};
use gardener_extension_containerd_shim::shim::config::{Catalog, images};
use gardener_extension_containerd_shim::shim::identity::{MANAGED_RESOURCE, ORIGIN};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

use crate::support::controller::{self, RunningController};
use crate::support::{self, bundles, gardenlet, impersonation, nodes, objects, poll, shoot};

pub(crate) static SHOOT: Mutex<()> = Mutex::const_new(());

/// The installer DaemonSet of the tests' worker pool `worker-a`.
const INSTALLER: &str = "containerd-shim-installer-worker-a";
const INSTALLER_SELECTOR: &str = "app.kubernetes.io/name=containerd-shim-installer";

pub(crate) fn config(shims: Value) -> Value {
    json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1", "kind": "ContainerdShimConfig", "shims": shims})
}

/// One test's turn on the shoot: its shoot namespace with a Cluster, and the real controller
/// with the real actuator watching it.
pub(crate) struct Fixture {
    _turn: MutexGuard<'static, ()>,
    pub(crate) env: support::Env,
    pub(crate) seed: Client,
    pub(crate) shoot: Client,
    pub(crate) ns: String,
    pub(crate) api: Api<Extension>,
    _controller: RunningController,
}

/// Removes what earlier tests may have left in the shoot: their ManagedResources (which would
/// fight ours over the same objects) and simulated nodes.
pub(crate) async fn clean_shoot(seed: &Client, shoot: &Client) {
    crate::support::bundles::remove_shim_bundles(seed, shoot).await;
    nodes::delete_simulated_nodes(shoot).await;
}

impl Fixture {
    pub(crate) async fn new(test: &str, settings: ActuatorSettings, shoot_json: Value) -> Fixture {
        let turn = SHOOT.lock().await;
        let c = support::Clusters::connect().await;
        clean_shoot(&c.seed, &c.shoot).await;
        let ns = support::create_shoot_namespace(&c.seed, test).await;
        Api::<Cluster>::all(c.seed.clone())
            .create(&PostParams::default(), &objects::cluster(&ns, shoot_json))
            .await
            .expect("create Cluster");
        let actuator = ShimActuator::new(
            c.seed.clone(),
            Arc::new(Catalog::builtin().expect("catalog")),
            Arc::new(images::embedded().expect("image vector")),
            settings,
        );
        let ctrl = controller::start(
            c.seed.clone(),
            actuator,
            controller::config("containerd-shim", &ns),
        )
        .await;
        Fixture {
            _turn: turn,
            env: c.env,
            api: Api::namespaced(c.seed.clone(), &ns),
            seed: c.seed,
            shoot: c.shoot,
            ns,
            _controller: ctrl,
        }
    }

    async fn default(test: &str) -> Fixture {
        Fixture::new(test, fast_settings(), objects::shoot(test)).await
    }

    pub(crate) async fn create(&self, provider_config: Value) {
        self.api
            .create(
                &PostParams::default(),
                &objects::extension(&self.ns, "containerd-shim", Some(provider_config)),
            )
            .await
            .expect("create Extension");
    }

    pub(crate) async fn set_config(&self, provider_config: Value) -> String {
        self.api
            .patch(
                "containerd-shim",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"providerConfig": provider_config}})),
            )
            .await
            .expect("patch providerConfig");
        gardenlet::request_reconcile(&self.api, "containerd-shim").await
    }

    pub(crate) async fn ready(&self, ts: Option<&str>) -> Extension {
        gardenlet::wait_ready(&self.api, "containerd-shim", ts).await
    }

    pub(crate) async fn managed_resource(&self) -> Option<ManagedResource> {
        Api::<ManagedResource>::namespaced(self.seed.clone(), &self.ns)
            .get_opt(MANAGED_RESOURCE)
            .await
            .expect("get MR")
    }

    /// Polls until gardener-resource-manager reports the bundle `awaited`; `what` names it in a
    /// failure.
    async fn bundle_is(&self, awaited: managed_resource::Awaited, what: &str) {
        managed_resource::wait_until(
            &self.seed,
            &self.ns,
            MANAGED_RESOURCE,
            managed_resource::Wait::new(poll::DEFAULT_TIMEOUT)
                .with_interval(Duration::from_millis(200)),
            awaited,
        )
        .await
        .expect(what);
    }

    /// The Extension as it is now; an error (for a poll) when it cannot be read.
    async fn extension(&self) -> Result<Extension, String> {
        self.api
            .get("containerd-shim")
            .await
            .map_err(|e| e.to_string())
    }

    /// The annotations of the installer DaemonSet's pod template (its rollout hash).
    async fn installer_template_annotations(&self) -> BTreeMap<String, String> {
        self.daemon_set()
            .await
            .and_then(|d| d.spec)
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.annotations)
            .expect("the installer DaemonSet's pod template has annotations")
    }

    /// The objects in the MR's current secret.
    async fn bundle(&self) -> Vec<Value> {
        let mr = self.managed_resource().await.expect("MR exists");
        let secret_name = &mr.spec.secret_refs[0].name;
        let secret = Api::<Secret>::namespaced(self.seed.clone(), &self.ns)
            .get(secret_name)
            .await
            .expect("secret");
        managed_resource::decode_secret(&secret).expect("decode bundle")
    }

    /// The desired set the DaemonSet's pod template mounts (a content-named ConfigMap).
    async fn shoot_desired(&self) -> Option<DesiredShims> {
        let template = self.daemon_set().await?.spec?.template.spec?;
        let name = template
            .volumes?
            .into_iter()
            .find(|v| v.name == "desired")?
            .config_map?
            .name;
        let cm = Api::<ConfigMap>::namespaced(self.shoot.clone(), "kube-system")
            .get_opt(&name)
            .await
            .expect("get CM")?;
        let text = cm.data?.get("desired-shims.json")?.clone();
        Some(DesiredShims::from_json(&text).expect("desired set parses"))
    }

    async fn runtime_class(&self, name: &str) -> Option<RuntimeClass> {
        Api::<RuntimeClass>::all(self.shoot.clone())
            .get_opt(name)
            .await
            .expect("get RuntimeClass")
    }

    async fn wait_runtime_class(&self, name: &str, present: bool) -> Option<RuntimeClass> {
        poll::until(
            &format!("RuntimeClass {name} present={present}"),
            poll::DEFAULT_TIMEOUT,
            || async {
                let rc = self.runtime_class(name).await;
                if rc.is_some() == present {
                    Ok(rc)
                } else {
                    Err(rc.map(|r| r.resource_version()))
                }
            },
        )
        .await
    }

    async fn daemon_set(&self) -> Option<DaemonSet> {
        Api::<DaemonSet>::namespaced(self.shoot.clone(), "kube-system")
            .get_opt(INSTALLER)
            .await
            .expect("get DaemonSet")
    }

    pub(crate) async fn gone(&self) {
        gardenlet::wait_deleted(&self.api, "containerd-shim").await;
    }
}

pub(crate) fn fast_settings() -> ActuatorSettings {
    ActuatorSettings {
        uninstall_timeout: Duration::from_secs(300),
        catch_up_timeout: Duration::from_secs(60),
        poll_interval: Duration::from_millis(500),
    }
}

#[tokio::test]
async fn bundle_reaches_the_shoot_and_passes_gardenlets_check() {
    let f = Fixture::default("shim-basic").await;
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;

    let mr = f.managed_resource().await.expect("ManagedResource");
    assert_eq!(mr.labels().get("origin").map(String::as_str), Some(ORIGIN));
    assert_eq!(mr.spec.class, None);
    let kinds = objects::kinds(&f.bundle().await);
    // The desired set's ConfigMap is named by its content.
    let config_map = kinds
        .iter()
        .find(|k| k.starts_with("ConfigMap/containerd-shim-installer-"))
        .cloned()
        .unwrap_or_else(|| panic!("no desired-set ConfigMap in {kinds:?}"));
    assert_eq!(
        kinds,
        [
            "ClusterRole/extensions.gardener.cloud:containerd-shim:installer",
            "ClusterRoleBinding/extensions.gardener.cloud:containerd-shim:installer",
            config_map.as_str(),
            "DaemonSet/containerd-shim-installer-worker-a",
            "Role/containerd-shim-installer",
            "RoleBinding/containerd-shim-installer",
            "RuntimeClass/wasmtime-spin-v2",
            "ServiceAccount/containerd-shim-installer",
            "ValidatingAdmissionPolicy/containerd-shim-installer-leases.extensions.gardener.cloud",
            "ValidatingAdmissionPolicy/containerd-shim-installer-node-labels.extensions.gardener.cloud",
            "ValidatingAdmissionPolicyBinding/containerd-shim-installer-leases.extensions.gardener.cloud",
            "ValidatingAdmissionPolicyBinding/containerd-shim-installer-node-labels.extensions.gardener.cloud",
        ]
    );

    let rc = f
        .wait_runtime_class("wasmtime-spin-v2", true)
        .await
        .unwrap();
    assert_eq!(rc.handler, "spin");
    assert_eq!(
        rc.scheduling
            .and_then(|s| s.node_selector)
            .unwrap_or_default()
            .get("containerd-shim.extensions.gardener.cloud/spin")
            .map(String::as_str),
        Some("ready")
    );
    let desired = f.shoot_desired().await.expect("desired set in the shoot");
    assert_eq!(desired.mode, Mode::Install);
    assert_eq!(
        desired
            .shims
            .iter()
            .map(|s| s.handler.as_str())
            .collect::<Vec<_>>(),
        ["spin"]
    );
    assert!(f.daemon_set().await.is_some());
    f.bundle_is(
        managed_resource::Awaited::Healthy,
        "gardener-resource-manager reports the bundle healthy",
    )
    .await;
}

#[tokio::test]
async fn a_config_change_rolls_out_and_a_removed_shim_loses_its_runtime_class() {
    let f = Fixture::default("shim-change").await;
    f.create(config(json!([{"name": "spin"}, {"name": "wasmtime"}])))
        .await;
    f.ready(None).await;
    f.wait_runtime_class("wasmtime", true).await;
    let first_secret = f.managed_resource().await.unwrap().spec.secret_refs[0]
        .name
        .clone();
    let first_hash = f.installer_template_annotations().await;

    let ts = f
        .set_config(config(
            json!([{"name": "spin", "options": {"SystemdCgroup": false}}]),
        ))
        .await;
    f.ready(Some(&ts)).await;
    let mr = f.managed_resource().await.unwrap();
    assert_ne!(
        mr.spec.secret_refs[0].name, first_secret,
        "a changed bundle gets a new secret"
    );
    f.wait_runtime_class("wasmtime", false).await;
    assert!(f.runtime_class("wasmtime-spin-v2").await.is_some());
    poll::until(
        "the shoot's desired set to drop wasmtime",
        poll::DEFAULT_TIMEOUT,
        || async {
            let d = f.shoot_desired().await.ok_or("no ConfigMap")?;
            if d.shims.len() == 1 {
                Ok(())
            } else {
                Err("still two shims")
            }
        },
    )
    .await;
    let hash = f.installer_template_annotations().await;
    assert_ne!(
        hash, first_hash,
        "the pod template changes with the desired set"
    );
}

/// gardener-resource-manager deletes what a new bundle drops first and, when it deleted
/// anything, applies the rest only in a pass 5 s later. A removal must reach the installer
/// DaemonSet before the RuntimeClass goes: the bundle is written in two steps, the installers
/// first. The order is read from the shoot's own record: the resourceVersion of the DaemonSet's
/// change and that of the RuntimeClass's deletion (one API server on one etcd: its revisions).
#[tokio::test]
async fn a_removal_reaches_the_installers_before_the_runtime_class_goes() {
    let f = Fixture::default("shim-removal-order").await;
    f.create(config(json!([{"name": "spin"}, {"name": "wasmtime"}])))
        .await;
    f.ready(None).await;
    f.wait_runtime_class("wasmtime", true).await;
    // The install is recorded: the removal is written at once, not after a catch-up wait.
    poll::until(
        "gardener-resource-manager to record the install",
        poll::DEFAULT_TIMEOUT,
        || async {
            let mr = f.managed_resource().await.ok_or("no ManagedResource")?;
            managed_resource::catch_up::check(&mr).map_err(|behind| behind.to_string())
        },
    )
    .await;
    let installed = f.daemon_set().await.expect("the installer DaemonSet");
    let from = installed.resource_version().expect("resourceVersion");
    let installed_template = installed.spec.clone().map(|s| s.template);

    let ts = f.set_config(config(json!([{"name": "spin"}]))).await;
    f.ready(Some(&ts)).await;

    let daemon_sets = Api::<DaemonSet>::namespaced(f.shoot.clone(), "kube-system");
    let mut changes = daemon_sets
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={INSTALLER}")),
            &from,
        )
        .await
        .expect("watch the installer DaemonSet")
        .boxed();
    let changed_at = tokio::time::timeout(poll::DEFAULT_TIMEOUT, async {
        while let Some(event) = changes.next().await {
            if let WatchEvent::Modified(ds) = event.expect("watch event")
                && ds.spec.clone().map(|s| s.template) != installed_template
            {
                return ds.resource_version();
            }
        }
        None
    })
    .await
    .expect("the installer DaemonSet changed in time")
    .expect("a resourceVersion of the change");

    let runtime_classes = Api::<RuntimeClass>::all(f.shoot.clone());
    let mut deletions = runtime_classes
        .watch(
            &WatchParams::default().fields("metadata.name=wasmtime"),
            &from,
        )
        .await
        .expect("watch the RuntimeClass")
        .boxed();
    let deleted_at = tokio::time::timeout(poll::DEFAULT_TIMEOUT, async {
        while let Some(event) = deletions.next().await {
            if let WatchEvent::Deleted(rc) = event.expect("watch event") {
                return rc.resource_version();
            }
        }
        None
    })
    .await
    .expect("the RuntimeClass was deleted in time")
    .expect("a resourceVersion of the deletion");

    let revision = |rv: &str| rv.parse::<u64>().expect("an etcd revision");
    assert!(
        revision(&changed_at) < revision(&deleted_at),
        "the installers changed at revision {changed_at}, after the RuntimeClass went at {deleted_at}"
    );
    assert!(f.runtime_class("wasmtime-spin-v2").await.is_some());
    let desired = f
        .shoot_desired()
        .await
        .expect("the DaemonSet's desired set");
    assert_eq!(
        desired
            .shims
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["spin"]
    );
}

#[tokio::test]
async fn a_bad_config_is_a_configuration_problem_and_keeps_the_bundle() {
    let f = Fixture::default("shim-bad").await;
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    // What the bundle says of the RuntimeClass (gardener-resource-manager's own bookkeeping on
    // it, such as its annotations, may change on a resync and is not compared).
    let runtime_class_of_bundle = |rc: RuntimeClass| (rc.handler, rc.scheduling, rc.overhead);
    let rc_before = runtime_class_of_bundle(
        f.wait_runtime_class("wasmtime-spin-v2", true)
            .await
            .unwrap(),
    );
    let mr_before = f.managed_resource().await.unwrap();

    f.set_config(config(
        json!([{"name": "spin", "runtimeClass": {"handler": "Spin_V2"}}]),
    ))
    .await;
    let ext = poll::until("the configuration error", poll::DEFAULT_TIMEOUT, || async {
        let e = f.extension().await?;
        match e.status.as_ref().and_then(|s| s.last_error.clone()) {
            Some(err) => Ok(err),
            None => Err("no lastError yet".to_string()),
        }
    })
    .await;
    assert_eq!(ext.codes, [ErrorCode::ConfigurationProblem]);
    assert!(
        ext.description
            .contains("providerConfig.shims[0].runtimeClass.handler"),
        "{}",
        ext.description
    );
    assert!(ext.description.contains("Spin_V2"), "{}", ext.description);
    let mr_after = f.managed_resource().await.unwrap();
    assert_eq!(mr_after.spec, mr_before.spec, "the applied bundle stays");
    assert_eq!(
        mr_after.metadata.annotations, mr_before.metadata.annotations,
        "no new secret reference"
    );
    assert_eq!(
        runtime_class_of_bundle(f.runtime_class("wasmtime-spin-v2").await.unwrap()),
        rc_before,
        "the RuntimeClass stays as the applied bundle has it"
    );
}

#[tokio::test]
async fn delete_uninstalls_from_every_node_before_removing_the_bundle() {
    let f = Fixture::default("shim-delete").await;
    let node_names: Vec<String> = (0..2)
        .map(|i| support::unique_name(&format!("node-{i}")))
        .collect();
    nodes::create_nodes(&f.shoot, &node_names, "worker-a").await;
    let sim = nodes::start(f.shoot.clone(), "kube-system", INSTALLER_SELECTOR);
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    f.bundle_is(
        managed_resource::Awaited::RolledOut,
        "installed on both nodes",
    )
    .await;

    // The nodes are busy uninstalling: their new installer pods are not ready yet.
    sim.ready.store(false, std::sync::atomic::Ordering::SeqCst);
    gardenlet::delete(&f.api, "containerd-shim").await;
    poll::until(
        "the uninstall in progress",
        poll::DEFAULT_TIMEOUT,
        || async {
            let e = f.extension().await?;
            let description = e
                .status
                .and_then(|s| s.last_operation)
                .map(|l| l.description)
                .unwrap_or_default();
            let mode = f.shoot_desired().await.map(|d| d.mode);
            if description.starts_with("Uninstalling the shims from the nodes")
                && mode == Some(Mode::Uninstall)
            {
                Ok(())
            } else {
                Err(format!("{description} / {mode:?}"))
            }
        },
    )
    .await;
    f.wait_runtime_class("wasmtime-spin-v2", false).await;
    assert!(
        f.managed_resource().await.is_some(),
        "the bundle stays while nodes uninstall"
    );

    // Every node reports clean.
    sim.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    f.gone().await;
    assert!(f.managed_resource().await.is_none());
    poll::until(
        "the installer gone from the shoot",
        poll::DEFAULT_TIMEOUT,
        || async {
            if f.daemon_set().await.is_none() && f.shoot_desired().await.is_none() {
                Ok(())
            } else {
                Err("still there")
            }
        },
    )
    .await;
}

#[tokio::test]
async fn delete_removes_the_bundle_when_the_uninstall_times_out() {
    let settings = ActuatorSettings {
        uninstall_timeout: Duration::from_secs(3),
        ..fast_settings()
    };
    let f = Fixture::new("shim-timeout", settings, objects::shoot("shim-timeout")).await;
    let node_names = vec![support::unique_name("stuck-node")];
    nodes::create_nodes(&f.shoot, &node_names, "worker-a").await;
    let sim = nodes::start(f.shoot.clone(), "kube-system", INSTALLER_SELECTOR);
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    sim.ready.store(false, std::sync::atomic::Ordering::SeqCst);
    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    assert!(f.managed_resource().await.is_none());
}

#[tokio::test]
async fn migrate_keeps_the_shoot_objects_and_restore_brings_the_managed_resource_back() {
    let f = Fixture::default("shim-migrate").await;
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    f.wait_runtime_class("wasmtime-spin-v2", true).await;

    gardenlet::request_operation(&f.api, "containerd-shim", "migrate").await;
    poll::until("Migrate/Succeeded", poll::DEFAULT_TIMEOUT, || async {
        let e = f.extension().await?;
        let last = e
            .status
            .and_then(|s| s.last_operation)
            .map(|l| (l.type_, l.state));
        if last == Some((OperationType::Migrate, OperationState::Succeeded)) {
            Ok(())
        } else {
            Err(format!("{last:?}"))
        }
    })
    .await;
    assert!(
        f.managed_resource().await.is_none(),
        "the ManagedResource leaves the seed"
    );
    assert!(
        f.runtime_class("wasmtime-spin-v2").await.is_some(),
        "shoot objects stay"
    );
    assert!(f.daemon_set().await.is_some(), "shoot objects stay");

    // gardenlet then deletes the migrated object on the source seed (nothing holds it any more)
    // and creates it anew on the target seed: first waiting for its state, then restoring.
    poll::until(
        "finalizers and annotation removed",
        poll::DEFAULT_TIMEOUT,
        || async {
            let e = f.extension().await?;
            if e.finalizers().is_empty()
                && !e.annotations().contains_key("gardener.cloud/operation")
            {
                Ok(())
            } else {
                Err(format!("{:?}", e.metadata))
            }
        },
    )
    .await;
    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    let mut fresh = objects::extension(
        &f.ns,
        "containerd-shim",
        Some(config(json!([{"name": "spin"}]))),
    );
    fresh.metadata.annotations = Some(
        [(
            "gardener.cloud/operation".to_string(),
            "wait-for-state".to_string(),
        )]
        .into(),
    );
    let hist = crate::support::history::record(f.api.clone(), "containerd-shim").await;
    f.api
        .create(&PostParams::default(), &fresh)
        .await
        .expect("create on the target seed");
    let ts = gardenlet::request_operation(&f.api, "containerd-shim", "restore").await;
    f.ready(Some(&ts)).await;
    // Our own writes while the restore annotation was still set queue one more request, which
    // then runs as a plain Reconcile — as with Gardener's library. What matters is that the
    // restore ran and succeeded.
    assert!(
        hist.versions().iter().any(|v| v
            .status
            .as_ref()
            .and_then(|s| s.last_operation.as_ref())
            .is_some_and(
                |l| l.type_ == OperationType::Restore && l.state == OperationState::Succeeded
            )),
        "no Restore/Succeeded"
    );
    assert!(f.managed_resource().await.is_some());
    f.bundle_is(
        managed_resource::Awaited::Healthy,
        "the restored bundle is healthy",
    )
    .await;
}

#[tokio::test]
async fn a_hibernated_shoot_gets_no_rollout() {
    let f = Fixture::default("shim-hibernated").await;
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    let before = f.managed_resource().await.unwrap();

    let mut shoot_json = objects::shoot("shim-hibernated");
    shoot_json["spec"]["hibernation"] = json!({"enabled": true});
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &shoot_json).await;
    shoot::wait_cached(&f._controller.caches, &f.ns, "the hibernation", |s| {
        s.hibernation_enabled()
    })
    .await;
    let ts = f
        .set_config(config(json!([{"name": "spin"}, {"name": "wasmtime"}])))
        .await;
    f.ready(Some(&ts)).await;
    let after = f.managed_resource().await.unwrap();
    assert_eq!(after.spec, before.spec, "no rollout while hibernated");
    assert!(f.runtime_class("wasmtime").await.is_none());
}

/// spin installed on one simulated node that from then on never reports clean: only a delete
/// that skips the uninstall can finish.
async fn installed_on_a_node_that_never_reports_clean(test: &str) -> (Fixture, nodes::Simulator) {
    let f = Fixture::default(test).await;
    nodes::create_nodes(&f.shoot, &[support::unique_name("node")], "worker-a").await;
    let sim = nodes::start(f.shoot.clone(), "kube-system", INSTALLER_SELECTOR);
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    sim.ready.store(false, std::sync::atomic::Ordering::SeqCst);
    (f, sim)
}

/// Deleted while the shoot is hibernated: no nodes to clean, and the shoot's
/// gardener-resource-manager scaled to zero (its finalizer holds the ManagedResource). The
/// Extension goes at once without an uninstall; the bundle's objects go when the shoot wakes up;
/// an Extension enabled again in between waits for that before it writes its bundle.
#[tokio::test]
async fn deleting_while_hibernated_releases_the_extension_and_leaves_the_bundle_to_the_wake_up() {
    let (f, sim) = installed_on_a_node_that_never_reports_clean("shim-hibernated-delete").await;
    bundles::put_resource_manager_to_sleep(&f.seed, &f.ns, MANAGED_RESOURCE).await;
    let mut shoot_json = objects::shoot("shim-hibernated-delete");
    shoot_json["spec"]["hibernation"] = json!({"enabled": true});
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &shoot_json).await;
    shoot::wait_cached(&f._controller.caches, &f.ns, "the hibernation", |s| {
        s.hibernation_enabled()
    })
    .await;

    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    let left = f
        .managed_resource()
        .await
        .expect("the bundle waits for the wake-up");
    assert!(
        left.metadata.deletion_timestamp.is_some(),
        "its deletion is requested"
    );
    assert_ne!(
        f.shoot_desired().await.map(|d| d.mode),
        Some(Mode::Uninstall),
        "no uninstall was rendered"
    );

    // Enabled again before the wake-up: nothing is written while hibernated, and at the wake-up
    // the new bundle waits for the old one's deletion to end.
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    shoot_json["spec"]["hibernation"] = json!({"enabled": false});
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &shoot_json).await;
    shoot::wait_cached(&f._controller.caches, &f.ns, "the wake-up", |s| {
        !s.hibernation_enabled()
    })
    .await;
    // gardenlet's shoot reconcile of the wake-up reconciles the Extension.
    let woken = gardenlet::request_reconcile(&f.api, "containerd-shim").await;
    poll::until(
        "the wake-up reconcile waiting for the old bundle",
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = f
                .api
                .get("containerd-shim")
                .await
                .map_err(|e| e.to_string())?;
            let op = ext.status.and_then(|s| s.last_operation);
            match op {
                Some(op)
                    if op.state == OperationState::Processing
                        && op.description.contains("previous installation") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    bundles::wake_resource_manager(&f.seed, &f.ns, MANAGED_RESOURCE).await;
    poll::until(
        "a new bundle, not being deleted",
        poll::DEFAULT_TIMEOUT,
        || async {
            match f.managed_resource().await {
                Some(mr) if mr.metadata.deletion_timestamp.is_none() => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|m| m.metadata.deletion_timestamp)
                )),
            }
        },
    )
    .await;
    f.ready(Some(&woken)).await;
    f.wait_runtime_class("wasmtime-spin-v2", true).await;

    // Awake, the node reports clean again and the Extension is deleted the ordinary way: the
    // next test must not meet this one's installer pods on a node without a kubelet.
    sim.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    assert!(f.managed_resource().await.is_none());
}

#[tokio::test]
async fn a_deleted_shoot_skips_the_uninstall() {
    let (f, _nodes) = installed_on_a_node_that_never_reports_clean("shim-shoot-deleted").await;
    let mut shoot_json = objects::shoot("shim-shoot-deleted");
    shoot_json["metadata"]["deletionTimestamp"] = json!(jiff::Timestamp::now().to_string());
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &shoot_json).await;
    shoot::wait_cached(&f._controller.caches, &f.ns, "the deletion", |s| {
        s.is_being_deleted()
    })
    .await;
    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    assert_ne!(
        f.shoot_desired().await.map(|d| d.mode),
        Some(Mode::Uninstall),
        "no uninstall was rendered"
    );
}

#[tokio::test]
async fn the_installer_may_only_label_its_own_node_and_use_its_restart_slots() {
    let f = Fixture::default("shim-rbac").await;
    installer_is_confined(f).await;
}

/// A 1.29 Shoot that switched on the beta policy API and the node binding of tokens gets the
/// same two policies as `admissionregistration.k8s.io/v1beta1` objects, read from its Shoot by
/// the controller. They are checked in the bundle here (the control plane's API servers, 1.36,
/// no longer serve the beta policies); admission_policies_1_29.rs applies them to a real
/// kube-apiserver 1.29.
#[tokio::test]
async fn on_a_1_29_shoot_the_policies_go_out_as_v1beta1() {
    let mut shoot = objects::shoot("shim-rbac-beta");
    shoot["spec"]["kubernetes"] = json!({
        "version": "1.29.8",
        "kubeAPIServer": {
            "featureGates": {"ValidatingAdmissionPolicy": true, "ServiceAccountTokenPodNodeInfo": true},
            "runtimeConfig": {"admissionregistration.k8s.io/v1beta1": true}
        }
    });
    let f = Fixture::new("shim-rbac-beta", fast_settings(), shoot).await;
    f.create(config(json!([{"name": "wasmtime"}]))).await;
    f.ready(None).await;
    let policies: Vec<(String, String)> = f
        .bundle()
        .await
        .iter()
        .filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["apiVersion"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(policies.len(), 4, "{policies:?}");
    assert!(
        policies
            .iter()
            .all(|(_, version)| version == "admissionregistration.k8s.io/v1beta1"),
        "{policies:?}"
    );
}

async fn installer_is_confined(f: Fixture) {
    let own = support::unique_name("own-node");
    let other = support::unique_name("other-node");
    nodes::create_nodes(&f.shoot, &[own.clone(), other.clone()], "worker-a").await;
    let _kubelets = nodes::start(f.shoot.clone(), "kube-system", INSTALLER_SELECTOR);
    f.create(config(json!([{"name": "wasmtime"}]))).await;
    f.ready(None).await;
    f.bundle_is(managed_resource::Awaited::Healthy, "bundle applied")
        .await;

    let env = support::Env::load();
    let installer = impersonation::installer_on(
        kube::config::Kubeconfig::read_from(&env.shoot_kubeconfig).expect("shoot kubeconfig"),
        &own,
    )
    .await;
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(installer.clone());
    let label = |key: &str| json!({"metadata": {"labels": {key: "ready"}}});
    let ours = "containerd-shim.extensions.gardener.cloud/wasmtime";

    // Reading its own Node and labelling it with our label is what the installer does.
    node_api.get(&own).await.expect("read own node");
    node_api
        .patch(&own, &PatchParams::default(), &Patch::Merge(&label(ours)))
        .await
        .expect("label own node");
    // The admission policy takes effect asynchronously after gardener-resource-manager created
    // it: poll until it denies another node's label.
    let denied = poll::until(
        "the node policy to deny labelling another node",
        poll::DEFAULT_TIMEOUT,
        || async {
            impersonation::denied(
                node_api
                    .patch(&other, &PatchParams::default(), &Patch::Merge(&label(ours)))
                    .await,
            )
        },
    )
    .await;
    assert!(
        denied.contains("may only change the Node it runs on"),
        "{denied}"
    );
    let foreign = impersonation::denied(
        node_api
            .patch(
                &own,
                &PatchParams::default(),
                &Patch::Merge(&label("example.com/foreign")),
            )
            .await,
    )
    .expect("a foreign label is denied");
    assert!(
        foreign.contains("may only change labels under containerd-shim.extensions.gardener.cloud/"),
        "{foreign}"
    );
    let annotation = json!({"metadata": {"annotations": {"example.com/x": "y"}}});
    impersonation::denied(
        node_api
            .patch(&own, &PatchParams::default(), &Patch::Merge(&annotation))
            .await,
    )
    .expect("a foreign annotation is denied");
    let unschedulable = json!({"spec": {"unschedulable": true}});
    impersonation::denied(
        node_api
            .patch(&own, &PatchParams::default(), &Patch::Merge(&unschedulable))
            .await,
    )
    .expect("spec changes are denied");
    let taint = json!({"spec": {"taints": [{"key": "example.com/x", "effect": "NoSchedule"}]}});
    let denied = impersonation::denied(
        node_api
            .patch(&own, &PatchParams::default(), &Patch::Merge(&taint))
            .await,
    )
    .expect("taints are denied");
    assert!(denied.contains("may not change a Node's spec"), "{denied}");
    let other_uid = Api::<k8s_openapi::api::core::v1::Node>::all(f.shoot.clone())
        .get(&other)
        .await
        .expect("other node")
        .metadata
        .uid
        .unwrap_or_default();
    let owner = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": other, "uid": other_uid}
    ]}});
    let denied = impersonation::denied(
        node_api
            .patch(&own, &PatchParams::default(), &Patch::Merge(&owner))
            .await,
    )
    .expect("owner references are denied");
    assert!(
        denied.contains("may not change a Node's owner references"),
        "{denied}"
    );
    let finalizer = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    let denied = impersonation::denied(
        node_api
            .patch(&own, &PatchParams::default(), &Patch::Merge(&finalizer))
            .await,
    )
    .expect("finalizers are denied");
    assert!(
        denied.contains("may not change a Node's finalizers"),
        "{denied}"
    );
    impersonation::denied(node_api.delete(&own, &Default::default()).await)
        .expect("deleting nodes is not granted");

    // Restart-budget slots: only the configured slot names can be read and updated.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(installer.clone(), "kube-system");
    let slot = k8s_openapi::api::coordination::v1::Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("containerd-shim-restart-0".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    leases
        .create(&PostParams::default(), &slot)
        .await
        .expect("create slot 0");
    let mut current = leases
        .get("containerd-shim-restart-0")
        .await
        .expect("read slot 0");
    current.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
        holder_identity: Some(own.clone()),
        ..Default::default()
    });
    leases
        .replace(
            "containerd-shim-restart-0",
            &PostParams::default(),
            &current,
        )
        .await
        .expect("take slot 0");
    impersonation::denied(leases.get("kube-controller-manager").await)
        .expect("other Leases are not readable");
    let foreign_lease = k8s_openapi::api::coordination::v1::Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("kube-scheduler-takeover".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    // The Lease policy loads independently of the Node policy: poll, and with a dry run, so
    // that a create slipping through before it is loaded stores nothing.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    impersonation::until_refused(
        "creating another Lease",
        "may only create its restart-budget Leases",
        || leases.create(&dry_run, &foreign_lease),
    )
    .await;
    impersonation::denied(leases.list(&ListParams::default()).await)
        .expect("listing Leases is not granted");
    let secrets: Api<Secret> = Api::namespaced(installer, "kube-system");
    impersonation::denied(secrets.list(&ListParams::default()).await)
        .expect("secrets are not readable");

    // Clean up what this test created outside its bundle.
    let admin_leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(f.shoot.clone(), "kube-system");
    let _ = admin_leases
        .delete("containerd-shim-restart-0", &Default::default())
        .await;
    nodes::delete_simulated_nodes(&f.shoot).await;
}
