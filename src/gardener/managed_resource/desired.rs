//! The ManagedResource an extension wants, and how it is merged into the one that exists
//! (Gardener's `builder.ManagedResource.Reconcile` mutate step). Pure: the I/O is in `apply`.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use super::secret::{REFERENCE_ANNOTATION_PREFIX, reference_annotation_key};
use crate::gardener::api::ManagedResource;
use crate::gardener::api::ManagedResourceSpec;
use crate::gardener::api::managed_resource::LocalObjectReference;

/// Label naming who created a shoot ManagedResource. gardenlet acts on `origin=gardener`, so an
/// extension must use its own value.
pub const ORIGIN_LABEL: &str = "origin";
/// The origin gardenlet reserves for itself.
pub const RESERVED_ORIGIN: &str = "gardener";
/// Injected into every shoot object so that the shoot's cleanup does not delete it.
pub const NO_CLEANUP_LABEL: &str = "shoot.gardener.cloud/no-cleanup";
/// The class of the seed's gardener-resource-manager.
pub const SEED_CLASS: &str = "seed";
/// Role label set on seed ManagedResources outside shoot namespaces.
pub const ROLE_LABEL: &str = "gardener.cloud/role";
pub const ROLE_SEED_SYSTEM_COMPONENT: &str = "seed-system-component";
/// Shoot control-plane namespaces in the seed start with this (`TechnicalIDPrefix`).
pub const SHOOT_NAMESPACE_PREFIX: &str = "shoot-";
/// Reference annotation kind for secrets.
pub const SECRET_REFERENCE_KIND: &str = "secret";
/// The data secrets a ManagedResource referenced before its current ones, comma-separated,
/// oldest first: deleting the ManagedResource deletes them by name, so the extension needs no
/// right to list Secrets.
pub const SUPERSEDED_SECRETS_ANNOTATION: &str =
    "containerd-shim.extensions.gardener.cloud/superseded-secrets";
/// How many superseded secrets are remembered. GRM's garbage collector deletes superseded
/// secrets once nothing refers to them; the memory covers the ones it has not yet, which are
/// the most recent few.
const SUPERSEDED_SECRETS_KEPT: usize = 8;

/// The labels and spec an extension wants on a ManagedResource. The spec is owned wholesale
/// (it replaces whatever is there); labels are merged into the existing ones.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredManagedResource {
    pub labels: BTreeMap<String, String>,
    pub spec: ManagedResourceSpec,
}

impl DesiredManagedResource {
    /// Gardener's `NewForShoot`: no class (the shoot's GRM), `origin=<origin>`, the no-cleanup
    /// label injected into every object.
    pub fn for_shoot(
        origin: &str,
        keep_objects: bool,
        secret_name: &str,
    ) -> DesiredManagedResource {
        DesiredManagedResource {
            labels: BTreeMap::from([(ORIGIN_LABEL.to_string(), origin.to_string())]),
            spec: ManagedResourceSpec {
                class: None,
                secret_refs: vec![LocalObjectReference {
                    name: secret_name.to_string(),
                }],
                inject_labels: Some(BTreeMap::from([(
                    NO_CLEANUP_LABEL.to_string(),
                    "true".to_string(),
                )])),
                keep_objects: Some(keep_objects),
                ..Default::default()
            },
        }
    }

    /// Gardener's `NewForSeed`: class `seed`; the seed-system-component role label unless the
    /// namespace is a shoot namespace; nothing injected.
    pub fn for_seed(
        namespace: &str,
        keep_objects: bool,
        secret_name: &str,
    ) -> DesiredManagedResource {
        let mut labels = BTreeMap::new();
        if !namespace.starts_with(SHOOT_NAMESPACE_PREFIX) {
            labels.insert(
                ROLE_LABEL.to_string(),
                ROLE_SEED_SYSTEM_COMPONENT.to_string(),
            );
        }
        DesiredManagedResource {
            labels,
            spec: ManagedResourceSpec {
                class: Some(SEED_CLASS.to_string()),
                secret_refs: vec![LocalObjectReference {
                    name: secret_name.to_string(),
                }],
                keep_objects: Some(keep_objects),
                ..Default::default()
            },
        }
    }

    /// The object to create when none exists.
    pub fn new_object(&self, namespace: &str, name: &str) -> ManagedResource {
        let mut mr = ManagedResource::new(name, self.spec.clone());
        mr.metadata = ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(self.labels.clone()).filter(|l| !l.is_empty()),
            annotations: Some(merge_reference_annotations(None, &self.spec.secret_refs))
                .filter(|a| !a.is_empty()),
            ..Default::default()
        };
        mr
    }

    /// `existing` with our labels merged in, our spec in place of its spec and its reference
    /// annotations replaced by those of our secrets; `None` when that changes nothing, so the
    /// caller writes nothing. Everything else (foreign labels and annotations, finalizers,
    /// resourceVersion) is kept.
    pub fn merge_into(&self, existing: &ManagedResource) -> Option<ManagedResource> {
        let mut merged = existing.clone();
        let mut labels = existing.metadata.labels.clone().unwrap_or_default();
        labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut annotations = merge_reference_annotations(
            existing.metadata.annotations.as_ref(),
            &self.spec.secret_refs,
        );
        remember_superseded(
            &mut annotations,
            &existing.spec.secret_refs,
            &self.spec.secret_refs,
        );
        let unchanged = labels == existing.metadata.labels.clone().unwrap_or_default()
            && annotations == existing.metadata.annotations.clone().unwrap_or_default()
            && self.spec == existing.spec;
        if unchanged {
            return None;
        }
        merged.metadata.labels = Some(labels);
        merged.metadata.annotations = Some(annotations);
        merged.spec = self.spec.clone();
        Some(merged)
    }
}

/// Adds the secrets `existing` referenced and `desired` does not to
/// [`SUPERSEDED_SECRETS_ANNOTATION`], and drops from it the ones referenced again.
fn remember_superseded(
    annotations: &mut BTreeMap<String, String>,
    existing: &[LocalObjectReference],
    desired: &[LocalObjectReference],
) {
    let in_use = |name: &str| desired.iter().any(|s| s.name == name);
    let mut names: Vec<String> = superseded_secrets(annotations)
        .into_iter()
        .filter(|name| !in_use(name))
        .collect();
    for secret in existing {
        if !in_use(&secret.name) && !names.contains(&secret.name) {
            names.push(secret.name.clone());
        }
    }
    let skip = names.len().saturating_sub(SUPERSEDED_SECRETS_KEPT);
    let names = &names[skip..];
    if names.is_empty() {
        annotations.remove(SUPERSEDED_SECRETS_ANNOTATION);
    } else {
        annotations.insert(SUPERSEDED_SECRETS_ANNOTATION.to_string(), names.join(","));
    }
}

/// The names in [`SUPERSEDED_SECRETS_ANNOTATION`].
pub fn superseded_secrets(annotations: &BTreeMap<String, String>) -> Vec<String> {
    annotations
        .get(SUPERSEDED_SECRETS_ANNOTATION)
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// Gardener's `references.InjectAnnotations` for a ManagedResource: every existing
/// `reference.resources.gardener.cloud/*` key is dropped (stale references would keep old
/// secrets alive forever), then one key per referenced secret is added. Other annotations stay.
pub fn merge_reference_annotations(
    existing: Option<&BTreeMap<String, String>>,
    secret_refs: &[LocalObjectReference],
) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = existing
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(REFERENCE_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for secret in secret_refs {
        annotations.insert(
            reference_annotation_key(SECRET_REFERENCE_KIND, &secret.name),
            secret.name.clone(),
        );
    }
    annotations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn shoot_variant() {
        let d = DesiredManagedResource::for_shoot(
            "containerd-shim",
            true,
            "managedresource-x-12345678",
        );
        assert_eq!(d.labels, map(&[("origin", "containerd-shim")]));
        assert_eq!(d.spec.class, None);
        assert_eq!(
            d.spec.inject_labels,
            Some(map(&[("shoot.gardener.cloud/no-cleanup", "true")]))
        );
        assert_eq!(d.spec.keep_objects, Some(true));
        assert_eq!(
            d.spec.secret_refs,
            vec![LocalObjectReference {
                name: "managedresource-x-12345678".into()
            }]
        );
        let mr = d.new_object("shoot--p--s", "x");
        assert_eq!(mr.metadata.namespace.as_deref(), Some("shoot--p--s"));
        assert_eq!(
            mr.metadata.annotations,
            Some(map(&[(
                &reference_annotation_key("secret", "managedresource-x-12345678"),
                "managedresource-x-12345678"
            )]))
        );
        let json = serde_json::to_value(&mr).unwrap();
        assert!(
            json["spec"].get("class").is_none(),
            "class must be absent, not null: {json}"
        );
    }

    #[test]
    fn seed_variant_labels_depend_on_the_namespace() {
        let garden = DesiredManagedResource::for_seed("garden", false, "s");
        assert_eq!(garden.spec.class.as_deref(), Some("seed"));
        assert_eq!(garden.spec.inject_labels, None);
        assert_eq!(
            garden.labels,
            map(&[("gardener.cloud/role", "seed-system-component")])
        );
        let shoot = DesiredManagedResource::for_seed("shoot--p--s", false, "s");
        assert!(shoot.labels.is_empty());
        assert_eq!(shoot.new_object("shoot--p--s", "x").metadata.labels, None);
    }

    #[test]
    fn merging_keeps_foreign_metadata_and_drops_stale_references() {
        let old = DesiredManagedResource::for_shoot("ext", false, "managedresource-x-aaaaaaaa");
        let mut existing = old.new_object("ns", "x");
        existing.metadata.resource_version = Some("42".into());
        existing.metadata.finalizers = Some(vec![
            "resources.gardener.cloud/gardener-resource-manager".into(),
        ]);
        let labels = existing.metadata.labels.get_or_insert_default();
        labels.insert("foreign".into(), "label".into());
        labels.insert("origin".into(), "someone-else".into());
        let annotations = existing.metadata.annotations.get_or_insert_default();
        annotations.insert("foreign".into(), "annotation".into());
        annotations.insert(
            "reference.resources.gardener.cloud/configmap-deadbeef".into(),
            "cm".into(),
        );

        let new = DesiredManagedResource::for_shoot("ext", false, "managedresource-x-bbbbbbbb");
        let merged = new.merge_into(&existing).expect("a new secret is a change");
        assert_eq!(merged.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(merged.metadata.finalizers, existing.metadata.finalizers);
        assert_eq!(
            merged.metadata.labels,
            Some(map(&[("foreign", "label"), ("origin", "ext")]))
        );
        assert_eq!(
            merged.metadata.annotations,
            Some(map(&[
                ("foreign", "annotation"),
                (
                    &reference_annotation_key("secret", "managedresource-x-bbbbbbbb"),
                    "managedresource-x-bbbbbbbb"
                ),
                (SUPERSEDED_SECRETS_ANNOTATION, "managedresource-x-aaaaaaaa"),
            ]))
        );
        assert_eq!(merged.spec, new.spec);
    }

    #[test]
    fn superseded_secrets_are_remembered_newest_last_and_forgotten_when_used_again() {
        let name = |i: usize| format!("managedresource-x-{i:08x}");
        let mut mr =
            DesiredManagedResource::for_shoot("ext", false, &name(0)).new_object("ns", "x");
        for i in 1..=10 {
            mr = DesiredManagedResource::for_shoot("ext", false, &name(i))
                .merge_into(&mr)
                .expect("a new secret is a change");
        }
        let remembered = superseded_secrets(mr.metadata.annotations.as_ref().unwrap());
        let expected: Vec<String> = (2..=9).map(name).collect();
        assert_eq!(
            remembered, expected,
            "the last {SUPERSEDED_SECRETS_KEPT}, oldest first"
        );

        let back = DesiredManagedResource::for_shoot("ext", false, &name(5))
            .merge_into(&mr)
            .expect("going back is a change");
        let remembered = superseded_secrets(back.metadata.annotations.as_ref().unwrap());
        assert!(!remembered.contains(&name(5)), "{remembered:?}");
        assert_eq!(remembered.last(), Some(&name(10)), "{remembered:?}");
    }

    #[test]
    fn merging_an_unchanged_object_is_no_change() {
        let d = DesiredManagedResource::for_shoot("ext", false, "s-1");
        let mut existing = d.new_object("ns", "x");
        existing
            .metadata
            .labels
            .get_or_insert_default()
            .insert("foreign".into(), "label".into());
        existing
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("foreign".into(), "a".into());
        assert!(d.merge_into(&existing).is_none());

        // Any owned field that differs is a change.
        let keep = DesiredManagedResource::for_shoot("ext", true, "s-1");
        assert!(keep.merge_into(&existing).is_some());
        let mut extra_ref = existing.clone();
        extra_ref
            .spec
            .secret_refs
            .push(LocalObjectReference { name: "s-0".into() });
        assert!(d.merge_into(&extra_ref).is_some());
        let mut class = existing.clone();
        class.spec.class = Some("seed".into());
        assert!(d.merge_into(&class).is_some());
        let mut stale = existing.clone();
        stale
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(reference_annotation_key("secret", "s-0"), "s-0".into());
        assert!(d.merge_into(&stale).is_some());
    }

    #[test]
    fn seed_object_without_labels_is_unchanged_when_equal() {
        let d = DesiredManagedResource::for_seed("shoot--a--b", false, "s");
        let existing = d.new_object("shoot--a--b", "x");
        assert!(d.merge_into(&existing).is_none());
    }
}
