//! Warning Events for what a node refused or failed (its installer's failures annotation, as
//! the health check reads it): one on the Extension in the seed, for gardenlet's operator, and
//! one on the Node in the shoot, for the shoot's owner, who sees neither the Extension nor the
//! seed.
//!
//! Deduplicated like the Extension's outcome Events: a failure already published (the same
//! node, shim and text) publishes nothing again while it stays; one that went away and comes
//! back is a new Event. The memory is this process's: after a restart, each standing failure
//! is published once. Publishing is best effort: a failure to publish is logged and never
//! changes the check's result.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::gardener::api::Extension;
use crate::gardener::extension::events::truncate;
use crate::shim::identity::EVENT_REPORTER;

/// The reason of both Events.
pub const REASON: &str = "ShimFailedOnNode";
/// Their action.
const ACTION: &str = "InstallShim";
/// Events of cluster-scoped objects live in this namespace (the API server accepts no other).
const CLUSTER_SCOPED_EVENTS: &str = "default";
/// The API server's limit for `note`.
const NOTE_LIMIT: usize = 1024;

/// One shim that failed on one node, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeFailure {
    pub node: String,
    pub shim: String,
    pub error: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}: {}", self.shim, self.node, self.error)
    }
}

/// Which failures were published, per Extension namespace.
#[derive(Default)]
pub struct NodeFailureEvents {
    published: Mutex<HashMap<String, BTreeSet<NodeFailure>>>,
}

impl NodeFailureEvents {
    /// The failures of `current` not published yet for `namespace`; remembers `current` as the
    /// published set, so that a failure that went away is published again when it comes back.
    pub fn unpublished(&self, namespace: &str, current: &[NodeFailure]) -> Vec<NodeFailure> {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = published.remove(namespace).unwrap_or_default();
        let now: BTreeSet<NodeFailure> = current.iter().cloned().collect();
        let new = now.difference(&before).cloned().collect();
        if !now.is_empty() {
            published.insert(namespace.to_string(), now);
        }
        new
    }

    /// Forgets `namespace` (its Extension is gone).
    pub fn forget(&self, namespace: &str) {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(namespace);
    }

    /// Publishes each failure on the Extension (`seed`) and on its Node (`shoot`).
    pub async fn publish(
        &self,
        seed: &Client,
        shoot: &Client,
        ext: &Extension,
        failures: &[NodeFailure],
    ) {
        let now = Timestamp::now();
        for failure in failures {
            let on_extension = extension_event(ext, failure, now);
            create(seed, &on_extension, "the Extension").await;
            create(shoot, &node_event(failure, now), "the Node").await;
        }
    }
}

async fn create(client: &Client, event: &Event, regarding: &str) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(e) = events.create(&PostParams::default(), event).await {
        tracing::warn!(namespace = %namespace, error = %e, "cannot record a node's failure on {regarding}");
    }
}

fn base(name: &str, namespace: &str, note: String, now: Timestamp) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".to_string()),
        action: Some(ACTION.to_string()),
        reason: Some(REASON.to_string()),
        note: Some(truncate(&note, NOTE_LIMIT)),
        reporting_controller: Some(EVENT_REPORTER.to_string()),
        reporting_instance: Some(EVENT_REPORTER.to_string()),
        ..Default::default()
    }
}

/// The Event on the Extension (pure).
pub fn extension_event(ext: &Extension, failure: &NodeFailure, now: Timestamp) -> Event {
    let name = ext.name_any();
    let namespace = ext.namespace().unwrap_or_default();
    let mut event = base(&name, &namespace, failure.to_string(), now);
    event.regarding = Some(ObjectReference {
        api_version: Some(Extension::api_version(&()).into_owned()),
        kind: Some(Extension::kind(&()).into_owned()),
        name: Some(name),
        namespace: Some(namespace),
        uid: ext.uid(),
        ..Default::default()
    });
    event
}

/// The Event on the Node (pure). Its `uid` is the node's name, as the kubelet's Events of a
/// node have it, which is where `kubectl describe node` looks.
pub fn node_event(failure: &NodeFailure, now: Timestamp) -> Event {
    let note = format!("shim {}: {}", failure.shim, failure.error);
    let mut event = base(&failure.node, CLUSTER_SCOPED_EVENTS, note, now);
    event.regarding = Some(ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Node".to_string()),
        name: Some(failure.node.clone()),
        uid: Some(failure.node.clone()),
        ..Default::default()
    });
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(node: &str, error: &str) -> NodeFailure {
        NodeFailure {
            node: node.into(),
            shim: "crun".into(),
            error: error.into(),
        }
    }

    #[test]
    fn a_standing_failure_is_published_once_and_again_when_it_comes_back() {
        let events = NodeFailureEvents::default();
        let a = failure("n1", "handler crun is someone else's");
        let b = failure("n2", "checksum mismatch");
        let a2 = failure("n1", "other text");
        let both = vec![a.clone(), b.clone()];
        assert_eq!(events.unpublished("ns", &both[..1]), vec![a.clone()]);
        assert_eq!(
            events.unpublished("ns", &both[..1]),
            Vec::<NodeFailure>::new()
        );
        assert_eq!(events.unpublished("ns", &both), vec![b.clone()]);
        // Another namespace has its own memory.
        assert_eq!(events.unpublished("other", &both[..1]), vec![a.clone()]);
        // Gone, then back: published again.
        assert_eq!(
            events.unpublished("ns", &both[1..]),
            Vec::<NodeFailure>::new()
        );
        assert_eq!(events.unpublished("ns", &both), vec![a]);
        // Another text is another failure.
        let changed = vec![a2.clone()];
        assert_eq!(events.unpublished("ns", &changed), vec![a2]);
    }

    #[test]
    fn the_node_event_is_where_kubectl_describe_node_looks() {
        let event = node_event(&failure("n1", "refused"), Timestamp::UNIX_EPOCH);
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        let regarding = event.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("Node"));
        assert_eq!(regarding.uid.as_deref(), Some("n1"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.note.as_deref(), Some("shim crun: refused"));
    }

    #[test]
    fn a_long_note_is_cut_at_the_limit() {
        let long = "é".repeat(NOTE_LIMIT);
        let event = node_event(&failure("n1", &long), Timestamp::UNIX_EPOCH);
        assert!(event.note.unwrap().len() <= NOTE_LIMIT);
    }
}
