//! What gardenlet does to an Extension: its readiness check (a port of
//! `health.CheckExtensionObject`, gardener-contract.md §1.10) and its writes (operation and
//! timestamp annotations, deletion confirmation). Every lifecycle test judges the extension
//! with this check, so a test passes only if gardenlet would accept the result.

use futures::StreamExt;
use gardener_extension_containerd_shim::gardener::api::{
    Condition, DELETION_CONFIRMATION_ANNOTATION, Extension, OPERATION_ANNOTATION, OperationState,
    OperationType, TIMESTAMP_ANNOTATION,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::poll;

/// Why gardenlet would not consider the object ready.
#[derive(Debug, PartialEq, Eq)]
pub enum NotReady {
    /// `lastError` is set: gardenlet reports it with its codes.
    LastError {
        description: String,
        codes: Vec<String>,
    },
    ObservedGenerationOutdated {
        observed: Option<i64>,
        generation: Option<i64>,
    },
    OperationAnnotation(String),
    NotSucceeded(Option<String>),
    StaleTimestamp {
        timestamp: String,
        last_update: String,
    },
}

/// `CheckExtensionObject`, in gardenlet's order.
pub fn check_extension_object(ext: &Extension) -> Result<(), NotReady> {
    let status = ext.status.clone().unwrap_or_default();
    if let Some(e) = &status.last_error {
        return Err(NotReady::LastError {
            description: e.description.clone(),
            codes: e.codes.iter().map(|c| c.as_str().to_string()).collect(),
        });
    }
    if status.observed_generation != ext.metadata.generation {
        return Err(NotReady::ObservedGenerationOutdated {
            observed: status.observed_generation,
            generation: ext.metadata.generation,
        });
    }
    if let Some(op) = ext.annotations().get(OPERATION_ANNOTATION) {
        return Err(NotReady::OperationAnnotation(op.clone()));
    }
    let Some(last) = status
        .last_operation
        .as_ref()
        .filter(|l| l.state == OperationState::Succeeded)
    else {
        return Err(NotReady::NotSucceeded(
            status
                .last_operation
                .map(|l| format!("{:?}/{:?}", l.type_, l.state)),
        ));
    };
    if let Some(ts) = ext.annotations().get(TIMESTAMP_ANNOTATION) {
        let written: jiff::Timestamp = ts.parse().map_err(|_| NotReady::StaleTimestamp {
            timestamp: ts.clone(),
            last_update: last.last_update_time.0.to_string(),
        })?;
        let truncated = jiff::Timestamp::from_second(written.as_second()).unwrap_or(written);
        if truncated > last.last_update_time.0 {
            return Err(NotReady::StaleTimestamp {
                timestamp: ts.clone(),
                last_update: last.last_update_time.0.to_string(),
            });
        }
    }
    Ok(())
}

/// gardenlet's deploy step: `operation=reconcile` and a fresh timestamp, by merge patch.
pub async fn request_reconcile(api: &Api<Extension>, name: &str) -> String {
    request_operation(api, name, "reconcile").await
}

/// Creates `ext` with the operation annotation `reconcile` and a fresh timestamp in the one
/// create, as gardenlet deploys an Extension; returns the timestamp written.
pub async fn create_for_reconcile(api: &Api<Extension>, mut ext: Extension) -> String {
    let ts = jiff::Timestamp::now().to_string();
    let annotations = ext.metadata.annotations.get_or_insert_default();
    annotations.insert(OPERATION_ANNOTATION.to_string(), "reconcile".to_string());
    annotations.insert(TIMESTAMP_ANNOTATION.to_string(), ts.clone());
    api.create(&kube::api::PostParams::default(), &ext)
        .await
        .unwrap_or_else(|e| panic!("gardenlet-like create of {:?}: {e}", ext.metadata.name));
    ts
}

/// Sets the operation annotation and a fresh timestamp; returns the timestamp written.
pub async fn request_operation(api: &Api<Extension>, name: &str, operation: &str) -> String {
    let ts = jiff::Timestamp::now().to_string();
    let body = json!({"metadata": {"annotations": {OPERATION_ANNOTATION: operation, TIMESTAMP_ANNOTATION: ts}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap_or_else(|e| panic!("gardenlet-like patch of {name}: {e}"));
    ts
}

/// Polls until gardenlet's check passes for an Extension annotated with `timestamp`, like
/// gardenlet's wait (which also requires the timestamp it wrote to be the one observed).
pub async fn wait_ready(api: &Api<Extension>, name: &str, timestamp: Option<&str>) -> Extension {
    poll::until(
        &format!("Extension {name} ready by gardenlet's check"),
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = api.get(name).await.map_err(|e| format!("{e}"))?;
            if let Some(ts) = timestamp
                && ext
                    .annotations()
                    .get(TIMESTAMP_ANNOTATION)
                    .map(String::as_str)
                    != Some(ts)
            {
                return Err(format!(
                    "timestamp annotation changed to {:?}",
                    ext.annotations().get(TIMESTAMP_ANNOTATION)
                ));
            }
            check_extension_object(&ext)
                .map(|_| ext.clone())
                .map_err(|e| format!("{e:?}"))
        },
    )
    .await
}

/// [`wait_ready`], noticing readiness the moment the status that passes the check is written
/// (a watch instead of polling), so that a test can place gardenlet's next request at a chosen
/// offset after it.
pub async fn watch_ready(api: &Api<Extension>, name: &str, timestamp: Option<&str>) -> Extension {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api.clone(), config).boxed();
    let mut last = String::from("no version seen");
    let wait = async {
        while let Some(event) = events.next().await {
            let ext = match event {
                Ok(Event::Apply(ext) | Event::InitApply(ext)) => ext,
                Ok(_) => continue,
                Err(e) => {
                    last = format!("watch error: {e}");
                    continue;
                }
            };
            let stamped = ext
                .annotations()
                .get(TIMESTAMP_ANNOTATION)
                .map(String::as_str);
            if timestamp.is_some() && stamped != timestamp {
                last = format!("timestamp annotation changed to {stamped:?}");
                continue;
            }
            match check_extension_object(&ext) {
                Ok(()) => return Some(ext),
                Err(not_ready) => last = format!("{not_ready:?}"),
            }
        }
        None
    };
    let result = tokio::time::timeout(poll::DEFAULT_TIMEOUT, wait).await;
    match result {
        Ok(Some(ext)) => ext,
        Ok(None) => panic!("the watch of Extension {name} ended; last observed: {last}"),
        Err(_) => panic!(
            "timed out after {:?} waiting for Extension {name} ready by gardenlet's check; last observed: {last}",
            poll::DEFAULT_TIMEOUT
        ),
    }
}

/// gardenlet's deletion: confirm, then DELETE.
pub async fn delete(api: &Api<Extension>, name: &str) {
    let body = json!({"metadata": {"annotations": {DELETION_CONFIRMATION_ANNOTATION: "true", TIMESTAMP_ANNOTATION: jiff::Timestamp::now().to_string()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap_or_else(|e| panic!("confirming deletion of {name}: {e}"));
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
}

/// Polls until the Extension is gone; while it is not, reports its last operation.
pub async fn wait_deleted(api: &Api<Extension>, name: &str) {
    wait_deleted_within(api, name, poll::DEFAULT_TIMEOUT).await;
}

/// [`wait_deleted`] with a deadline of its own (a deletion that uninstalls from real nodes
/// takes a containerd restart per node).
pub async fn wait_deleted_within(api: &Api<Extension>, name: &str, timeout: std::time::Duration) {
    poll::until(
        &format!("Extension {name} to be deleted"),
        timeout,
        || async {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(e) => Err(format!(
                    "{:?}",
                    e.status
                        .and_then(|s| s.last_operation)
                        .map(|l| l.description)
                )),
            }
        },
    )
    .await;
}

/// gardenlet's wait for a migration: the Extension reports Migrate/Succeeded and no finalizer
/// holds it on this seed any more.
pub async fn wait_migrated(api: &Api<Extension>, name: &str) {
    poll::until(
        "Migrate/Succeeded without finalizers",
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = api.get(name).await.map_err(|e| e.to_string())?;
            let last = ext
                .status
                .as_ref()
                .and_then(|s| s.last_operation.as_ref())
                .map(|l| (l.type_, l.state));
            if last == Some((OperationType::Migrate, OperationState::Succeeded))
                && ext.finalizers().is_empty()
            {
                Ok(())
            } else {
                Err(format!("{last:?} {:?}", ext.finalizers()))
            }
        },
    )
    .await;
}

/// Polls until the Extension's condition `type_` (what gardenlet copies into the Shoot's
/// status) satisfies `accept`; returns it. `what` names the awaited state in a timeout.
pub async fn wait_condition(
    api: &Api<Extension>,
    name: &str,
    type_: &str,
    what: &str,
    accept: impl Fn(&Condition) -> bool,
) -> Condition {
    poll::until(
        &format!("{type_} {what}"),
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = api.get(name).await.map_err(|e| e.to_string())?;
            let conditions = ext.status.map(|s| s.conditions).unwrap_or_default();
            match conditions.into_iter().find(|c| c.type_ == type_) {
                Some(c) if accept(&c) => Ok(c),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}
