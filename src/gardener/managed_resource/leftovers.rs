//! Objects in the target cluster that name a ManagedResource as their origin but that its
//! bundle does not hold: created by a pass of gardener-resource-manager (GRM) that never
//! recorded them (see [`super::catch_up`]), so neither a later pass nor the ManagedResource's
//! deletion would remove them.
//!
//! They are handed back to GRM through the bundle rather than deleted by hand: put into the
//! bundle once (GRM applies and records them), then dropped again, which makes GRM delete them
//! like any object dropped from a bundle, with its own deletion rules.

use std::collections::BTreeSet;

use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use super::Error;
use super::catch_up::{self, ObjectKey};
use super::secret::{KnownScope, Manifest, Scope};
use crate::gardener::api::ManagedResource;

/// What GRM stamps on every object it applies: `[<cluster id>:]<namespace>/<name>` of the
/// ManagedResource.
pub const ORIGIN_ANNOTATION: &str = "resources.gardener.cloud/origin";
/// GRM never deletes an object carrying this annotation with value `true`.
pub const KEEP_OBJECT_ANNOTATION: &str = "resources.gardener.cloud/keep-object";

/// Metadata the API server fills in; an object put back into a bundle must not carry it.
const SERVER_METADATA: [&str; 7] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionGracePeriodSeconds",
];

/// A kind whose objects are looked through.
#[derive(Clone, Debug)]
pub struct TrackedKind {
    pub resource: ApiResource,
    pub scope: Scope,
}

impl TrackedKind {
    /// The kind of a typed object (k8s-openapi or `kube::CustomResource`).
    pub fn of<K>() -> TrackedKind
    where
        K: kube::Resource<DynamicType = ()>,
        K::Scope: KnownScope,
    {
        TrackedKind {
            resource: ApiResource::erase::<K>(&()),
            scope: <K::Scope as KnownScope>::SCOPE,
        }
    }
}

/// One object left behind, ready to be put into the bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Leftover {
    pub key: ObjectKey,
    pub manifest: Manifest,
}

/// Whether an origin annotation names the ManagedResource `namespace/name`. The cluster ID GRM
/// may prefix is ignored: after a control-plane migration the objects carry the source seed's.
pub fn names_managed_resource(origin: &str, namespace: &str, name: &str) -> bool {
    let key = origin
        .split_once(':')
        .map_or(origin, |(_cluster_id, key)| key);
    key.split_once('/') == Some((namespace, name))
}

/// The objects of `kinds` in `target` that name `mr` as their origin and that `bundle` does not
/// hold, sorted. Only objects carrying the labels `mr` injects are listed (GRM put them on
/// everything it applied). Objects being deleted, objects GRM is told to keep and objects its
/// garbage collector owns are not leftovers. A kind the cluster does not serve has no objects.
pub async fn find(
    target: &Client,
    kinds: &[TrackedKind],
    mr: &ManagedResource,
    bundle: &[Manifest],
) -> Result<Vec<Leftover>, Error> {
    let namespace = mr.namespace().unwrap_or_default();
    let name = mr.name_any();
    let selector = mr
        .spec
        .inject_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let held = catch_up::keys(bundle.iter().map(Manifest::value));
    let mut found = Vec::new();
    for kind in kinds {
        let api: Api<DynamicObject> = Api::all_with(target.clone(), &kind.resource);
        let list = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(source) => {
                return Err(Error::ListLeftovers {
                    kind: kind.resource.kind.clone(),
                    namespace,
                    name,
                    source: Box::new(source),
                });
            }
        };
        for object in list.items {
            if let Some(leftover) = leftover(object, kind, &namespace, &name, &held)? {
                found.push(leftover);
            }
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(found)
}

/// `object` as a bundle would hold it, if it is left behind by ManagedResource
/// `namespace/name` whose bundle holds `held`.
pub fn leftover(
    object: DynamicObject,
    kind: &TrackedKind,
    namespace: &str,
    name: &str,
    held: &BTreeSet<ObjectKey>,
) -> Result<Option<Leftover>, Error> {
    let annotations = object.annotations();
    let ours = annotations
        .get(ORIGIN_ANNOTATION)
        .is_some_and(|origin| names_managed_resource(origin, namespace, name));
    let kept = annotations
        .get(KEEP_OBJECT_ANNOTATION)
        .is_some_and(|v| v == "true");
    if !ours || kept || object.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let object_name = object.name_any();
    let mut value = serde_json::to_value(&object).map_err(|source| Error::ToJson {
        kind: kind.resource.kind.clone(),
        name: object_name,
        source,
    })?;
    if let Value::Object(map) = &mut value {
        // List items of built-in kinds come without apiVersion and kind.
        map.insert(
            "apiVersion".into(),
            Value::String(kind.resource.api_version.clone()),
        );
        map.insert("kind".into(), Value::String(kind.resource.kind.clone()));
        map.remove("status");
        if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
            for field in SERVER_METADATA {
                metadata.remove(field);
            }
        }
    }
    let Some(key) = ObjectKey::of(&value) else {
        return Ok(None);
    };
    if held.contains(&key) || catch_up::garbage_collectable(&value) {
        return Ok(None);
    }
    Ok(Some(Leftover {
        key,
        manifest: Manifest::from_value(value, kind.scope)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::node::v1::RuntimeClass;
    use serde_json::json;

    #[test]
    fn origins_name_a_managed_resource_with_or_without_a_cluster_id() {
        assert!(names_managed_resource("ns/mr", "ns", "mr"));
        assert!(names_managed_resource("seed-a:ns/mr", "ns", "mr"));
        assert!(!names_managed_resource("ns/mr2", "ns", "mr"));
        assert!(!names_managed_resource("ns2/mr", "ns", "mr"));
        assert!(!names_managed_resource("ns/mr/x", "ns", "mr"));
        assert!(!names_managed_resource("mr", "ns", "mr"));
        assert!(!names_managed_resource("", "ns", "mr"));
    }

    fn live_runtime_class(name: &str, annotations: Value) -> DynamicObject {
        // As a list returns it: no apiVersion or kind, with server-filled metadata.
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "uid": "u-1",
                "resourceVersion": "42",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "gardener-resource-manager"}],
                "labels": {"shoot.gardener.cloud/no-cleanup": "true"},
                "annotations": annotations,
            },
            "handler": name,
        }))
        .unwrap()
    }

    #[test]
    fn a_leftover_comes_back_as_a_bundle_object() {
        let kind = TrackedKind::of::<RuntimeClass>();
        let held = BTreeSet::new();
        let object = live_runtime_class(
            "wasmtime",
            json!({ORIGIN_ANNOTATION: "seed:ns/mr", "other": "kept"}),
        );
        let found = leftover(object, &kind, "ns", "mr", &held)
            .unwrap()
            .expect("a leftover");
        assert_eq!(found.key.to_string(), "RuntimeClass wasmtime");
        assert_eq!(
            found.manifest.value(),
            &json!({
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {
                    "name": "wasmtime",
                    "labels": {"shoot.gardener.cloud/no-cleanup": "true"},
                    "annotations": {ORIGIN_ANNOTATION: "seed:ns/mr", "other": "kept"},
                },
                "handler": "wasmtime",
            })
        );
    }

    #[test]
    fn only_objects_of_this_managed_resource_that_its_bundle_lacks_are_leftovers() {
        let kind = TrackedKind::of::<RuntimeClass>();
        let none = BTreeSet::new();
        let other = live_runtime_class("a", json!({ORIGIN_ANNOTATION: "ns/other"}));
        assert_eq!(leftover(other, &kind, "ns", "mr", &none).unwrap(), None);
        let unannotated = live_runtime_class("a", json!({}));
        assert_eq!(
            leftover(unannotated, &kind, "ns", "mr", &none).unwrap(),
            None
        );
        let kept = live_runtime_class(
            "a",
            json!({ORIGIN_ANNOTATION: "ns/mr", KEEP_OBJECT_ANNOTATION: "true"}),
        );
        assert_eq!(leftover(kept, &kind, "ns", "mr", &none).unwrap(), None);
        let mut deleting = live_runtime_class("a", json!({ORIGIN_ANNOTATION: "ns/mr"}));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(leftover(deleting, &kind, "ns", "mr", &none).unwrap(), None);
        let held = catch_up::keys(&[
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "a"}}),
        ]);
        let in_bundle = live_runtime_class("a", json!({ORIGIN_ANNOTATION: "ns/mr"}));
        assert_eq!(leftover(in_bundle, &kind, "ns", "mr", &held).unwrap(), None);
    }

    #[test]
    fn garbage_collectable_objects_are_left_to_the_garbage_collector() {
        let kind = TrackedKind::of::<ConfigMap>();
        let object: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "installer-0123456789", "namespace": "kube-system",
                         "labels": {catch_up::GARBAGE_COLLECTABLE_LABEL: "true"},
                         "annotations": {ORIGIN_ANNOTATION: "ns/mr"}},
        }))
        .unwrap();
        assert_eq!(
            leftover(object, &kind, "ns", "mr", &BTreeSet::new()).unwrap(),
            None
        );
    }

    #[test]
    fn a_namespaced_leftover_keeps_its_namespace() {
        let kind = TrackedKind::of::<ConfigMap>();
        assert_eq!(kind.scope, Scope::Namespaced);
        let object: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "kube-system",
                         "annotations": {ORIGIN_ANNOTATION: "ns/mr"}},
            "data": {"k": "v"},
        }))
        .unwrap();
        let found = leftover(object, &kind, "ns", "mr", &BTreeSet::new())
            .unwrap()
            .expect("a leftover");
        assert_eq!(found.key.to_string(), "ConfigMap kube-system/c");
        assert_eq!(found.manifest.value()["data"], json!({"k": "v"}));
    }
}
