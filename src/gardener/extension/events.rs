//! Kubernetes Events on an Extension for the outcome of each operation, so that `kubectl
//! describe` and event-based tooling show what happened without reading the status history.
//!
//! One event per outcome, never per progress step: `<Operation>Succeeded` (Normal) with the
//! success description, `<Operation>Failed` (Warning) with the error. A repeat of the same
//! outcome with the same text within [`SERIES_WINDOW`] updates the earlier event's series
//! instead of creating another object, as client-go's event recorder does; a different text is a
//! new event. A success that repeats the last outcome published for the Extension (a resync or a
//! requested reconcile of a converged Extension) publishes nothing: a steady state writes only
//! the status patches Gardener requires, and an Event marks a change (the first success, a
//! recovery, another operation). Publishing is best effort: a failure is logged and never fails
//! the reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;

use crate::gardener::api::{Extension, OperationType};

/// Repeats within this window become a series of one event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(30 * 60);
/// The API server's limit for `note`.
const NOTE_LIMIT: usize = 1024;

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome<'a> {
    Succeeded(&'a str),
    Failed(&'a str),
}

/// Publishes outcome events for one controller instance.
pub struct OutcomeEvents {
    client: Client,
    controller: String,
    instance: String,
    recent: Mutex<HashMap<SeriesKey, Recent>>,
    /// The reason last published per Extension UID (this process's memory: after a restart the
    /// first outcome of each Extension is published once).
    last_reason: Mutex<HashMap<String, String>>,
}

/// Whether an outcome with `reason` is published, given the reason last published for the
/// same Extension (pure). Failures always are (repeats count up a series); a success only when
/// it is not a repeat of the last outcome.
pub fn publishes(outcome: EventOutcome<'_>, reason: &str, last: Option<&str>) -> bool {
    match outcome {
        EventOutcome::Failed(_) => true,
        EventOutcome::Succeeded(_) => last != Some(reason),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct SeriesKey {
    uid: String,
    reason: String,
    note: String,
}

#[derive(Clone, Debug)]
struct Recent {
    name: String,
    count: i32,
    at: Instant,
}

#[derive(Debug, Serialize)]
struct SeriesPatch {
    series: EventSeries,
}

impl OutcomeEvents {
    /// `controller` is the reporting controller (a qualified name), `instance` this replica.
    pub fn new(client: Client, controller: &str, instance: &str) -> OutcomeEvents {
        OutcomeEvents {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            recent: Mutex::new(HashMap::new()),
            last_reason: Mutex::new(HashMap::new()),
        }
    }

    pub async fn record(
        &self,
        ext: &Extension,
        operation: OperationType,
        outcome: EventOutcome<'_>,
    ) {
        let event = outcome_event(
            ext,
            operation,
            outcome,
            &self.controller,
            &self.instance,
            Timestamp::now(),
        );
        let key = SeriesKey {
            uid: ext.uid().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            note: event.note.clone().unwrap_or_default(),
        };
        let last = self.last_reason(&key.uid);
        if !publishes(outcome, &key.reason, last.as_deref()) {
            return;
        }
        let deleted =
            operation == OperationType::Delete && matches!(outcome, EventOutcome::Succeeded(_));
        self.set_last_reason(&key.uid, (!deleted).then(|| key.reason.clone()));
        let namespace = ext.namespace().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let repeat = self.repeat_of(&key);
        if let Some(recent) = repeat {
            let patch = SeriesPatch {
                series: EventSeries {
                    count: recent.count + 1,
                    last_observed_time: MicroTime(Timestamp::now()),
                },
            };
            match events
                .patch(&recent.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remember(
                        key,
                        Recent {
                            count: recent.count + 1,
                            at: Instant::now(),
                            ..recent
                        },
                    );
                    return;
                }
                // The event expired (the API server keeps events for an hour): start anew.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => {
                    tracing::warn!(namespace = %namespace, error = %e, "cannot update an event of the Extension");
                    return;
                }
            }
        }
        match events.create(&PostParams::default(), &event).await {
            Ok(created) => self.remember(
                key,
                Recent {
                    name: created.name_any(),
                    count: 1,
                    at: Instant::now(),
                },
            ),
            Err(e) => {
                tracing::warn!(namespace = %namespace, error = %e, "cannot record an event on the Extension");
            }
        }
    }

    fn last_reason(&self, uid: &str) -> Option<String> {
        self.last_reason.lock().ok()?.get(uid).cloned()
    }

    /// `None` forgets the Extension (it is gone).
    fn set_last_reason(&self, uid: &str, reason: Option<String>) {
        if let Ok(mut map) = self.last_reason.lock() {
            match reason {
                Some(reason) => map.insert(uid.to_string(), reason),
                None => map.remove(uid),
            };
        }
    }

    fn repeat_of(&self, key: &SeriesKey) -> Option<Recent> {
        let recent = self.recent.lock().ok()?;
        recent
            .get(key)
            .filter(|r| r.at.elapsed() < SERIES_WINDOW)
            .cloned()
    }

    fn remember(&self, key: SeriesKey, recent: Recent) {
        if let Ok(mut map) = self.recent.lock() {
            map.retain(|_, r| r.at.elapsed() < SERIES_WINDOW);
            map.insert(key, recent);
        }
    }
}

/// The event for one outcome (pure).
pub fn outcome_event(
    ext: &Extension,
    operation: OperationType,
    outcome: EventOutcome<'_>,
    controller: &str,
    instance: &str,
    now: Timestamp,
) -> Event {
    let action = operation.as_str();
    let (type_, verb, note) = match outcome {
        EventOutcome::Succeeded(note) => ("Normal", "Succeeded", note),
        EventOutcome::Failed(note) => ("Warning", "Failed", note),
    };
    let name = ext.name_any();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: ext.namespace(),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(type_.to_string()),
        action: Some(action.to_string()),
        reason: Some(format!("{action}{verb}")),
        note: Some(truncate(note, NOTE_LIMIT)),
        regarding: Some(ObjectReference {
            api_version: Some(Extension::api_version(&()).into_owned()),
            kind: Some(Extension::kind(&()).into_owned()),
            name: Some(name),
            namespace: ext.namespace(),
            uid: ext.uid(),
            resource_version: ext.resource_version(),
            field_path: None,
        }),
        reporting_controller: Some(controller.to_string()),
        reporting_instance: Some(truncate(instance, 128)),
        ..Default::default()
    }
}

/// At most `limit` bytes, cut at a character boundary.
fn truncate(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::extension::test_extension;

    fn extension() -> Extension {
        let mut ext = test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None);
        ext.metadata.uid = Some("uid-1".into());
        ext
    }

    #[test]
    fn a_success_is_published_only_when_the_outcome_changes() {
        let ok = EventOutcome::Succeeded("Successfully reconciled Extension");
        let failed = EventOutcome::Failed("boom");
        // The first outcome, a recovery, another operation: published.
        assert!(publishes(ok, "CreateSucceeded", None));
        assert!(publishes(ok, "ReconcileSucceeded", Some("ReconcileFailed")));
        assert!(publishes(ok, "ReconcileSucceeded", Some("CreateSucceeded")));
        // A resync of a converged Extension: nothing.
        assert!(!publishes(
            ok,
            "ReconcileSucceeded",
            Some("ReconcileSucceeded")
        ));
        // Failures always (their repeats are a series).
        assert!(publishes(
            failed,
            "ReconcileFailed",
            Some("ReconcileFailed")
        ));
    }

    #[test]
    fn outcomes_become_normal_or_warning_events_regarding_the_extension() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let ok = outcome_event(
            &extension(),
            OperationType::Reconcile,
            EventOutcome::Succeeded("Successfully reconciled Extension"),
            "gardener-extension-containerd-shim",
            "pod-1",
            now,
        );
        assert_eq!(ok.type_.as_deref(), Some("Normal"));
        assert_eq!(ok.reason.as_deref(), Some("ReconcileSucceeded"));
        assert_eq!(ok.action.as_deref(), Some("Reconcile"));
        assert_eq!(ok.metadata.namespace.as_deref(), Some("shoot--p--s"));
        let regarding = ok.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("Extension"));
        assert_eq!(
            regarding.api_version.as_deref(),
            Some("extensions.gardener.cloud/v1alpha1")
        );
        assert_eq!(regarding.uid.as_deref(), Some("uid-1"));

        let long = "é".repeat(2000);
        let failed = outcome_event(
            &extension(),
            OperationType::Delete,
            EventOutcome::Failed(&long),
            "c",
            "i",
            now,
        );
        assert_eq!(failed.type_.as_deref(), Some("Warning"));
        assert_eq!(failed.reason.as_deref(), Some("DeleteFailed"));
        let note = failed.note.unwrap();
        assert!(
            note.len() <= NOTE_LIMIT && note.len() > NOTE_LIMIT - 2,
            "{}",
            note.len()
        );
    }
}
