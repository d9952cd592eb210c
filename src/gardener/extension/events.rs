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
//!
//! The reconcile only queues the event; a publisher task sends it. Nobody waits for an Event as
//! gardenlet waits for `lastOperation`, so while the lifecycle controller has a backlog the
//! publisher gives way (at most [`MAX_YIELD`] per event, see [`super::backlog`]): in a first
//! wave, an Event per Extension was one request in six, each delaying a reconcile.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use tokio::sync::mpsc;

use super::backlog::{Backlog, MAX_YIELD};
use crate::gardener::api::{Extension, OperationType};

/// Repeats within this window become a series of one event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(30 * 60);
/// The API server's limit for `note`.
const NOTE_LIMIT: usize = 1024;
/// How often a publisher that gives way to a backlog looks again.
const BACKLOG_RECHECK: Duration = Duration::from_secs(1);

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome<'a> {
    Succeeded(&'a str),
    Failed(&'a str),
}

/// Decides which outcomes are published and queues them for [`publish_queued`].
pub struct OutcomeEvents {
    controller: String,
    instance: String,
    queue: mpsc::UnboundedSender<Queued>,
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

/// An event waiting for the publisher.
struct Queued {
    event: Event,
    key: SeriesKey,
    /// When the outcome happened (the event's `eventTime` says the same for the API).
    at: Instant,
}

impl OutcomeEvents {
    /// `controller` is the reporting controller (a qualified name), `instance` this replica.
    /// Returns the recorder and its publisher, which the caller runs (it ends when the recorder
    /// is dropped). With `backlog`, the publisher gives way to it.
    pub fn new(
        client: Client,
        controller: &str,
        instance: &str,
        backlog: Option<Arc<Backlog>>,
    ) -> (OutcomeEvents, impl Future<Output = ()> + Send + 'static) {
        let (queue, queued) = mpsc::unbounded_channel();
        let events = OutcomeEvents {
            controller: controller.to_string(),
            instance: instance.to_string(),
            queue,
            last_reason: Mutex::new(HashMap::new()),
        };
        (events, publish_queued(client, queued, backlog))
    }

    /// Queues the event for an outcome, unless it is a success that repeats the last one.
    pub fn record(&self, ext: &Extension, operation: OperationType, outcome: EventOutcome<'_>) {
        let now = Timestamp::now();
        let event = outcome_event(
            ext,
            operation,
            outcome,
            &self.controller,
            &self.instance,
            now,
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
        // The publisher is gone only when the controller is stopping.
        let _ = self.queue.send(Queued {
            event,
            key,
            at: Instant::now(),
        });
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
}

/// Publishes the queued events in order until the recorder is dropped.
async fn publish_queued(
    client: Client,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    backlog: Option<Arc<Backlog>>,
) {
    let mut recent: HashMap<SeriesKey, Recent> = HashMap::new();
    while let Some(item) = queued.recv().await {
        if let Some(backlog) = &backlog {
            give_way(backlog, item.at).await;
        }
        publish(&client, &mut recent, item).await;
    }
}

/// Returns when the backlog is gone, or `since` is [`MAX_YIELD`] ago.
async fn give_way(backlog: &Backlog, since: Instant) {
    loop {
        let now = Instant::now();
        if !backlog.busy(now) || now.saturating_duration_since(since) >= MAX_YIELD {
            return;
        }
        tokio::time::sleep(BACKLOG_RECHECK).await;
    }
}

async fn publish(client: &Client, recent: &mut HashMap<SeriesKey, Recent>, item: Queued) {
    let Queued { event, key, .. } = item;
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    recent.retain(|_, r| r.at.elapsed() < SERIES_WINDOW);
    if let Some(earlier) = recent.get(&key).cloned() {
        let patch = SeriesPatch {
            series: EventSeries {
                count: earlier.count + 1,
                last_observed_time: event
                    .event_time
                    .clone()
                    .unwrap_or_else(|| MicroTime(Timestamp::now())),
            },
        };
        match events
            .patch(
                &earlier.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                recent.insert(
                    key,
                    Recent {
                        count: earlier.count + 1,
                        at: Instant::now(),
                        ..earlier
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
        Ok(created) => {
            recent.insert(
                key,
                Recent {
                    name: created.name_any(),
                    count: 1,
                    at: Instant::now(),
                },
            );
        }
        Err(e) => {
            tracing::warn!(namespace = %namespace, error = %e, "cannot record an event on the Extension");
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
pub(crate) fn truncate(s: &str, limit: usize) -> String {
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

    fn backlog_of(pending: usize) -> Backlog {
        let (store, mut writer) = kube::runtime::reflector::store::<Extension>();
        for i in 0..pending {
            let mut ext = extension();
            ext.metadata.name = Some(format!("ext-{i}"));
            ext.annotations_mut().insert(
                crate::gardener::api::OPERATION_ANNOTATION.into(),
                "reconcile".into(),
            );
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(ext));
        }
        Backlog::new(store, 1, Duration::from_secs(30))
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_gives_way_to_a_queue_of_reconciles_for_a_while() {
        let now = Instant::now();
        let no_queue = backlog_of(1);
        let quiet = tokio::time::timeout(Duration::from_secs(1), give_way(&no_queue, now));
        assert!(quiet.await.is_ok(), "no queue: published at once");
        let queue = backlog_of(2);
        let held = tokio::time::timeout(Duration::from_secs(60), give_way(&queue, now));
        assert!(held.await.is_err(), "a queue holds the event back");
        if let Some(long_ago) = now.checked_sub(MAX_YIELD) {
            let overdue = tokio::time::timeout(Duration::from_secs(1), give_way(&queue, long_ago));
            assert!(overdue.await.is_ok(), "but not longer than MAX_YIELD");
        }
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
