//! Creating, updating and deleting ManagedResources and their secrets (Gardener's
//! `managedresources.CreateForShoot`, `CreateForSeed`, `Delete`, `SetKeepObjects`); waiting
//! for them is in [`super::wait`].
//!
//! Write discipline:
//! - A secret is immutable and named after a hash of its data, so it is created once, and read
//!   only when nothing else vouches for it (`SecretCheck`). We never delete a superseded secret while the ManagedResource lives: GRM's
//!   garbage collector does that once no `reference.*` annotation names it any more (deleting
//!   it ourselves would race with GRM still applying from it). The ManagedResource remembers
//!   the latest superseded ones, which deleting it deletes by name.
//! - The ManagedResource is read (or taken from the caller's watch cache), merged in memory and
//!   written with a full update carrying the `resourceVersion` it had, and only if the merge
//!   changed something. Optimistic concurrency rather than server-side apply because
//!   (1) "nothing changed" must mean "no request at all", and a no-op apply is still a write;
//!   (2) Gardener drops *every* stale `reference.*` annotation and replaces the spec wholesale,
//!   which a field manager cannot do for fields it does not own (for example annotations left
//!   by a Go version of the extension). A conflicting write by GRM (its finalizer) makes the
//!   update fail with 409 and we merge again; GRM's status writes go to the status subresource,
//!   which an update of the main resource never touches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::Error;
use super::catch_up;
use super::desired::{DesiredManagedResource, RESERVED_ORIGIN, superseded_secrets};
use super::secret::{GARBAGE_COLLECTABLE_LABEL, SECRET_PREFIX, SecretData, decode_secret};
use crate::gardener::api::ManagedResource;

/// How often a ManagedResource update is retried after a 409 before the reconcile gives up
/// (and is retried with backoff by its caller).
const MAX_UPDATE_ATTEMPTS: usize = 5;

const SECRET: &str = "Secret";
const MANAGED_RESOURCE: &str = "ManagedResource";
/// What Gardener's `CreateForShoot` is given: a ManagedResource `name` in `namespace` for the
/// shoot's GRM, labelled `origin=<origin>`, applying `data`.
#[derive(Clone, Copy, Debug)]
pub struct ShootBundle<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub origin: &'a str,
    pub keep_objects: bool,
    pub data: &'a SecretData,
}

impl ShootBundle<'_> {
    fn desired(&self) -> Result<DesiredManagedResource, Error> {
        if self.origin.is_empty() || self.origin == RESERVED_ORIGIN {
            return Err(Error::InvalidOrigin {
                namespace: self.namespace.to_string(),
                name: self.name.to_string(),
                origin: self.origin.to_string(),
            });
        }
        Ok(DesiredManagedResource::for_shoot(
            self.origin,
            self.keep_objects,
            &self.data.secret_name(self.name),
        ))
    }

    /// Writes the bundle over `read` (`None`: read the ManagedResource first).
    async fn write(
        &self,
        client: &Client,
        read: Option<Option<ManagedResource>>,
    ) -> Result<bool, Error> {
        let desired = self.desired()?;
        create_or_update(client, self.namespace, self.name, &desired, self.data, read).await
    }
}

/// Gardener's `CreateForShoot`: the unique secret for `data`, then a ManagedResource for the
/// shoot's GRM (no class, `origin=<origin>`, the no-cleanup label injected). Returns whether
/// anything was written; in the steady state nothing is.
pub async fn create_or_update_for_shoot(
    client: &Client,
    namespace: &str,
    name: &str,
    origin: &str,
    keep_objects: bool,
    data: &SecretData,
) -> Result<bool, Error> {
    let bundle = ShootBundle {
        namespace,
        name,
        origin,
        keep_objects,
        data,
    };
    bundle.write(client, None).await
}

/// [`create_or_update_for_shoot`] for a caller that has just read the ManagedResource
/// (`current`; `None` when there is none), or taken it from a watch cache: the first attempt
/// starts from that instead of reading it again; a conflict reads it anew.
pub async fn update_shoot_bundle(
    client: &Client,
    current: Option<ManagedResource>,
    bundle: &ShootBundle<'_>,
) -> Result<bool, Error> {
    bundle.write(client, Some(current)).await
}

/// The first write of a shoot bundle: the secret, then the ManagedResource, for a caller that
/// believes neither exists (its cache holds no ManagedResource). No read is sent. Returns
/// `false` without writing the ManagedResource when one exists after all: the caller reads it
/// and goes the way of an update ([`update_shoot_bundle`]), which may have to wait for
/// gardener-resource-manager first.
pub async fn create_shoot_bundle(client: &Client, bundle: &ShootBundle<'_>) -> Result<bool, Error> {
    let desired = bundle.desired()?;
    let (namespace, name) = (bundle.namespace, bundle.name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    create_secret(&secrets, &bundle.data.to_secret(namespace, name)).await?;
    match mrs
        .create(&PostParams::default(), &desired.new_object(namespace, name))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_already_exists(&e) => Ok(false),
        Err(e) => Err(Error::api("create", MANAGED_RESOURCE, namespace, name, e)),
    }
}

/// Gardener's `CreateForSeed`: like [`create_or_update_for_shoot`] with class `seed`.
pub async fn create_or_update_for_seed(
    client: &Client,
    namespace: &str,
    name: &str,
    keep_objects: bool,
    data: &SecretData,
) -> Result<bool, Error> {
    let desired =
        DesiredManagedResource::for_seed(namespace, keep_objects, &data.secret_name(name));
    create_or_update(client, namespace, name, &desired, data, None).await
}

/// `read`: the ManagedResource as the caller has just read it, for the first attempt.
async fn create_or_update(
    client: &Client,
    namespace: &str,
    name: &str,
    desired: &DesiredManagedResource,
    data: &SecretData,
    read: Option<Option<ManagedResource>>,
) -> Result<bool, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let current_secret = data.secret_name(name);
    let first = match read {
        Some(existing) => existing,
        None => mrs
            .get_opt(name)
            .await
            .map_err(|e| Error::api("read", MANAGED_RESOURCE, namespace, name, e))?,
    };
    // The Secret object (a copy of the whole bundle) is built only when it is sent or checked.
    let mut wrote = match secret_check(first.as_ref(), &current_secret) {
        SecretCheck::Applied => false,
        SecretCheck::Read => ensure_secret(&secrets, &data.to_secret(namespace, name)).await?,
        SecretCheck::Create => create_secret(&secrets, &data.to_secret(namespace, name)).await?,
    };

    let mut read = Some(first);
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        let existing = match read.take() {
            Some(existing) => existing,
            None => mrs
                .get_opt(name)
                .await
                .map_err(|e| Error::api("read", MANAGED_RESOURCE, namespace, name, e))?,
        };
        let Some(existing) = existing else {
            match mrs
                .create(&PostParams::default(), &desired.new_object(namespace, name))
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if is_already_exists(&e) => continue,
                Err(e) => return Err(Error::api("create", MANAGED_RESOURCE, namespace, name, e)),
            }
        };
        // Secrets written by older library versions were neither immutable nor collectable;
        // Gardener labels whatever the ManagedResource references so that GRM's GC takes
        // care of them once they are superseded.
        // The current secret was read (and labelled if needed) above, or is known applied.
        for secret in existing
            .spec
            .secret_refs
            .iter()
            .filter(|s| s.name != current_secret)
        {
            wrote |= label_garbage_collectable(&secrets, namespace, &secret.name).await?;
        }
        let Some(merged) = desired.merge_into(&existing) else {
            return Ok(wrote);
        };
        match mrs.replace(name, &PostParams::default(), &merged).await {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(Error::api("update", MANAGED_RESOURCE, namespace, name, e)),
        }
    }
    Err(Error::Conflict {
        namespace: namespace.to_string(),
        name: name.to_string(),
        attempts: MAX_UPDATE_ATTEMPTS,
    })
}

/// How the bundle's secret is made sure of, from the ManagedResource as last seen. The secret
/// is immutable and named after its data, so knowing that it exists is knowing its content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SecretCheck {
    /// gardener-resource-manager has applied this generation of a ManagedResource that
    /// references this secret: it read the secret, so it exists. Nothing is sent; a
    /// secret deleted since makes GRM report the ManagedResource failed, and the next
    /// reconcile recreates it.
    Applied,
    /// Referenced, but not known to be applied: read it, create it only if it is gone.
    Read,
    /// Not referenced yet: it is nearly always new, so it is created without a read, and read
    /// only when it exists already.
    Create,
}

fn secret_check(mr: Option<&ManagedResource>, secret: &str) -> SecretCheck {
    let Some(mr) = mr else {
        return SecretCheck::Create;
    };
    let refs = &mr.spec.secret_refs;
    if !refs.iter().any(|s| s.name == secret) {
        return SecretCheck::Create;
    }
    if catch_up::check(mr).is_ok() {
        return SecretCheck::Applied;
    }
    SecretCheck::Read
}

/// Creates the secret; if it exists already, checks it like [`ensure_secret`]. Returns whether
/// anything was written.
async fn create_secret(secrets: &Api<Secret>, desired: &Secret) -> Result<bool, Error> {
    let namespace = desired.metadata.namespace.as_deref().unwrap_or_default();
    let name = desired.metadata.name.as_deref().unwrap_or_default();
    match secrets.create(&PostParams::default(), desired).await {
        Ok(_) => Ok(true),
        Err(e) if is_already_exists(&e) => ensure_secret(secrets, desired).await,
        Err(e) => Err(Error::api("create", SECRET, namespace, name, e)),
    }
}

/// Creates the secret unless it exists. An existing secret of that name is reused: the name is
/// a hash of the data, and the secret is immutable anyway.
async fn ensure_secret(secrets: &Api<Secret>, desired: &Secret) -> Result<bool, Error> {
    let namespace = desired.metadata.namespace.as_deref().unwrap_or_default();
    let name = desired.metadata.name.as_deref().unwrap_or_default();
    let check = |existing: &Secret| {
        if existing.data != desired.data {
            return Err(Error::SecretDataMismatch {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        Ok(())
    };
    let existing = secrets
        .get_opt(name)
        .await
        .map_err(|e| Error::api("read", SECRET, namespace, name, e))?;
    if let Some(existing) = existing {
        check(&existing)?;
        return label_if_needed(secrets, namespace, &existing).await;
    }
    match secrets.create(&PostParams::default(), desired).await {
        Ok(_) => Ok(true),
        Err(e) if is_already_exists(&e) => {
            // Another writer created it between our read and our create.
            let existing = secrets
                .get(name)
                .await
                .map_err(|e| Error::api("read", SECRET, namespace, name, e))?;
            check(&existing)?;
            Ok(false)
        }
        Err(e) => Err(Error::api("create", SECRET, namespace, name, e)),
    }
}

/// Adds the garbage-collectable label to a secret that lacks it; a missing secret is skipped.
async fn label_garbage_collectable(
    secrets: &Api<Secret>,
    namespace: &str,
    name: &str,
) -> Result<bool, Error> {
    match secrets
        .get_opt(name)
        .await
        .map_err(|e| Error::api("read", SECRET, namespace, name, e))?
    {
        Some(secret) => label_if_needed(secrets, namespace, &secret).await,
        None => Ok(false),
    }
}

async fn label_if_needed(
    secrets: &Api<Secret>,
    namespace: &str,
    secret: &Secret,
) -> Result<bool, Error> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(GARBAGE_COLLECTABLE_LABEL))
        .is_some_and(|v| v == "true");
    if labelled {
        return Ok(false);
    }
    let patch = MetadataPatch {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([(
                GARBAGE_COLLECTABLE_LABEL.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
    };
    match secrets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::api("label", SECRET, namespace, name, e)),
    }
}

#[derive(Debug, Serialize)]
struct MetadataPatch {
    metadata: ObjectMeta,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct KeepObjectsPatch {
    spec: KeepObjectsSpec,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct KeepObjectsSpec {
    keep_objects: bool,
}

/// Gardener's `Delete`: the referenced secrets, the superseded ones it remembers
/// ([`superseded_secrets`]; Gardener leaves those to GRM's garbage collector) and the legacy
/// `managedresource-<name>` first, so that no secret is orphaned if the ManagedResource goes and we fail right after; then the
/// ManagedResource. NotFound is not an error. GRM keeps the ManagedResource (finalizer) until
/// it has deleted the objects: see [`wait_until_deleted`].
pub async fn delete(client: &Client, namespace: &str, name: &str) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let existing = mrs
        .get_opt(name)
        .await
        .map_err(|e| Error::api("read", MANAGED_RESOURCE, namespace, name, e))?;
    let mut secret_names = vec![format!("{SECRET_PREFIX}{name}")];
    let superseded = existing
        .iter()
        .flat_map(|mr| mr.metadata.annotations.as_ref())
        .flat_map(superseded_secrets);
    let referenced = existing
        .iter()
        .flat_map(|mr| &mr.spec.secret_refs)
        .map(|s| s.name.clone());
    for secret in referenced.chain(superseded) {
        if !secret_names.contains(&secret) {
            secret_names.push(secret);
        }
    }
    for secret in &secret_names {
        match secrets.delete(secret, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::api("delete", SECRET, namespace, secret, e)),
        }
    }
    if existing.is_none() {
        return Ok(());
    }
    match mrs.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api("delete", MANAGED_RESOURCE, namespace, name, e)),
    }
}

/// The objects of the bundle `mr` references now, as gardener-resource-manager reads them;
/// `None` when one of its secrets is gone.
pub async fn referenced_objects(
    client: &Client,
    mr: &ManagedResource,
) -> Result<Option<Vec<Value>>, Error> {
    let namespace = mr.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut objects = Vec::new();
    for reference in &mr.spec.secret_refs {
        let secret = secrets
            .get_opt(&reference.name)
            .await
            .map_err(|e| Error::api("read", SECRET, &namespace, &reference.name, e))?;
        let Some(secret) = secret else {
            return Ok(None);
        };
        objects.extend(decode_secret(&secret)?);
    }
    Ok(Some(objects))
}

/// Gardener's `SetKeepObjects`: a merge patch of `spec.keepObjects`; NotFound is not an error.
/// Migration sets it before deleting the ManagedResource so that the shoot objects stay.
pub async fn set_keep_objects(
    client: &Client,
    namespace: &str,
    name: &str,
    keep_objects: bool,
) -> Result<(), Error> {
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let patch = KeepObjectsPatch {
        spec: KeepObjectsSpec { keep_objects },
    };
    match mrs
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(
            "set keepObjects on",
            MANAGED_RESOURCE,
            namespace,
            name,
            e,
        )),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_not_found())
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_already_exists())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.is_conflict() && !status.is_already_exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::ConditionStatus;
    use crate::gardener::api::managed_resource::LocalObjectReference;
    use crate::gardener::managed_resource::wait::tests::with_applied;

    fn referencing(secrets: &[&str], generation: i64, observed: i64) -> ManagedResource {
        let mut mr = with_applied(ConditionStatus::True, "ApplySucceeded", "");
        mr.spec.secret_refs = secrets
            .iter()
            .map(|name| LocalObjectReference {
                name: name.to_string(),
            })
            .collect();
        mr.metadata.generation = Some(generation);
        if let Some(status) = mr.status.as_mut() {
            status.observed_generation = Some(observed);
        }
        mr
    }

    #[test]
    fn a_secret_is_read_only_when_nothing_vouches_for_it() {
        assert_eq!(secret_check(None, "s-1"), SecretCheck::Create);
        assert_eq!(
            secret_check(Some(&referencing(&["s-0"], 2, 2)), "s-1"),
            SecretCheck::Create,
            "a new bundle's secret is new"
        );
        assert_eq!(
            secret_check(Some(&referencing(&["s-1"], 2, 2)), "s-1"),
            SecretCheck::Applied,
            "gardener-resource-manager has read it for the current generation"
        );
        assert_eq!(
            secret_check(Some(&referencing(&["s-0", "s-1"], 3, 3)), "s-1"),
            SecretCheck::Applied
        );
        assert_eq!(
            secret_check(Some(&referencing(&["s-1"], 3, 2)), "s-1"),
            SecretCheck::Read,
            "the current generation is not applied yet"
        );
        let mut failed = referencing(&["s-1"], 2, 2);
        failed.status = with_applied(ConditionStatus::False, "ApplyFailed", "secret gone").status;
        if let Some(status) = failed.status.as_mut() {
            status.observed_generation = Some(2);
        }
        assert_eq!(secret_check(Some(&failed), "s-1"), SecretCheck::Read);
    }
}
