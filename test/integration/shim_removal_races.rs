//! Removals that follow a change within milliseconds, as gardenlet drives them: a deletion, a
//! dropped shim, a migration and restore right after a reconcile. Whatever happens, the shoot
//! keeps no object that names our ManagedResource as its origin unless the current bundle
//! holds it.
//!
//! gardener-resource-manager records what it applied only in the status update that ends a
//! pass; a pass overtaken by the next bundle never records what it created, and only recorded
//! objects are ever deleted. Each scenario is repeated at several offsets after gardenlet's
//! readiness wait, so that the removal meets the resource manager at different points of its
//! pass.

use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{Extension, ManagedResource};
use gardener_extension_containerd_shim::gardener::managed_resource;
use gardener_extension_containerd_shim::shim::actuator::ActuatorSettings;
use gardener_extension_containerd_shim::shim::identity::MANAGED_RESOURCE;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::shim_lifecycle::{Fixture, config, fast_settings};
use crate::support::bundles::{self, ORIGIN_ANNOTATION, ShootObject};
use crate::support::{self, gardenlet, history, objects};

/// How long after gardenlet's readiness wait the removal comes.
const OFFSETS_MS: [u64; 6] = [0, 10, 25, 50, 100, 250];
const DELETE_ROUNDS: usize = 20;
const REMOVE_ROUNDS: usize = 12;
const RESTORE_ROUNDS: usize = 6;

const SPIN: &str = "wasmtime-spin-v2";

fn settings() -> ActuatorSettings {
    ActuatorSettings {
        poll_interval: Duration::from_millis(200),
        ..fast_settings()
    }
}

/// The deliberate gap between gardenlet's readiness wait and its next request. This is not a
/// wait for some state (those poll): it places the request at a chosen point of the resource
/// manager's pass.
async fn gap(offset_ms: u64) {
    tokio::time::sleep(Duration::from_millis(offset_ms)).await;
}

impl Fixture {
    /// gardenlet's `gardener` secret: with it the extension can look into the shoot.
    async fn grant_shoot_access(&self) {
        let kubeconfig =
            std::fs::read(&self.env.shoot_kubeconfig).expect("read the shoot kubeconfig");
        Api::<Secret>::namespaced(self.seed.clone(), &self.ns)
            .create(
                &PostParams::default(),
                &objects::shoot_access_secret(&self.ns, kubeconfig),
            )
            .await
            .expect("create the shoot access secret");
    }

    /// gardenlet's readiness wait, noticing readiness at once.
    async fn ready_now(&self, ts: Option<&str>) -> Extension {
        gardenlet::watch_ready(&self.api, "containerd-shim", ts).await
    }

    /// What names our ManagedResource as its origin in the shoot.
    async fn objects_left(&self) -> Vec<ShootObject> {
        bundles::objects_with_origin(&self.shoot, &self.ns, MANAGED_RESOURCE).await
    }

    /// gardenlet's deletion and its wait until the Extension is gone; then what the shoot still
    /// holds of our ManagedResource.
    async fn delete_and_list_left(&self) -> Vec<String> {
        gardenlet::delete(&self.api, "containerd-shim").await;
        self.gone().await;
        self.objects_left()
            .await
            .iter()
            .map(|o| o.to_string())
            .collect()
    }

    async fn runtime_classes_left(&self) -> Vec<String> {
        self.objects_left()
            .await
            .into_iter()
            .filter(|o| o.kind.kind == "RuntimeClass")
            .map(|o| o.name)
            .collect()
    }

    /// Removes by hand what a failed round left, so that the next round starts clean.
    async fn delete_objects_left(&self, keep: &[&str]) {
        for object in self.objects_left().await {
            if !keep.contains(&object.to_string().as_str()) {
                object.delete(&self.shoot).await;
            }
        }
    }

    async fn wait_caught_up(&self) {
        bundles::wait_caught_up(&self.seed, &self.ns, MANAGED_RESOURCE).await;
    }

    /// gardenlet's wait for the migration: Migrate/Succeeded, and no finalizer holds the object
    /// any more on this seed.
    async fn wait_released_after_migration(&self) {
        gardenlet::wait_migrated(&self.api, "containerd-shim").await;
    }
}

/// One shim before the change.
fn before() -> serde_json::Value {
    config(json!([{"name": "spin"}]))
}

/// Every catalog shim after it: the resource manager's pass that creates four RuntimeClasses
/// is the pass the removal meets.
fn after() -> serde_json::Value {
    config(json!([
        {"name": "spin"}, {"name": "crun"}, {"name": "wasmtime"}, {"name": "gvisor"}
    ]))
}

/// The offset of each round: every offset in turn until `rounds`.
fn offsets(rounds: usize) -> impl Iterator<Item = (usize, u64)> {
    (0..rounds).map(|round| (round, OFFSETS_MS[round % OFFSETS_MS.len()]))
}

#[tokio::test]
async fn deleting_right_after_shims_were_added_leaves_nothing_in_the_shoot() {
    // No shoot access: the uninstall's check for leftovers cannot run, so only waiting for the
    // resource manager keeps the shoot clean here.
    let f = Fixture::new("race-delete", settings(), objects::shoot("race-delete")).await;
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    for (round, offset) in offsets(DELETE_ROUNDS) {
        f.create(before()).await;
        f.ready_now(None).await;
        let ts = f.set_config(after()).await;
        f.ready_now(Some(&ts)).await;
        gap(offset).await;
        let left = f.delete_and_list_left().await;
        if !left.is_empty() {
            failures.push(format!(
                "round {round}, deleted after {offset} ms: {left:?}"
            ));
            f.delete_objects_left(&[]).await;
        }
    }
    eprintln!(
        "{DELETE_ROUNDS} deletions right after adding shims in {:?}",
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {DELETE_ROUNDS} deletions left objects in the shoot:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn removing_shims_right_after_adding_them_leaves_only_the_remaining_runtime_classes() {
    let f = Fixture::new("race-remove", settings(), objects::shoot("race-remove")).await;
    f.create(before()).await;
    f.ready_now(None).await;
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    for (round, offset) in offsets(REMOVE_ROUNDS) {
        let ts = f.set_config(after()).await;
        f.ready_now(Some(&ts)).await;
        gap(offset).await;
        let ts = f.set_config(before()).await;
        f.ready_now(Some(&ts)).await;
        f.wait_caught_up().await;
        let left = f.runtime_classes_left().await;
        if left != [SPIN] {
            failures.push(format!(
                "round {round}, removed after {offset} ms: {left:?}"
            ));
            let keep: Vec<String> = f
                .objects_left()
                .await
                .iter()
                .filter(|o| o.kind.kind != "RuntimeClass" || o.name == SPIN)
                .map(|o| o.to_string())
                .collect();
            f.delete_objects_left(&keep.iter().map(String::as_str).collect::<Vec<_>>())
                .await;
        }
    }
    eprintln!(
        "{REMOVE_ROUNDS} removals right after adding shims in {:?}",
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {REMOVE_ROUNDS} removals left other RuntimeClasses than {SPIN}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn a_restore_removes_what_the_migrated_bundle_held_and_the_restored_one_does_not() {
    let f = Fixture::new("race-restore", settings(), objects::shoot("race-restore")).await;
    f.grant_shoot_access().await;
    f.create(before()).await;
    f.ready_now(None).await;
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let mut removals = 0;
    // The offsets, then once after the resource manager has applied the added shims: that
    // round always leaves them in the shoot for the restore to remove.
    let rounds = offsets(RESTORE_ROUNDS)
        .map(|(round, offset)| (round, Some(offset)))
        .chain([(RESTORE_ROUNDS, None)]);
    for (round, offset) in rounds {
        let when = offset.map_or("after the resource manager caught up".to_string(), |ms| {
            format!("{ms} ms after adding shims")
        });
        // Shims added, then migrated: the migrated ManagedResource is deleted with keepObjects,
        // possibly before the resource manager has recorded (or even created) what it applies.
        // The shoot keeps whatever it created.
        let ts = f.set_config(after()).await;
        f.ready_now(Some(&ts)).await;
        match offset {
            Some(ms) => gap(ms).await,
            None => f.wait_caught_up().await,
        }
        gardenlet::request_operation(&f.api, "containerd-shim", "migrate").await;
        f.wait_released_after_migration().await;
        gardenlet::delete(&f.api, "containerd-shim").await;
        f.gone().await;
        let kept: Vec<String> = f
            .runtime_classes_left()
            .await
            .into_iter()
            .filter(|rc| rc != SPIN)
            .collect();

        // The restore, as on the target seed (wait-for-state, then restore), with the
        // configuration as it is there: the added shims are gone again.
        let mut restored = objects::extension(&f.ns, "containerd-shim", Some(before()));
        restored.metadata.annotations = Some(
            [(
                "gardener.cloud/operation".to_string(),
                "wait-for-state".to_string(),
            )]
            .into(),
        );
        let hist = history::record(f.api.clone(), "containerd-shim").await;
        f.api
            .create(&PostParams::default(), &restored)
            .await
            .expect("create the Extension on the target seed");
        let ts = gardenlet::request_operation(&f.api, "containerd-shim", "restore").await;
        f.ready_now(Some(&ts)).await;
        f.wait_caught_up().await;
        let left = f.runtime_classes_left().await;
        let unreported: Vec<&String> = kept
            .iter()
            .filter(|rc| !reported_removal(&hist.versions(), &format!("RuntimeClass {rc}")))
            .collect();
        if left != [SPIN] {
            failures.push(format!("round {round}, migrated {when}: {left:?}"));
        } else if !unreported.is_empty() {
            failures.push(format!(
                "round {round}, migrated {when}: the restore did not report removing {unreported:?}: {:?}",
                descriptions(&hist.versions())
            ));
        } else if offset.is_none() && kept.is_empty() {
            failures.push(format!(
                "round {round}, migrated {when}: no added RuntimeClass was in the shoot"
            ));
        }
        removals += usize::from(!kept.is_empty());
    }
    eprintln!(
        "{} migrations after adding shims, restored without them ({removals} with shims to remove), in {:?}",
        RESTORE_ROUNDS + 1,
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} restores went wrong:\n{}",
        failures.len(),
        RESTORE_ROUNDS + 1,
        failures.join("\n")
    );
}

/// Whether one of `versions` reported, while in progress, the removal of `object` (as
/// `Kind name`) as an object the resource manager had lost track of.
fn reported_removal(versions: &[Extension], object: &str) -> bool {
    descriptions(versions).iter().any(|d| {
        d.starts_with("Removing objects that gardener-resource-manager had lost track of:")
            && d.split([':', ',']).any(|part| part.trim() == object)
    })
}

fn descriptions(versions: &[Extension]) -> Vec<String> {
    versions
        .iter()
        .filter_map(|v| v.status.as_ref()?.last_operation.as_ref())
        .map(|l| l.description.clone())
        .collect()
}

#[tokio::test]
async fn the_uninstall_removes_objects_the_resource_manager_no_longer_tracked() {
    let f = Fixture::new("leftovers", settings(), objects::shoot("leftovers")).await;
    f.grant_shoot_access().await;
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready_now(None).await;
    f.wait_caught_up().await;

    // An object the resource manager applied from our bundle and then lost track of: it names
    // our ManagedResource as its origin and carries the labels it injects, but no status lists
    // it.
    let name = support::unique_name("left-behind");
    let stray = RuntimeClass {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "shoot.gardener.cloud/no-cleanup".to_string(),
                    "true".to_string(),
                )]
                .into(),
            ),
            annotations: Some(
                [(
                    ORIGIN_ANNOTATION.to_string(),
                    format!("{}/{MANAGED_RESOURCE}", f.ns),
                )]
                .into(),
            ),
            ..Default::default()
        },
        handler: "left-behind".into(),
        ..Default::default()
    };
    Api::<RuntimeClass>::all(f.shoot.clone())
        .create(&PostParams::default(), &stray)
        .await
        .expect("create the stray RuntimeClass");

    let hist = history::record(f.api.clone(), "containerd-shim").await;
    let left = f.delete_and_list_left().await;
    assert!(left.is_empty(), "the shoot keeps {left:?}");
    assert!(
        reported_removal(&hist.versions(), &format!("RuntimeClass {name}")),
        "the deletion did not report the stray object: {:?}",
        descriptions(&hist.versions())
    );
}

#[tokio::test]
async fn a_removal_waits_for_the_resource_manager_but_not_forever() {
    let settings = ActuatorSettings {
        catch_up_timeout: Duration::from_secs(4),
        ..settings()
    };
    let f = Fixture::new(
        "catch-up-timeout",
        settings,
        objects::shoot("catch-up-timeout"),
    )
    .await;
    f.create(config(json!([{"name": "spin"}, {"name": "wasmtime"}])))
        .await;
    f.ready_now(None).await;
    f.wait_caught_up().await;

    // The resource manager stops applying this ManagedResource (as if it were down): it never
    // observes another generation.
    Api::<ManagedResource>::namespaced(f.seed.clone(), &f.ns)
        .patch(
            MANAGED_RESOURCE,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"resources.gardener.cloud/ignore": "true"}}}),
            ),
        )
        .await
        .expect("make gardener-resource-manager ignore the ManagedResource");
    // Adding removes nothing: it is written at once.
    let ts = f
        .set_config(config(
            json!([{"name": "spin"}, {"name": "wasmtime"}, {"name": "gvisor"}]),
        ))
        .await;
    f.ready_now(Some(&ts)).await;

    let hist = history::record(f.api.clone(), "containerd-shim").await;
    let ts = f.set_config(config(json!([{"name": "spin"}]))).await;
    f.ready_now(Some(&ts)).await;
    let waited = descriptions(&hist.versions()).into_iter().find(|d| {
        d.starts_with(
            "Waiting before removing RuntimeClass gvisor, RuntimeClass wasmtime from the shoot: gardener-resource-manager has not applied generation",
        )
    });
    assert!(
        waited.is_some(),
        "the removal did not wait for the resource manager: {:?}",
        descriptions(&hist.versions())
    );
    // After the catch-up timeout the bundle without the two shims was written anyway.
    let mr = f.managed_resource().await.expect("the ManagedResource");
    let secret = Api::<Secret>::namespaced(f.seed.clone(), &f.ns)
        .get(&mr.spec.secret_refs[0].name)
        .await
        .expect("the bundle secret");
    let kinds =
        objects::kinds(&managed_resource::decode_secret(&secret).expect("the bundle decodes"));
    let runtime_classes: Vec<&String> = kinds
        .iter()
        .filter(|k| k.starts_with("RuntimeClass/"))
        .collect();
    assert_eq!(runtime_classes, ["RuntimeClass/wasmtime-spin-v2"]);
}
