//! Whether gardener-resource-manager (GRM) has caught up with a ManagedResource, and what a new
//! bundle would remove. Pure: the reads are the caller's.
//!
//! GRM deletes only what `status.resources` lists: objects dropped from the bundle, or all of
//! them when the ManagedResource is deleted. It writes that list together with
//! `status.observedGeneration` and `ResourcesApplied=True` in the status update that ends a
//! pass. A pass that has created objects and then loses that update (the next spec arrived in
//! between, so the update conflicts) never records them, and no later pass deletes them. Every
//! write that removes objects therefore waits until GRM has recorded the current generation;
//! then everything the current bundle may have created is on record.
//!
//! Garbage-collectable ConfigMaps and Secrets are the exception: GRM's garbage collector
//! deletes them once nothing refers to them, recorded or not, and GRM itself leaves them to it.

use std::collections::BTreeSet;
use std::fmt;

use jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;

use crate::gardener::api::managed_resource::conditions::RESOURCES_APPLIED;
use crate::gardener::api::{ConditionStatus, ManagedResource};

/// GRM has not recorded the current generation yet: what it was given and what it reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behind {
    pub name: String,
    pub generation: Option<i64>,
    pub observed: Option<i64>,
    /// `ResourcesApplied` as `<status>/<reason>: <message>`, if GRM wrote it.
    pub applied: Option<String>,
}

impl fmt::Display for Behind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = |n: Option<i64>| n.map_or_else(|| "none".to_string(), |n| n.to_string());
        write!(
            f,
            "gardener-resource-manager has not applied generation {} of ManagedResource {} yet (observed generation {}, ResourcesApplied {})",
            number(self.generation),
            self.name,
            number(self.observed),
            self.applied.as_deref().unwrap_or("not reported"),
        )
    }
}

/// Whether GRM has applied the current generation and recorded what it applied:
/// `status.observedGeneration == metadata.generation` and `ResourcesApplied` is `True`, which
/// GRM writes in the same update as `status.resources`.
pub fn check(mr: &ManagedResource) -> Result<(), Behind> {
    let generation = mr.metadata.generation;
    let observed = mr.status.as_ref().and_then(|s| s.observed_generation);
    let applied = mr.condition(RESOURCES_APPLIED);
    let applied_true = applied.is_some_and(|c| c.status == ConditionStatus::True);
    if generation.is_some() && observed == generation && applied_true {
        return Ok(());
    }
    Err(Behind {
        name: format!("{}/{}", mr.namespace().unwrap_or_default(), mr.name_any()),
        generation,
        observed,
        applied: applied.map(|c| format!("{:?}/{}: {}", c.status, c.reason, c.message)),
    })
}

/// When the current spec was written: the newest `managedFields` entry of the main resource
/// that owns spec fields (GRM itself writes only the status and finalizers). `None` when the
/// API server recorded nothing.
pub fn spec_written_at(mr: &ManagedResource) -> Option<Timestamp> {
    mr.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0.get("f:spec").is_some())
        })
        .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
        .max()
        .or_else(|| mr.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// An object as GRM identifies it: group, kind, namespace and name (the version does not
/// matter).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// The key of an object with `apiVersion`, `kind` and `metadata`; `None` for anything else.
    pub fn of(object: &Value) -> Option<ObjectKey> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let group = api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
            .to_string();
        let metadata = object.get("metadata")?;
        Some(ObjectKey {
            group,
            kind: object.get("kind")?.as_str()?.to_string(),
            namespace: metadata
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            name: metadata.get("name")?.as_str()?.to_string(),
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Marks a ConfigMap or Secret that GRM's garbage collector deletes once no workload or
/// ManagedResource refers to it.
pub const GARBAGE_COLLECTABLE_LABEL: &str = super::secret::GARBAGE_COLLECTABLE_LABEL;

/// GRM's rule for objects its garbage collector owns: a `v1` ConfigMap or Secret labelled
/// garbage-collectable. GRM does not delete them when they leave a bundle (its collector does,
/// once nothing refers to them), so their removal does not depend on its record.
pub fn garbage_collectable(object: &Value) -> bool {
    let labelled = object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(GARBAGE_COLLECTABLE_LABEL))
        .and_then(Value::as_str)
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    let kind = object.get("kind").and_then(Value::as_str);
    labelled
        && object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && matches!(kind, Some("ConfigMap" | "Secret"))
}

/// The keys of a bundle's objects.
pub fn keys<'a>(objects: impl IntoIterator<Item = &'a Value>) -> BTreeSet<ObjectKey> {
    objects.into_iter().filter_map(ObjectKey::of).collect()
}

/// The objects of `current` that `next` no longer holds, in key order: what GRM deletes when
/// `next` replaces `current` (garbage-collectable objects are its garbage collector's).
pub fn removed<'a>(
    current: impl IntoIterator<Item = &'a Value>,
    next: impl IntoIterator<Item = &'a Value>,
) -> Vec<ObjectKey> {
    let next = keys(next);
    let current: BTreeSet<ObjectKey> = current
        .into_iter()
        .filter(|object| !garbage_collectable(object))
        .filter_map(ObjectKey::of)
        .collect();
    current
        .into_iter()
        .filter(|key| !next.contains(key))
        .collect()
}

/// `RuntimeClass a, RuntimeClass b` for a description.
pub fn list(keys: &[ObjectKey]) -> String {
    keys.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::managed_resource::ManagedResourceStatus;
    use crate::gardener::api::{Condition, ManagedResourceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
    use serde_json::json;

    fn mr(
        generation: i64,
        observed: Option<i64>,
        applied: Option<ConditionStatus>,
    ) -> ManagedResource {
        let mut mr = ManagedResource::new("extension-x", ManagedResourceSpec::default());
        mr.metadata.namespace = Some("shoot--p--s".into());
        mr.metadata.generation = Some(generation);
        let now = Time(Timestamp::UNIX_EPOCH);
        mr.status = Some(ManagedResourceStatus {
            observed_generation: observed,
            conditions: applied
                .into_iter()
                .map(|status| Condition {
                    type_: RESOURCES_APPLIED.into(),
                    status,
                    last_transition_time: now.clone(),
                    last_update_time: now.clone(),
                    reason: "ApplyProgressing".into(),
                    message: "The resources are currently being reconciled.".into(),
                    codes: vec![],
                })
                .collect(),
            ..Default::default()
        });
        mr
    }

    #[test]
    fn caught_up_means_the_current_generation_applied() {
        use ConditionStatus::*;
        assert_eq!(check(&mr(3, Some(3), Some(True))), Ok(()));
        let behind = check(&mr(4, Some(3), Some(True))).unwrap_err();
        assert_eq!(behind.generation, Some(4));
        assert_eq!(behind.observed, Some(3));
        // Observed, but the pass that observed it did not apply everything.
        assert!(check(&mr(3, Some(3), Some(False))).is_err());
        assert!(check(&mr(3, Some(3), Some(Progressing))).is_err());
        assert!(check(&mr(3, Some(3), None)).is_err());
        assert!(check(&mr(1, None, None)).is_err());
        let mut no_generation = mr(1, Some(1), Some(True));
        no_generation.metadata.generation = None;
        no_generation.status.as_mut().unwrap().observed_generation = None;
        assert!(
            check(&no_generation).is_err(),
            "nothing observed is not caught up"
        );
    }

    #[test]
    fn behind_says_what_it_waits_for() {
        let text = check(&mr(7, Some(6), Some(ConditionStatus::Progressing)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            "gardener-resource-manager has not applied generation 7 of ManagedResource shoot--p--s/extension-x yet (observed generation 6, ResourcesApplied Progressing/ApplyProgressing: The resources are currently being reconciled.)"
        );
        let text = check(&mr(1, None, None)).unwrap_err().to_string();
        assert!(
            text.ends_with("(observed generation none, ResourcesApplied not reported)"),
            "{text}"
        );
    }

    fn entry(subresource: Option<&str>, fields: Value, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some("m".into()),
            operation: Some("Update".into()),
            subresource: subresource.map(str::to_string),
            fields_v1: Some(FieldsV1(fields)),
            time: Some(Time(Timestamp::from_second(second).unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn the_spec_was_written_by_the_newest_entry_owning_spec_fields() {
        let mut m = mr(2, Some(1), None);
        m.metadata.creation_timestamp = Some(Time(Timestamp::from_second(10).unwrap()));
        assert_eq!(spec_written_at(&m), Timestamp::from_second(10).ok());
        m.metadata.managed_fields = Some(vec![
            entry(None, json!({"f:spec": {"f:secretRefs": {}}}), 100),
            // GRM: finalizers and status, both later.
            entry(None, json!({"f:metadata": {"f:finalizers": {}}}), 300),
            entry(Some("status"), json!({"f:status": {}, "f:spec": {}}), 400),
            entry(None, json!({"f:spec": {"f:keepObjects": {}}}), 200),
        ]);
        assert_eq!(spec_written_at(&m), Timestamp::from_second(200).ok());
    }

    #[test]
    fn removed_objects_are_compared_by_group_kind_namespace_and_name() {
        let rc = |name: &str, version: &str| json!({"apiVersion": format!("node.k8s.io/{version}"), "kind": "RuntimeClass", "metadata": {"name": name}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "kube-system"}});
        let current = [rc("a", "v1"), rc("b", "v1"), cm.clone(), json!(null)];
        let next = [rc("a", "v1beta1"), cm.clone()];
        let gone = removed(&current, &next);
        assert_eq!(
            gone,
            [ObjectKey {
                group: "node.k8s.io".into(),
                kind: "RuntimeClass".into(),
                namespace: String::new(),
                name: "b".into(),
            }]
        );
        assert_eq!(list(&gone), "RuntimeClass b");
        assert!(
            removed(&next, &current).is_empty(),
            "adding removes nothing"
        );
        assert_eq!(
            ObjectKey::of(&cm).map(|k| k.to_string()).as_deref(),
            Some("ConfigMap kube-system/c")
        );
        assert_eq!(ObjectKey::of(&json!({"kind": "X"})), None);
    }

    #[test]
    fn garbage_collectable_objects_are_the_collectors_not_removals() {
        let labelled = |api_version: &str, kind: &str, value: &str| {
            json!({"apiVersion": api_version, "kind": kind,
                   "metadata": {"name": "x", "namespace": "kube-system",
                                "labels": {GARBAGE_COLLECTABLE_LABEL: value}}})
        };
        assert!(garbage_collectable(&labelled("v1", "ConfigMap", "true")));
        assert!(garbage_collectable(&labelled("v1", "Secret", "True")));
        assert!(!garbage_collectable(&labelled("v1", "ConfigMap", "false")));
        assert!(!garbage_collectable(&labelled(
            "v1",
            "ServiceAccount",
            "true"
        )));
        assert!(!garbage_collectable(&labelled(
            "apps/v1",
            "DaemonSet",
            "true"
        )));
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "y", "namespace": "kube-system"}});
        assert!(!garbage_collectable(&plain));
        let current = [labelled("v1", "ConfigMap", "true"), plain];
        let gone = removed(&current, &[]);
        assert_eq!(list(&gone), "ConfigMap kube-system/y");
    }
}
