//! The containerd-shim actuator: what Reconcile, Delete, ForceDelete, Migrate and Restore mean
//! for this extension. Each operation is fetch → validate (pure) → render (pure) → apply.
//!
//! - Reconcile: validate the providerConfig, render the shoot bundle, apply it as one
//!   ManagedResource; nothing is written when nothing changed, and nothing at all when the
//!   configuration is invalid (the applied bundle stays). A bundle that removes objects is
//!   written only once gardener-resource-manager has recorded the current one.
//! - Delete: once gardener-resource-manager has recorded the current bundle, switch every
//!   installer to uninstall (no shims, no RuntimeClasses), wait until the DaemonSet reports every
//!   node clean (bounded), hand back to gardener-resource-manager whatever it lost track of, then
//!   delete the ManagedResource. A Shoot that is itself being deleted skips the uninstall: its
//!   nodes go away.
//! - ForceDelete: delete the ManagedResource without waiting for anything.
//! - Migrate: keep the shoot objects (`keepObjects`), delete the ManagedResource, never uninstall.
//! - Restore: reconcile; once gardener-resource-manager has applied the bundle, remove through
//!   it what the migrated bundle left in the shoot and the restored one no longer holds.
//!
//! Why the waits for gardener-resource-manager: it deletes only objects it has recorded, and it
//! records a pass's objects only at the pass's end; a pass overtaken by the next bundle never
//! records what it created (`gardener::managed_resource::catch_up`).

use std::sync::Arc;
use std::time::Duration;

use kube::{Api, Client, ResourceExt};

use crate::gardener::api::managed_resource::Unhealthy;
use crate::gardener::api::{Extension, ManagedResource, Shoot};
use crate::gardener::extension::{Actuator, ActuatorContext, Outcome};
use crate::gardener::imagevector::ImageVector;
use crate::gardener::managed_resource::{
    self, Manifest, PackedBundles, SecretData, catch_up, leftovers,
};
use crate::gardener::shoot_client::ShootClients;
use crate::shim::bundle_kinds;
use crate::shim::config::Catalog;
pub use crate::shim::error::ShimError;
use crate::shim::identity::{MANAGED_RESOURCE, ORIGIN};
use crate::shim::installer_rollout;
use crate::shim::plan::Plan;
use crate::shim::{runtime_class_removal, shoot_cleanup};

/// Settings of the actuator.
#[derive(Clone, Debug)]
pub struct ActuatorSettings {
    /// How long a delete waits (for gardener-resource-manager, then for the nodes to uninstall)
    /// before it removes the bundle anyway.
    pub uninstall_timeout: Duration,
    /// How long a reconcile or restore waits for gardener-resource-manager to apply the current
    /// bundle before it writes one that removes objects anyway (the deadline of one reconcile).
    pub catch_up_timeout: Duration,
    /// How often an operation that waits looks again.
    pub poll_interval: Duration,
}

impl Default for ActuatorSettings {
    fn default() -> Self {
        ActuatorSettings {
            uninstall_timeout: Duration::from_secs(10 * 60),
            catch_up_timeout: Duration::from_secs(3 * 60),
            poll_interval: Duration::from_secs(5),
        }
    }
}

/// The actuator with everything injected.
pub struct ShimActuator {
    client: Client,
    catalog: Arc<Catalog>,
    images: Arc<ImageVector>,
    settings: ActuatorSettings,
    shoot_clients: ShootClients,
    packed: PackedBundles,
}

/// How far writing the install bundle got.
enum Applied {
    /// The shoot is hibernated: nothing was written (the wake-up reconcile writes it).
    Hibernated,
    /// The bundle would remove objects gardener-resource-manager may not have recorded yet.
    Waiting(Outcome),
    /// The bundle is the current one; `written` when it was written just now.
    Current {
        manifests: Vec<Manifest>,
        written: bool,
    },
}

impl ShimActuator {
    pub fn new(
        client: Client,
        catalog: Arc<Catalog>,
        images: Arc<ImageVector>,
        settings: ActuatorSettings,
    ) -> Self {
        ShimActuator {
            client,
            catalog,
            images,
            settings,
            shoot_clients: ShootClients::default(),
            packed: PackedBundles::default(),
        }
    }

    /// Shoot clients that send `user_agent` (the manager's, naming this controller).
    pub fn with_shoot_user_agent(mut self, user_agent: &str) -> Self {
        self.shoot_clients = ShootClients::new(user_agent);
        self
    }

    fn plan(&self) -> Plan<'_> {
        Plan {
            catalog: &self.catalog,
            images: &self.images,
        }
    }

    /// The packed bundle for the Extension's configuration (pure apart from reading the
    /// injected catalog and image vector).
    pub fn install_bundle(&self, ext: &Extension, shoot: &Shoot) -> Result<SecretData, ShimError> {
        Ok(self.packed.pack(&self.plan().install(ext, shoot)?)?)
    }

    fn install_manifests(
        &self,
        ext: &Extension,
        shoot: &Shoot,
    ) -> Result<Vec<Manifest>, ShimError> {
        self.plan().install(ext, shoot)
    }

    /// The uninstall bundle. An invalid providerConfig (it may have turned invalid after the
    /// last good reconcile) does not hold the uninstall up: it runs with the safe defaults.
    fn uninstall_manifests(
        &self,
        ext: &Extension,
        shoot: &Shoot,
    ) -> Result<Vec<Manifest>, ShimError> {
        let uninstall = self.plan().uninstall(ext, shoot)?;
        if let Some(error) = &uninstall.invalid_config {
            tracing::warn!(
                namespace = %namespace_of(ext),
                error = %error,
                "the providerConfig is invalid; uninstalling with the default rollout (one containerd restart at a time, maxUnavailable 1)"
            );
        }
        Ok(uninstall.manifests)
    }

    /// Writes `data` over `current`, the ManagedResource as just read.
    async fn apply(
        &self,
        namespace: &str,
        current: Option<ManagedResource>,
        data: &SecretData,
    ) -> Result<bool, ShimError> {
        let bundle = shoot_bundle(namespace, data);
        Ok(managed_resource::update_shoot_bundle(&self.client, current, &bundle).await?)
    }

    /// Creates the bundle where the cache holds no ManagedResource; `false` when one exists.
    async fn create(&self, namespace: &str, data: &SecretData) -> Result<bool, ShimError> {
        let bundle = shoot_bundle(namespace, data);
        Ok(managed_resource::create_shoot_bundle(&self.client, &bundle).await?)
    }

    async fn managed_resource(
        &self,
        namespace: &str,
    ) -> Result<Option<ManagedResource>, ShimError> {
        Api::<ManagedResource>::namespaced(self.client.clone(), namespace)
            .get_opt(MANAGED_RESOURCE)
            .await
            .map_err(|source| ShimError::Read {
                namespace: namespace.to_string(),
                name: MANAGED_RESOURCE.to_string(),
                source,
            })
    }

    fn in_progress(&self, description: String) -> Outcome {
        Outcome::InProgress {
            description,
            requeue_after: self.settings.poll_interval,
        }
    }

    /// Deletes the ManagedResource and reports progress until gardener-resource-manager has
    /// removed it (and with it, unless `keepObjects`, every shoot object).
    async fn delete_bundle(&self, namespace: &str, what: &str) -> Result<Outcome, ShimError> {
        if self.managed_resource(namespace).await?.is_none() {
            return Ok(Outcome::Done);
        }
        managed_resource::delete(&self.client, namespace, MANAGED_RESOURCE).await?;
        Ok(self.in_progress(format!(
            "Waiting until the ManagedResource {MANAGED_RESOURCE} is deleted ({what})"
        )))
    }

    /// The delete of a hibernated shoot's Extension. The shoot has no nodes to clean (hibernation
    /// deletes its machines, and those of the wake-up start afresh), and its API server and
    /// gardener-resource-manager are scaled to zero, so the ManagedResource's finalizer stays
    /// until the wake-up. Waiting for it would hold gardenlet's reconcile of the hibernated shoot
    /// (it waits for the Extension to go); instead the bundle's deletion is requested and the
    /// Extension released: gardener-resource-manager removes the shoot's objects when it is
    /// scaled up again. An Extension enabled again before then waits for that deletion to end
    /// ([`Self::apply_install_bundle`]).
    async fn delete_while_hibernated(&self, namespace: &str) -> Result<Outcome, ShimError> {
        // Idempotent: a ManagedResource that is gone or already being deleted is left as it is.
        managed_resource::delete(&self.client, namespace, MANAGED_RESOURCE).await?;
        tracing::info!(namespace = %namespace, "shoot is hibernated; its bundle is removed from the shoot when it wakes up");
        Ok(Outcome::Done)
    }

    /// Validates and renders the install bundle and writes it, unless it would remove objects
    /// before gardener-resource-manager has recorded the current bundle.
    async fn apply_install_bundle(&self, ctx: &ActuatorContext<'_>) -> Result<Applied, ShimError> {
        let namespace = namespace_of(ctx.extension);
        let shoot = ctx.shoot().ok_or_else(|| ShimError::NoShoot {
            namespace: namespace.clone(),
        })?;
        // Validation and rendering come first: an invalid configuration must not touch the
        // bundle that is applied now.
        let manifests = self.install_manifests(ctx.extension, shoot)?;
        if shoot.hibernation_enabled() {
            // The shoot's API server and resource manager are (being) scaled down; a rollout now
            // would wait for nodes that are gone. The wake-up reconcile applies the change.
            tracing::info!(namespace = %namespace, "shoot is hibernated; leaving the installed bundle as it is");
            return Ok(Applied::Hibernated);
        }
        let data = self.packed.pack(&manifests)?;
        let current = match ctx.cached_managed_resource(&namespace, MANAGED_RESOURCE) {
            // Caught up: nothing to wait for, and an update from a stale copy fails with a
            // conflict and reads anew.
            Some(cached) if catch_up::check(&cached).is_ok() => Some(cached),
            // The wait below needs the fields the cache trims (when the spec was written).
            Some(_) => self.managed_resource(&namespace).await?,
            None => {
                if self.create(&namespace, &data).await? {
                    tracing::info!(namespace = %namespace, "shoot bundle created");
                    return Ok(Applied::Current {
                        manifests,
                        written: true,
                    });
                }
                // The cache was behind: it exists after all, and may have to be waited for.
                self.managed_resource(&namespace).await?
            }
        };
        // The bundle of an earlier Extension, deleted while the shoot was hibernated: written
        // into, it would be lost with it once gardener-resource-manager ends its deletion.
        if let Some(current) = &current
            && current.metadata.deletion_timestamp.is_some()
        {
            return Ok(Applied::Waiting(self.in_progress(format!(
                "Waiting until the ManagedResource {MANAGED_RESOURCE} of the previous installation is deleted"
            ))));
        }
        if let Some(current) = &current
            && let Some(wait) = self
                .wait_before_removing(&namespace, current, &manifests, &data)
                .await?
        {
            return Ok(Applied::Waiting(wait));
        }
        if let Some(mr) = &current
            && let Some(first) = self.removal_first_step(mr, &manifests, &data).await?
        {
            self.apply(&namespace, current, &self.packed.pack(&first)?)
                .await?;
            tracing::info!(namespace = %namespace, "shoot bundle applied with the dropped RuntimeClasses kept for one step");
            return Ok(Applied::Waiting(self.in_progress(
                "Removing shims: the installers first, the RuntimeClasses once gardener-resource-manager has applied them".to_string(),
            )));
        }
        let written = self.apply(&namespace, current, &data).await?;
        tracing::info!(namespace = %namespace, written, "shoot bundle applied");
        Ok(Applied::Current { manifests, written })
    }

    /// `Some(progress)` while writing `next` over `current` would remove objects that
    /// gardener-resource-manager may have created without recording them. Bounded by the
    /// catch-up timeout, counted from the write of `current`.
    async fn wait_before_removing(
        &self,
        namespace: &str,
        current: &ManagedResource,
        next: &[Manifest],
        next_data: &SecretData,
    ) -> Result<Option<Outcome>, ShimError> {
        let Err(behind) = catch_up::check(current) else {
            return Ok(None);
        };
        if refers_only_to(current, next_data) {
            return Ok(None);
        }
        let removing = match managed_resource::referenced_objects(&self.client, current).await? {
            Some(objects) => {
                let removed = catch_up::removed(&objects, next.iter().map(Manifest::value));
                if removed.is_empty() {
                    return Ok(None);
                }
                catch_up::list(&removed)
            }
            // A secret of the current bundle is gone: what it held is unknown.
            None => "objects of the current bundle".to_string(),
        };
        let waited = since(catch_up::spec_written_at(current));
        if waited >= self.settings.catch_up_timeout {
            tracing::warn!(
                namespace = %namespace,
                waited = ?waited,
                removing = %removing,
                behind = %behind,
                "gardener-resource-manager did not catch up in time; removing the objects anyway"
            );
            return Ok(None);
        }
        Ok(Some(self.in_progress(format!(
            "Waiting before removing {removing} from the shoot: {behind}"
        ))))
    }

    /// The first step of writing `next` over `current` (recorded by gardener-resource-manager)
    /// when `next` drops RuntimeClasses: `next` with them kept, which gardener-resource-manager
    /// applies in one pass ([`runtime_class_removal`]); `None` when `next` is to be written as it
    /// is. Reads the current bundle only when `next` differs from it.
    async fn removal_first_step(
        &self,
        current: &ManagedResource,
        next: &[Manifest],
        next_data: &SecretData,
    ) -> Result<Option<Vec<Manifest>>, ShimError> {
        if current.metadata.deletion_timestamp.is_some() || refers_only_to(current, next_data) {
            return Ok(None);
        }
        let Some(objects) = managed_resource::referenced_objects(&self.client, current).await?
        else {
            return Ok(None);
        };
        let next_objects: Vec<serde_json::Value> = next.iter().map(|m| m.value().clone()).collect();
        match runtime_class_removal::step(&objects, &next_objects) {
            runtime_class_removal::Step::Next => Ok(None),
            runtime_class_removal::Step::KeepFirst(kept) => {
                let mut first = next.to_vec();
                for object in kept {
                    first.push(Manifest::from_value(
                        object,
                        managed_resource::Scope::Cluster,
                    )?);
                }
                Ok(Some(first))
            }
        }
    }

    /// The safety net: objects in the shoot that name our ManagedResource as their origin but
    /// that `bundle` (the bundle gardener-resource-manager has recorded) does not hold are put
    /// into the bundle, so that it records them; the next write without them, or the deletion of
    /// the ManagedResource, removes them. `None` when there are none, or when the shoot cannot
    /// be looked into (no access secret).
    async fn hand_back_leftovers(
        &self,
        namespace: &str,
        current: &ManagedResource,
        bundle: &[Manifest],
    ) -> Result<Option<Outcome>, ShimError> {
        let Some(shoot) = self.shoot_clients.fresh(&self.client, namespace).await? else {
            tracing::info!(namespace = %namespace, "no shoot access secret; not looking for objects left behind in the shoot");
            return Ok(None);
        };
        let found = leftovers::find(&shoot, &bundle_kinds::tracked(), current, bundle).await?;
        if found.is_empty() {
            return Ok(None);
        }
        let names = catch_up::list(&found.iter().map(|l| l.key.clone()).collect::<Vec<_>>());
        tracing::warn!(
            namespace = %namespace,
            objects = %names,
            "objects in the shoot that gardener-resource-manager lost track of; handing them back to it"
        );
        let adopting = bundle
            .iter()
            .cloned()
            .chain(found.into_iter().map(|l| l.manifest));
        self.apply(
            namespace,
            Some(current.clone()),
            &managed_resource::pack(adopting)?,
        )
        .await?;
        Ok(Some(self.in_progress(format!(
            "Removing objects that gardener-resource-manager had lost track of: {names}"
        ))))
    }
}

impl ShimActuator {
    /// Why the shoot's installer DaemonSets have not finished their rollout, if they have not.
    /// Without shoot access nothing can be told beyond the resource manager's conditions.
    async fn installers_unsettled(
        &self,
        namespace: &str,
        bundle: &[Manifest],
    ) -> Result<Option<String>, ShimError> {
        let Some(shoot) = self.shoot_clients.fresh(&self.client, namespace).await? else {
            return Ok(None);
        };
        installer_rollout::first_unsettled(&shoot, bundle)
            .await
            .map_err(|source| ShimError::ShootRead {
                namespace: namespace.to_string(),
                source,
            })
    }

    /// The desired-set ConfigMaps of `bundle`, by name, in the shoot (those already gone are
    /// fine). Without shoot access nothing is removed.
    async fn remove_desired_sets(
        &self,
        namespace: &str,
        bundle: &[Manifest],
    ) -> Result<(), ShimError> {
        let Some(shoot) = self.shoot_clients.fresh(&self.client, namespace).await? else {
            return Ok(());
        };
        let objects: Vec<serde_json::Value> = bundle.iter().map(|m| m.value().clone()).collect();
        let mut leftovers = shoot_cleanup::leftovers(&objects, &[]);
        leftovers.leases.clear();
        shoot_cleanup::delete(&shoot, &leftovers).await?;
        Ok(())
    }

    /// Every node is clean: the desired-set ConfigMaps and the restart Leases go now, by name,
    /// rather than with gardener-resource-manager's collector (hours later) or never (the
    /// Leases are in no bundle). Without shoot access nothing is removed.
    async fn remove_installer_leftovers(
        &self,
        namespace: &str,
        current: &ManagedResource,
    ) -> Result<(), ShimError> {
        let Some(shoot) = self.shoot_clients.fresh(&self.client, namespace).await? else {
            tracing::info!(namespace = %namespace, "no shoot access secret; leaving the installers' Leases and old desired sets to the shoot");
            return Ok(());
        };
        let (bundle, remembered) = shoot_cleanup::bundles(&self.client, namespace, current).await?;
        let leftovers = shoot_cleanup::leftovers(&bundle, &remembered);
        if leftovers.is_empty() {
            return Ok(());
        }
        tracing::info!(
            namespace = %namespace,
            config_maps = ?leftovers.config_maps,
            leases = ?leftovers.leases,
            "removing the installers' restart Leases and superseded desired sets from the shoot"
        );
        shoot_cleanup::delete(&shoot, &leftovers).await?;
        Ok(())
    }
}

fn namespace_of(ext: &Extension) -> String {
    ext.namespace().unwrap_or_default()
}

/// How long ago `at` was; zero when unknown or in the future.
fn since(at: Option<jiff::Timestamp>) -> Duration {
    at.and_then(|t| jiff::Timestamp::now().duration_since(t).try_into().ok())
        .unwrap_or_default()
}

/// Our ManagedResource in `namespace`, applying `data`; the shoot objects go with it.
fn shoot_bundle<'a>(namespace: &'a str, data: &'a SecretData) -> managed_resource::ShootBundle<'a> {
    managed_resource::ShootBundle {
        namespace,
        name: MANAGED_RESOURCE,
        origin: ORIGIN,
        keep_objects: false,
        data,
    }
}

/// Where a step that waits for gardener-resource-manager to record the current bundle stands.
enum GrmWait {
    CaughtUp,
    /// Not yet: report progress and look again.
    Behind(catch_up::Behind),
    /// Not yet, and the step's wait has expired (logged here): it goes on without.
    Expired(catch_up::Behind),
}

/// `going_on`: what the step does when its wait has expired, for the log.
fn grm_wait(
    namespace: &str,
    current: &ManagedResource,
    waited: Duration,
    expired: bool,
    going_on: &str,
) -> GrmWait {
    match catch_up::check(current) {
        Ok(()) => GrmWait::CaughtUp,
        Err(behind) if expired => {
            tracing::warn!(
                namespace = %namespace,
                waited = ?waited,
                behind = %behind,
                "gardener-resource-manager did not catch up in time; {going_on}"
            );
            GrmWait::Expired(behind)
        }
        Err(behind) => GrmWait::Behind(behind),
    }
}

/// `current` already refers to exactly the bundle `next_data` packs: writing it changes nothing.
fn refers_only_to(current: &ManagedResource, next_data: &SecretData) -> bool {
    let next_secret = next_data.secret_name(MANAGED_RESOURCE);
    current
        .spec
        .secret_refs
        .iter()
        .map(|s| &s.name)
        .eq([&next_secret])
}

/// How long the Extension has been deleted.
fn deleting_for(ext: &Extension) -> Duration {
    since(ext.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

impl Actuator for ShimActuator {
    type Error = ShimError;

    async fn reconcile(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        match self.apply_install_bundle(ctx).await? {
            Applied::Waiting(wait) => Ok(wait),
            Applied::Hibernated | Applied::Current { .. } => Ok(Outcome::Done),
        }
    }

    // Stays long: the uninstall is one sequence of waits, each an early return, read in order.
    async fn delete(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        let Some(shoot) = ctx.shoot() else {
            return self
                .delete_bundle(&namespace, "no Shoot to uninstall from")
                .await;
        };
        // The shoot and everything in it goes away: nothing is left behind to wait for.
        if shoot.is_being_deleted() {
            return self
                .delete_bundle(&namespace, "the shoot is being deleted")
                .await;
        }
        if shoot.hibernation_enabled() {
            return self.delete_while_hibernated(&namespace).await;
        }
        let Some(current) = self.managed_resource(&namespace).await? else {
            // gardener-resource-manager may have applied the uninstall bundle once more after
            // the clean-up below ran (a resync), and it leaves garbage-collectable ConfigMaps
            // behind when the ManagedResource goes: the uninstall's desired sets go by name.
            let uninstall = self.uninstall_manifests(ctx.extension, shoot)?;
            self.remove_desired_sets(&namespace, &uninstall).await?;
            return Ok(Outcome::Done);
        };
        if current.metadata.deletion_timestamp.is_some() {
            return self.delete_bundle(&namespace, "uninstalled").await;
        }
        let waited = deleting_for(ctx.extension);
        let expired = waited >= self.settings.uninstall_timeout;
        // The uninstall bundle drops the RuntimeClasses, and deleting the ManagedResource drops
        // everything: gardener-resource-manager removes only what it has recorded.
        match grm_wait(
            &namespace,
            &current,
            waited,
            expired,
            "removing the bundle anyway",
        ) {
            GrmWait::CaughtUp => {}
            GrmWait::Expired(behind) => {
                return self
                    .delete_bundle(
                        &namespace,
                        &format!("uninstall timed out after {waited:?}: {behind}"),
                    )
                    .await;
            }
            GrmWait::Behind(behind) => {
                return Ok(self.in_progress(format!(
                    "Waiting before removing objects from the shoot: {behind}"
                )));
            }
        }
        let manifests = self.uninstall_manifests(ctx.extension, shoot)?;
        let data = self.packed.pack(&manifests)?;
        // The installers switch to uninstall first; the RuntimeClasses go in the next step.
        let data = match self.removal_first_step(&current, &manifests, &data).await? {
            Some(first) => self.packed.pack(&first)?,
            None => data,
        };
        let written = self.apply(&namespace, Some(current.clone()), &data).await?;
        let state = if written {
            Err(Unhealthy(
                "the uninstall configuration was just applied".to_string(),
            ))
        } else {
            current.check_rolled_out()
        };
        if let Err(progress) = state {
            if expired {
                tracing::warn!(
                    namespace = %namespace,
                    waited = ?waited,
                    progress = %progress,
                    "nodes did not report clean in time; removing the bundle anyway"
                );
                return self
                    .delete_bundle(
                        &namespace,
                        &format!("uninstall timed out after {waited:?}: {progress}"),
                    )
                    .await;
            }
            return Ok(
                self.in_progress(format!("Uninstalling the shims from the nodes: {progress}"))
            );
        }
        // The resource manager's conditions turn good while the last node's installer may still
        // be uninstalling; its DaemonSet says when every node is done.
        match self.installers_unsettled(&namespace, &manifests).await {
            Ok(None) => {}
            Ok(Some(progress)) if expired => {
                tracing::warn!(namespace = %namespace, waited = ?waited, progress = %progress, "nodes did not report clean in time; removing the bundle anyway");
                return self
                    .delete_bundle(
                        &namespace,
                        &format!("uninstall timed out after {waited:?}: {progress}"),
                    )
                    .await;
            }
            Ok(Some(progress)) => {
                return Ok(
                    self.in_progress(format!("Uninstalling the shims from the nodes: {progress}"))
                );
            }
            Err(e) if expired => {
                tracing::warn!(namespace = %namespace, waited = ?waited, error = %e, "cannot read the installers in the shoot; removing the bundle anyway");
            }
            Err(e) => return Err(e),
        }
        match self
            .hand_back_leftovers(&namespace, &current, &manifests)
            .await
        {
            Ok(Some(handing_back)) => return Ok(handing_back),
            Ok(None) => {}
            Err(e) if expired => {
                tracing::warn!(namespace = %namespace, waited = ?waited, error = %e, "cannot look for objects left behind in the shoot; removing the bundle anyway");
            }
            Err(e) => return Err(e),
        }
        self.remove_installer_leftovers(&namespace, &current)
            .await?;
        self.delete_bundle(&namespace, "every node is clean").await
    }

    async fn force_delete(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        managed_resource::delete(&self.client, &namespace, MANAGED_RESOURCE).await?;
        Ok(Outcome::Done)
    }

    async fn migrate(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        // The shoot keeps running on its nodes during a control-plane migration: the objects
        // must stay, only the seed-side ManagedResource goes.
        managed_resource::set_keep_objects(&self.client, &namespace, MANAGED_RESOURCE, true)
            .await?;
        self.delete_bundle(&namespace, "migration").await
    }

    async fn restore(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        let manifests = match self.apply_install_bundle(ctx).await? {
            Applied::Waiting(wait) => return Ok(wait),
            Applied::Hibernated => return Ok(Outcome::Done),
            Applied::Current { written: true, .. } => {
                return Ok(self.in_progress(
                    "Waiting until gardener-resource-manager has applied the restored bundle"
                        .to_string(),
                ));
            }
            Applied::Current { manifests, .. } => manifests,
        };
        // The migrated ManagedResource was deleted with keepObjects: what it had applied stayed
        // in the shoot, recorded nowhere. What the restored bundle does not hold is removed
        // through it, once gardener-resource-manager has applied it.
        let Some(current) = self.managed_resource(&namespace).await? else {
            return Ok(
                self.in_progress("Waiting until the restored ManagedResource exists".to_string())
            );
        };
        let waited = since(catch_up::spec_written_at(&current));
        let expired = waited >= self.settings.catch_up_timeout;
        let going_on = "not looking for objects the migrated bundle left behind";
        match grm_wait(&namespace, &current, waited, expired, going_on) {
            GrmWait::CaughtUp => {}
            GrmWait::Expired(_) => return Ok(Outcome::Done),
            GrmWait::Behind(behind) => {
                return Ok(self.in_progress(format!(
                    "Waiting before looking for objects the migrated bundle left behind: {behind}"
                )));
            }
        }
        match self
            .hand_back_leftovers(&namespace, &current, &manifests)
            .await
        {
            Ok(Some(handing_back)) => Ok(handing_back),
            Ok(None) => Ok(Outcome::Done),
            Err(e) if expired => {
                tracing::warn!(namespace = %namespace, waited = ?waited, error = %e, "cannot look for objects the migrated bundle left behind");
                Ok(Outcome::Done)
            }
            Err(e) => Err(e),
        }
    }
}
