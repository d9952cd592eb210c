//! The Extension reconciler against the real seed API server: every given/when/then of
//! gardener-contract.md §7 that concerns the lifecycle reconciler (T1–T7, T10c), named after
//! its id. Each test runs its own controller on its own shoot namespace with a recording
//! actuator, and judges the result with a port of gardenlet's readiness check.

use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ErrorCode, Extension, ExtensionSpec, OPERATION_ANNOTATION, OperationState,
    OperationType,
};
use gardener_extension_containerd_shim::gardener::extension::{ReconcilerConfig, TriggerMode};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::support::actuator::{Behaviour, Op, Recorder};
use crate::support::controller::{self, RunningController};
use crate::support::{self, gardenlet, history, objects, poll, shoot};

const TYPE: &str = "containerd-shim";
const FINALIZER: &str = "extensions.gardener.cloud/containerd-shim";
const FOREIGN_FINALIZER: &str = "test.gardener.cloud/keep";
/// How long a test watches for something that must NOT happen.
const QUIET: Duration = Duration::from_secs(3);

struct Fixture {
    seed: kube::Client,
    ns: String,
    api: Api<Extension>,
    recorder: Recorder,
}

impl Fixture {
    /// A shoot namespace with a Cluster (or without, when `shoot` is None).
    async fn new(test: &str, shoot: Option<Value>) -> Fixture {
        let c = support::Clusters::connect().await;
        let ns = support::create_shoot_namespace(&c.seed, test).await;
        if let Some(shoot) = shoot {
            Api::<Cluster>::all(c.seed.clone())
                .create(&PostParams::default(), &objects::cluster(&ns, shoot))
                .await
                .expect("create Cluster");
        }
        Fixture {
            api: Api::namespaced(c.seed.clone(), &ns),
            seed: c.seed,
            ns,
            recorder: Recorder::default(),
        }
    }

    async fn with_shoot(test: &str) -> Fixture {
        Fixture::new(test, Some(objects::shoot(test))).await
    }

    fn config(&self) -> ReconcilerConfig {
        controller::config(TYPE, &self.ns)
    }

    async fn start(&self) -> RunningController {
        self.start_with(self.config()).await
    }

    async fn start_with(&self, config: ReconcilerConfig) -> RunningController {
        controller::start(self.seed.clone(), self.recorder.actuator(), config).await
    }

    async fn create(
        &self,
        name: &str,
        annotations: &[(&str, &str)],
        finalizers: &[&str],
    ) -> Extension {
        let ext = objects::extension(&self.ns, TYPE, Some(json!({"any": "config"})));
        let ext = objects::named(ext, name, annotations, finalizers);
        self.api
            .create(&PostParams::default(), &ext)
            .await
            .expect("create Extension")
    }

    /// Polls until Extension `name` has no operation annotation; `what` names the wait.
    async fn without_annotation(&self, name: &str, what: &str) -> Extension {
        poll::until(what, poll::DEFAULT_TIMEOUT, || async {
            let e = self.get(name).await;
            if has_annotation(&e) {
                Err(format!("still annotated: {:?}", e.annotations()))
            } else {
                Ok(e)
            }
        })
        .await
    }

    async fn get(&self, name: &str) -> Extension {
        self.api.get(name).await.expect("get Extension")
    }

    async fn patch(&self, name: &str, body: Value) -> Extension {
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("patch Extension")
    }

    async fn patch_status(&self, name: &str, body: Value) -> Extension {
        self.api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("patch Extension status")
    }

    async fn wait_calls(&self, op: Op, n: usize) {
        poll::until(
            &format!("{n} {op:?} call(s)"),
            poll::DEFAULT_TIMEOUT,
            || async {
                let count = self.recorder.count(op);
                if count >= n {
                    Ok(())
                } else {
                    Err(format!("{:?}", self.recorder.ops()))
                }
            },
        )
        .await;
    }

    async fn wait_state(
        &self,
        name: &str,
        type_: OperationType,
        state: OperationState,
    ) -> Extension {
        poll::until(
            &format!("{name} to reach {type_:?}/{state:?}"),
            poll::DEFAULT_TIMEOUT,
            || async {
                let ext = self.api.get(name).await.map_err(|e| e.to_string())?;
                match last_op(&ext) {
                    Some((t, s)) if t == type_ && s == state => Ok(ext),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
    }

    /// Holds for QUIET: no new actuator calls and the object's resourceVersion unchanged.
    async fn stays_untouched(&self, name: &str) {
        let before = self.get(name).await.resource_version();
        let calls = self.recorder.calls().len();
        poll::stays(&format!("{name} untouched"), QUIET, || async {
            let now = self
                .api
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .resource_version();
            let n = self.recorder.calls().len();
            if now == before && n == calls {
                Ok(())
            } else {
                Err(format!(
                    "resourceVersion {before:?} -> {now:?}, calls {calls} -> {n}: {:?}",
                    self.recorder.ops()
                ))
            }
        })
        .await;
    }

    async fn gone(&self, name: &str) {
        poll::until(
            &format!("{name} to be deleted"),
            poll::DEFAULT_TIMEOUT,
            || async {
                match self.api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(e) => Err(format!("finalizers {:?}", e.finalizers())),
                }
            },
        )
        .await;
    }
}

fn last_op(ext: &Extension) -> Option<(OperationType, OperationState)> {
    ext.status
        .as_ref()?
        .last_operation
        .as_ref()
        .map(|l| (l.type_, l.state))
}

fn has_annotation(ext: &Extension) -> bool {
    ext.annotations().contains_key(OPERATION_ANNOTATION)
}

/// Brings a fresh Extension to Create/Succeeded with our finalizer.
async fn reconciled(f: &Fixture, name: &str, finalizers: &[&str]) -> Extension {
    f.create(name, &[], finalizers).await;
    f.wait_state(name, OperationType::Create, OperationState::Succeeded)
        .await
}

#[tokio::test]
async fn t1a_reconcile_annotation_is_removed_before_the_actuator_returns() {
    let f = Fixture::with_shoot("t1a").await;
    let _c = f.start().await;
    f.recorder.set(Behaviour::Block);
    f.create("ext", &[(OPERATION_ANNOTATION, "reconcile")], &[])
        .await;
    f.wait_calls(Op::Reconcile, 1).await;

    let during = f.get("ext").await;
    assert!(
        !has_annotation(&during),
        "annotation still there while the actuator runs"
    );
    assert_eq!(
        last_op(&during),
        Some((OperationType::Create, OperationState::Processing))
    );
    assert!(
        !has_annotation(&f.recorder.calls()[0].extension),
        "the actuator saw the annotation"
    );
    assert!(
        f.recorder.calls()[0].had_cluster,
        "the actuator must get the Cluster in a shoot namespace"
    );

    f.recorder.release();
    gardenlet::wait_ready(&f.api, "ext", None).await;
}

#[tokio::test]
async fn t1b_restore_annotation_stays_until_restore_succeeded() {
    let f = Fixture::with_shoot("t1b").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[]).await;

    f.recorder.set(Behaviour::fail("no state"));
    let hist = history::record(f.api.clone(), "ext").await;
    gardenlet::request_operation(&f.api, "ext", "restore").await;
    let failed = f
        .wait_state("ext", OperationType::Restore, OperationState::Error)
        .await;
    assert_eq!(
        failed
            .annotations()
            .get(OPERATION_ANNOTATION)
            .map(String::as_str),
        Some("restore")
    );

    f.recorder.set(Behaviour::Succeed);
    // The annotation goes only after the restore succeeded; then the reconciler's own writes
    // made while it was set bring one more (plain) reconcile, as with Gardener's library.
    let done = f
        .without_annotation("ext", "the restore annotation to be removed")
        .await;
    assert!(done.finalizers().contains(&FINALIZER.to_string()));
    let versions = hist.versions();
    assert!(
        versions.iter().any(|v| last_op(v)
            == Some((OperationType::Restore, OperationState::Succeeded))
            && has_annotation(v)),
        "no version with Restore/Succeeded and the annotation: {:?}",
        versions
            .iter()
            .map(|v| (last_op(v), has_annotation(v)))
            .collect::<Vec<_>>()
    );
    // The first version without the annotation comes after a version that records success.
    let restore_requested = versions
        .iter()
        .position(has_annotation)
        .expect("the restore request was recorded");
    let removed = versions[restore_requested..]
        .iter()
        .position(|v| !has_annotation(v))
        .map(|p| p + restore_requested)
        .expect("the annotation was removed");
    assert!(
        versions[restore_requested..removed]
            .iter()
            .any(|v| last_op(v) == Some((OperationType::Restore, OperationState::Succeeded))),
        "the annotation disappeared before Restore/Succeeded was recorded"
    );
    assert!(f.recorder.count(Op::Restore) >= 2);
}

#[tokio::test]
async fn t1c_wait_for_state_does_nothing_even_during_deletion() {
    let f = Fixture::with_shoot("t1c").await;
    let _c = f.start().await;
    f.create("fresh", &[(OPERATION_ANNOTATION, "wait-for-state")], &[])
        .await;
    f.stays_untouched("fresh").await;
    assert!(f.get("fresh").await.status.is_none());

    f.create(
        "deleting",
        &[(OPERATION_ANNOTATION, "wait-for-state")],
        &[FINALIZER, FOREIGN_FINALIZER],
    )
    .await;
    f.api
        .delete("deleting", &DeleteParams::default())
        .await
        .expect("delete");
    f.stays_untouched("deleting").await;
    let ext = f.get("deleting").await;
    assert_eq!(ext.finalizers(), [FINALIZER, FOREIGN_FINALIZER]);
    assert!(ext.status.is_none());
    assert!(f.recorder.calls().is_empty(), "{:?}", f.recorder.ops());
}

#[tokio::test]
async fn t2a_success_status_is_what_gardenlet_accepts() {
    let f = Fixture::with_shoot("t2a").await;
    f.create("ext", &[], &[]).await;
    // Generation 3 before the controller ever sees the object.
    f.patch("ext", json!({"spec": {"providerConfig": {"n": 2}}}))
        .await;
    f.patch("ext", json!({"spec": {"providerConfig": {"n": 3}}}))
        .await;
    let ts = (jiff::Timestamp::now() + jiff::SignedDuration::from_millis(700)).to_string();
    f.patch("ext", json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile", "gardener.cloud/timestamp": ts}}})).await;
    let _c = f.start().await;

    let ext = gardenlet::wait_ready(&f.api, "ext", Some(&ts)).await;
    let status = ext.status.clone().unwrap_or_default();
    assert_eq!(ext.metadata.generation, Some(3));
    assert_eq!(status.observed_generation, Some(3));
    let last = status.last_operation.expect("lastOperation");
    assert_eq!(
        (last.type_, last.state, last.progress),
        (OperationType::Create, OperationState::Succeeded, 100)
    );
    assert_eq!(last.description, "Successfully reconciled Extension");
    assert!(status.last_error.is_none());
    assert!(!has_annotation(&ext));
    assert_eq!(ext.finalizers(), [FINALIZER]);
}

#[tokio::test]
async fn t2b_every_success_refreshes_last_update_time() {
    let f = Fixture::with_shoot("t2b").await;
    let _c = f.start().await;
    let first = reconciled(&f, "ext", &[]).await;
    let t1 = first
        .status
        .unwrap()
        .last_operation
        .unwrap()
        .last_update_time
        .0;
    // lastUpdateTime has second precision: let the clock pass into the next second.
    poll::until("the next second", Duration::from_secs(3), || async {
        if jiff::Timestamp::now().as_second() > t1.as_second() {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;
    let ts = gardenlet::request_reconcile(&f.api, "ext").await;
    let second = gardenlet::wait_ready(&f.api, "ext", Some(&ts)).await;
    let last = second.status.unwrap().last_operation.unwrap();
    assert_eq!(last.type_, OperationType::Reconcile);
    assert!(
        last.last_update_time.0 > t1,
        "{} is not newer than {t1}",
        last.last_update_time.0
    );
}

#[tokio::test]
async fn t2c_actuator_errors_become_last_error_with_codes_and_are_retried() {
    let f = Fixture::with_shoot("t2c").await;
    let _c = f.start().await;
    f.recorder.set(Behaviour::Fail {
        message: "boom".into(),
        codes: vec![ErrorCode::ConfigurationProblem],
    });
    f.create("ext", &[], &[]).await;
    let ext = f
        .wait_state("ext", OperationType::Create, OperationState::Error)
        .await;
    let status = ext.status.clone().unwrap();
    let last = status.last_operation.unwrap();
    assert_eq!(last.progress, 50);
    assert_eq!(last.description, "Error reconciling Extension: boom");
    let err = status.last_error.expect("lastError");
    assert_eq!(err.description, "Error reconciling Extension: boom");
    assert_eq!(err.codes, [ErrorCode::ConfigurationProblem]);
    assert_eq!(status.observed_generation, ext.metadata.generation);
    match gardenlet::check_extension_object(&ext) {
        Err(gardenlet::NotReady::LastError { codes, .. }) => {
            assert_eq!(codes, ["ERR_CONFIGURATION_PROBLEM"])
        }
        other => panic!("gardenlet must report the error, got {other:?}"),
    }
    // Requeued with backoff: the actuator is called again without any new event.
    f.wait_calls(Op::Reconcile, 3).await;
}

#[tokio::test]
async fn t2d_last_error_stays_while_processing_and_goes_on_success() {
    let f = Fixture::with_shoot("t2d").await;
    let _c = f.start().await;
    f.recorder.set(Behaviour::fail("boom"));
    f.create("ext", &[], &[]).await;
    f.wait_state("ext", OperationType::Create, OperationState::Error)
        .await;

    f.recorder.set(Behaviour::Block);
    let during = f
        .wait_state("ext", OperationType::Create, OperationState::Processing)
        .await;
    assert!(
        during.status.as_ref().unwrap().last_error.is_some(),
        "lastError must stay visible while processing"
    );
    f.recorder.release();
    let done = gardenlet::wait_ready(&f.api, "ext", None).await;
    assert!(done.status.unwrap().last_error.is_none());
}

#[tokio::test]
async fn t3a_migrate_beats_deletion_and_removes_every_finalizer() {
    let f = Fixture::with_shoot("t3a").await;
    let _c = f.start().await;
    reconciled(&f, "plain", &[FOREIGN_FINALIZER]).await;
    gardenlet::request_operation(&f.api, "plain", "migrate").await;
    f.wait_state("plain", OperationType::Migrate, OperationState::Succeeded)
        .await;
    let migrated = poll::until(
        "finalizers and annotation removed",
        poll::DEFAULT_TIMEOUT,
        || async {
            let e = f.get("plain").await;
            if e.finalizers().is_empty() && !has_annotation(&e) {
                Ok(e)
            } else {
                Err(format!("{:?} {:?}", e.finalizers(), e.annotations()))
            }
        },
    )
    .await;
    assert_eq!(
        last_op(&migrated),
        Some((OperationType::Migrate, OperationState::Succeeded))
    );

    reconciled(&f, "deleting", &[FOREIGN_FINALIZER]).await;
    f.patch(
        "deleting",
        json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "migrate"}}}),
    )
    .await;
    f.api
        .delete("deleting", &DeleteParams::default())
        .await
        .expect("delete");
    f.gone("deleting").await;
    let deleting_ops: Vec<Op> = f
        .recorder
        .calls()
        .into_iter()
        .filter(|c| c.extension.name_any() == "deleting")
        .map(|c| c.op)
        .collect();
    assert_eq!(
        deleting_ops,
        [Op::Reconcile, Op::Migrate],
        "Migrate, never Delete"
    );
}

#[tokio::test]
async fn t3b_after_a_successful_migration_deletion_does_nothing() {
    let f = Fixture::with_shoot("t3b").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[]).await;
    gardenlet::request_operation(&f.api, "ext", "migrate").await;
    f.wait_state("ext", OperationType::Migrate, OperationState::Succeeded)
        .await;
    poll::until("finalizers removed", poll::DEFAULT_TIMEOUT, || async {
        if f.get("ext").await.finalizers().is_empty() {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;
    // Keep the object alive through its deletion to see what the reconciler does.
    f.patch(
        "ext",
        json!({"metadata": {"finalizers": [FOREIGN_FINALIZER]}}),
    )
    .await;
    let calls = f.recorder.calls().len();
    f.api
        .delete("ext", &DeleteParams::default())
        .await
        .expect("delete");
    f.stays_untouched("ext").await;
    assert_eq!(
        f.recorder.calls().len(),
        calls,
        "no Delete after migration: {:?}",
        f.recorder.ops()
    );
    assert_eq!(
        last_op(&f.get("ext").await),
        Some((OperationType::Migrate, OperationState::Succeeded))
    );
}

#[tokio::test]
async fn t3c_a_failed_migration_is_retried_without_the_annotation() {
    let f = Fixture::with_shoot("t3c").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[]).await;
    f.recorder.set(Behaviour::fail("cannot save state"));
    gardenlet::request_operation(&f.api, "ext", "migrate").await;
    let failed = f
        .wait_state("ext", OperationType::Migrate, OperationState::Error)
        .await;
    assert!(has_annotation(&failed), "migrate stays until success");
    // The retries back off (client-go's 5 ms doubling): neither the annotation that stays nor
    // the Error status each attempt writes may turn them into a tight loop. Every migrate call
    // so far failed, so the call after the n-th comes at least 5 ms × 2ⁿ⁻¹ later.
    let migrations = poll::until("six migrate attempts", Duration::from_secs(30), || async {
        let calls: Vec<std::time::Instant> = f
            .recorder
            .calls()
            .iter()
            .filter(|c| c.op == Op::Migrate)
            .map(|c| c.at)
            .collect();
        if calls.len() >= 6 {
            Ok(calls)
        } else {
            Err(calls.len())
        }
    })
    .await;
    for (n, pair) in migrations.windows(2).enumerate().take(5) {
        let gap = pair[1].duration_since(pair[0]);
        let backoff = Duration::from_millis(5 << n);
        assert!(
            gap >= backoff,
            "retry {} came {gap:?} after the failure, before its backoff of {backoff:?}",
            n + 1
        );
    }

    f.patch(
        "ext",
        json!({"metadata": {"annotations": {OPERATION_ANNOTATION: null}}}),
    )
    .await;
    let before = f.recorder.count(Op::Migrate);
    f.recorder.set(Behaviour::Succeed);
    f.wait_state("ext", OperationType::Migrate, OperationState::Succeeded)
        .await;
    assert!(f.recorder.count(Op::Migrate) > before);
    assert_eq!(
        f.recorder.count(Op::Reconcile),
        1,
        "the retry must migrate, not reconcile"
    );
}

#[tokio::test]
async fn t3d_first_operation_is_create_then_reconcile() {
    let f = Fixture::with_shoot("t3d").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[]).await;
    let ts = gardenlet::request_reconcile(&f.api, "ext").await;
    // Within the same second gardenlet's check cannot tell the old success from the new one,
    // so wait for the operation type to change, then apply the check.
    let ext = f
        .wait_state("ext", OperationType::Reconcile, OperationState::Succeeded)
        .await;
    gardenlet::check_extension_object(&ext).expect("gardenlet accepts the reconcile");
    assert_eq!(ext.annotations().get("gardener.cloud/timestamp"), Some(&ts));
}

#[tokio::test]
async fn t4a_status_finalizer_and_unrelated_annotation_changes_do_not_reconcile() {
    let f = Fixture::with_shoot("t4a").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[]).await;
    let calls = f.recorder.calls().len();
    f.patch_status("ext", json!({"status": {"providerStatus": {"x": 1}}}))
        .await;
    f.patch(
        "ext",
        json!({"metadata": {"finalizers": [FINALIZER, FOREIGN_FINALIZER]}}),
    )
    .await;
    f.patch(
        "ext",
        json!({"metadata": {"annotations": {"unrelated": "x"}}}),
    )
    .await;
    f.patch("ext", json!({"metadata": {"labels": {"some": "label"}}}))
        .await;
    poll::stays("no reconcile", QUIET, || async {
        if f.recorder.calls().len() == calls {
            Ok(())
        } else {
            Err(f.recorder.ops())
        }
    })
    .await;
}

#[tokio::test]
async fn t4b_deletion_updates_reconcile_but_own_status_writes_do_not() {
    let f = Fixture::with_shoot("t4b").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[FOREIGN_FINALIZER]).await;
    f.recorder.set(Behaviour::InProgress {
        description: "Waiting for nodes".into(),
        requeue_after: Duration::from_secs(3600),
    });
    f.api
        .delete("ext", &DeleteParams::default())
        .await
        .expect("delete");
    f.wait_calls(Op::Delete, 1).await;
    let waiting = poll::until(
        "the progress description",
        poll::DEFAULT_TIMEOUT,
        || async {
            let e = f.get("ext").await;
            let d = e
                .status
                .as_ref()
                .and_then(|s| s.last_operation.as_ref())
                .map(|l| l.description.clone());
            if d.as_deref() == Some("Waiting for nodes") {
                Ok(e)
            } else {
                Err(d)
            }
        },
    )
    .await;
    assert_eq!(
        last_op(&waiting),
        Some((OperationType::Delete, OperationState::Processing))
    );
    // The reconciler's own status patches left the status changed: no further reconcile.
    f.stays_untouched("ext").await;
    assert_eq!(f.recorder.count(Op::Delete), 1);
    // gardenlet touches the object during deletion: status unchanged, so it reconciles.
    f.patch("ext", json!({"metadata": {"annotations": {"gardener.cloud/timestamp": jiff::Timestamp::now().to_string()}}})).await;
    f.wait_calls(Op::Delete, 2).await;
}

#[tokio::test]
async fn t4c_start_up_reconciles_exactly_the_unfinished_objects() {
    let f = Fixture::with_shoot("t4c").await;
    for (name, state) in [
        ("nil", None),
        ("processing", Some("Processing")),
        ("error", Some("Error")),
        ("succeeded", Some("Succeeded")),
    ] {
        f.create(name, &[], &[FINALIZER]).await;
        if let Some(state) = state {
            f.patch_status(
                name,
                json!({"status": {"lastOperation": {
                "type": "Reconcile", "state": state, "progress": 100, "description": "d",
                "lastUpdateTime": "2026-01-01T00:00:00Z"}}}),
            )
            .await;
        }
    }
    let _c = f.start().await;
    f.wait_calls(Op::Reconcile, 3).await;
    poll::stays("only three reconciles", QUIET, || async {
        let names = f.recorder.names();
        if names.len() == 3 && !names.contains(&"succeeded".to_string()) {
            Ok(())
        } else {
            Err(names)
        }
    })
    .await;
}

#[tokio::test]
async fn t4d_other_types_and_classes_are_never_reconciled() {
    let f = Fixture::with_shoot("t4d").await;
    let _c = f.start().await;
    for (name, type_, class) in [
        ("other-type", "other", None),
        ("seed-class", TYPE, Some("seed")),
        ("unset", TYPE, None),
    ] {
        let ext = Extension {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(f.ns.clone()),
                ..Default::default()
            },
            spec: ExtensionSpec {
                type_: type_.into(),
                class: class.map(str::to_string),
                provider_config: None,
                provider_config_error: None,
            },
            status: None,
        };
        f.api
            .create(&PostParams::default(), &ext)
            .await
            .expect("create");
    }
    f.wait_calls(Op::Reconcile, 1).await;
    poll::stays("only the unset class is reconciled", QUIET, || async {
        let names = f.recorder.names();
        if names == ["unset"] {
            Ok(())
        } else {
            Err(names)
        }
    })
    .await;
    assert!(f.get("other-type").await.status.is_none());
    assert!(f.get("seed-class").await.status.is_none());
}

#[tokio::test]
async fn t5a_finalizer_is_added_before_the_first_processing_status() {
    let f = Fixture::with_shoot("t5a").await;
    let _c = f.start().await;
    let hist = history::record(f.api.clone(), "ext").await;
    f.create("ext", &[], &[]).await;
    // A concurrent writer adds a finalizer of its own at the same time, with optimistic locking
    // as every well-behaved writer does: whichever write comes second conflicts and retries, so
    // neither finalizer is lost.
    poll::until("the foreign finalizer added", poll::DEFAULT_TIMEOUT, || async {
        let current = f.get("ext").await;
        let mut finalizers = current.finalizers().to_vec();
        finalizers.push(FOREIGN_FINALIZER.to_string());
        let body = json!({"metadata": {"finalizers": finalizers, "resourceVersion": current.resource_version()}});
        f.api
            .patch("ext", &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    f.wait_state("ext", OperationType::Create, OperationState::Succeeded)
        .await;

    let versions = hist.versions();
    let first_processing = versions
        .iter()
        .find(|v| last_op(v).is_some_and(|(_, s)| s == OperationState::Processing))
        .expect("a Processing version");
    assert!(
        first_processing
            .finalizers()
            .contains(&FINALIZER.to_string()),
        "Processing was written before the finalizer"
    );
    let with_finalizer = versions
        .iter()
        .position(|v| v.finalizers().contains(&FINALIZER.to_string()))
        .unwrap();
    assert!(
        versions[with_finalizer].status.is_none(),
        "the finalizer comes first, before any status"
    );
    let last = f.get("ext").await;
    assert!(
        last.finalizers().contains(&FINALIZER.to_string()),
        "{:?}",
        last.finalizers()
    );
    assert!(
        last.finalizers().contains(&FOREIGN_FINALIZER.to_string()),
        "the concurrent writer's finalizer was lost: {:?}",
        last.finalizers()
    );
}

#[tokio::test]
async fn t5b_deletion_without_our_finalizer_does_nothing() {
    let f = Fixture::with_shoot("t5b").await;
    f.create("ext", &[], &[FOREIGN_FINALIZER]).await;
    f.api
        .delete("ext", &DeleteParams::default())
        .await
        .expect("delete");
    let _c = f.start().await;
    f.stays_untouched("ext").await;
    assert!(f.recorder.calls().is_empty(), "{:?}", f.recorder.ops());
    assert!(f.get("ext").await.status.is_none());
}

#[tokio::test]
async fn t5c_delete_records_success_then_removes_only_our_finalizer() {
    let f = Fixture::with_shoot("t5c").await;
    let _c = f.start().await;
    reconciled(&f, "ext", &[FOREIGN_FINALIZER]).await;
    let hist = history::record(f.api.clone(), "ext").await;
    gardenlet::delete(&f.api, "ext").await;
    let done = poll::until("our finalizer removed", poll::DEFAULT_TIMEOUT, || async {
        let e = f.get("ext").await;
        if e.finalizers() == [FOREIGN_FINALIZER] {
            Ok(e)
        } else {
            Err(e.finalizers().to_vec())
        }
    })
    .await;
    assert_eq!(
        last_op(&done),
        Some((OperationType::Delete, OperationState::Succeeded))
    );
    let versions = hist.versions();
    assert!(
        versions.iter().any(|v| last_op(v)
            == Some((OperationType::Delete, OperationState::Succeeded))
            && v.finalizers().contains(&FINALIZER.to_string())),
        "Delete/Succeeded must be written while our finalizer is still there"
    );
    assert_eq!(f.recorder.count(Op::Delete), 1);
}

#[tokio::test]
async fn t6a_failed_shoots_are_skipped_after_the_annotation_is_removed() {
    let f = Fixture::with_shoot("t6a").await;
    let mut config = f.config();
    config.resync = Duration::from_secs(6);
    let c = f.start_with(config).await;
    let before = reconciled(&f, "ext", &[]).await;

    let mut failed = objects::shoot("t6a");
    failed["status"]["lastOperation"]["state"] = json!("Failed");
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &failed).await;
    shoot::wait_cached(&c.caches, &f.ns, "the failed shoot", |s| s.is_failed()).await;
    // gardenlet's request while the shoot is failed: the event filter drops it, and the resync
    // requeue of the last success (which bypasses the filter) reaches the reconciler. The
    // wrapper removes the annotation first; then the reconciler skips the failed shoot.
    let ts = jiff::Timestamp::now().to_string();
    f.patch("ext", json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile", "gardener.cloud/timestamp": ts}}})).await;
    let after = f
        .without_annotation("ext", "the annotation removed by the wrapper")
        .await;
    assert_eq!(
        f.recorder.ops(),
        [Op::Reconcile],
        "no actuator call for a failed shoot"
    );
    assert_eq!(
        after.status, before.status,
        "no status write for a failed shoot"
    );
    // No requeue either: nothing happens any more.
    f.stays_untouched("ext").await;
}

#[tokio::test]
async fn t6b_missing_cluster_is_an_error_with_backoff_and_garden_namespaces_need_none() {
    let f = Fixture::with_shoot("t6b").await;
    let mut config = f.config();
    config.resync = Duration::from_millis(300);
    let _c = f.start_with(config).await;
    reconciled(&f, "ext", &[]).await;

    let clusters: Api<Cluster> = Api::all(f.seed.clone());
    clusters
        .delete(&f.ns, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    poll::until("the Cluster gone", poll::DEFAULT_TIMEOUT, || async {
        clusters
            .get_opt(&f.ns)
            .await
            .map_err(|e| e.to_string())?
            .map_or(Ok(()), |_| Err("still there".to_string()))
    })
    .await;
    let calls = f.recorder.calls().len();
    let rv = f.get("ext").await.resource_version();
    // Resyncs keep coming but every one fails before the actuator or any status write.
    poll::stays(
        "no actuator call and no status write without a Cluster",
        QUIET,
        || async {
            let now = f.get("ext").await.resource_version();
            if f.recorder.calls().len() == calls && now == rv {
                Ok(())
            } else {
                Err((f.recorder.ops(), now))
            }
        },
    )
    .await;
    clusters
        .create(
            &PostParams::default(),
            &objects::cluster(&f.ns, objects::shoot("t6b")),
        )
        .await
        .expect("recreate Cluster");
    // The backoff retries pick it up again.
    f.wait_calls(Op::Reconcile, calls + 1).await;

    // A namespace without the shoot role: no Cluster lookup, the actuator runs without one.
    let c = support::Clusters::connect().await;
    let garden = support::unique_name("garden-t6b");
    support::create_namespace(&c.seed, &garden, &[]).await;
    let recorder = Recorder::default();
    let _g = controller::start(
        c.seed.clone(),
        recorder.actuator(),
        controller::config(TYPE, &garden),
    )
    .await;
    let api: Api<Extension> = Api::namespaced(c.seed.clone(), &garden);
    api.create(
        &PostParams::default(),
        &objects::extension(&garden, TYPE, None),
    )
    .await
    .expect("create");
    gardenlet::wait_ready(&api, TYPE, None).await;
    assert!(!recorder.calls()[0].had_cluster);
}

#[tokio::test]
async fn t6c_force_deletion_annotation_selects_force_delete() {
    for (value, expected) in [
        (Some("true"), Op::ForceDelete),
        (Some("1"), Op::ForceDelete),
        (Some("True"), Op::ForceDelete),
        (Some("false"), Op::Delete),
        (None, Op::Delete),
    ] {
        let mut shoot = objects::shoot("t6c");
        if let Some(v) = value {
            shoot["metadata"]["annotations"] =
                json!({"confirmation.gardener.cloud/force-deletion": v});
        }
        let f = Fixture::new("t6c", Some(shoot)).await;
        let _c = f.start().await;
        reconciled(&f, "ext", &[]).await;
        gardenlet::delete(&f.api, "ext").await;
        f.gone("ext").await;
        let ops = f.recorder.ops();
        assert_eq!(ops, [Op::Reconcile, expected], "force-deletion={value:?}");
    }
}

#[tokio::test]
async fn t7_status_writes_never_touch_conditions() {
    let f = Fixture::with_shoot("t7").await;
    f.create("ext", &[], &[]).await;
    let conditions = json!([{
        "type": "SystemComponentsHealthy", "status": "True", "reason": "HealthCheckSuccessful",
        "message": "All health checks successful", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "lastUpdateTime": "2026-01-01T00:00:00Z"
    }]);
    f.patch_status("ext", json!({"status": {"conditions": conditions}}))
        .await;
    let raw = |e: &Extension| serde_json::to_value(&e.status.as_ref().unwrap().conditions).unwrap();
    let _c = f.start().await;
    let hist = history::record(f.api.clone(), "ext").await;
    f.recorder.set(Behaviour::fail("boom"));
    f.wait_state("ext", OperationType::Create, OperationState::Error)
        .await;
    f.recorder.set(Behaviour::Succeed);
    let ts = gardenlet::request_reconcile(&f.api, "ext").await;
    gardenlet::wait_ready(&f.api, "ext", Some(&ts)).await;
    for v in hist.versions() {
        assert_eq!(
            raw(&v),
            conditions,
            "conditions changed in a version with lastOperation {:?}",
            last_op(&v)
        );
    }
}

#[tokio::test]
async fn t10c_a_hung_actuator_is_cancelled_at_the_deadline() {
    let f = Fixture::with_shoot("t10c").await;
    let mut config = f.config();
    config.timeout = Duration::from_secs(2);
    let _c = f.start_with(config).await;
    f.recorder.set(Behaviour::Sleep(Duration::from_secs(3600)));
    f.create("ext", &[], &[]).await;
    let ext = f
        .wait_state("ext", OperationType::Create, OperationState::Error)
        .await;
    let err = ext.status.unwrap().last_error.expect("lastError");
    assert!(err.description.contains("timed out"), "{}", err.description);
    // The worker is free again: the retry runs the actuator once more.
    f.wait_calls(Op::Reconcile, 2).await;
}

#[tokio::test]
async fn generation_mode_reconciles_spec_changes_and_cluster_changes() {
    let f = Fixture::with_shoot("gen").await;
    let mut config = f.config();
    config.trigger = TriggerMode::GenerationChanged;
    let _c = f.start_with(config).await;
    reconciled(&f, "ext", &[]).await;
    f.patch(
        "ext",
        json!({"spec": {"providerConfig": {"changed": true}}}),
    )
    .await;
    f.wait_calls(Op::Reconcile, 2).await;
    let mut shoot = objects::shoot("gen");
    shoot["spec"]["kubernetes"]["version"] = json!("1.34.0");
    shoot::patch_cluster_shoot(&f.seed, &f.ns, &shoot).await;
    f.wait_calls(Op::Reconcile, 3).await;
}
