//! The containerd-shim actuator: what Reconcile, Delete, ForceDelete, Migrate and Restore mean
//! for this extension. Each operation is fetch → validate (pure) → render (pure) → apply.
//!
//! - Reconcile: validate the providerConfig, render the shoot bundle, apply it as one
//!   ManagedResource; nothing is written when nothing changed, and nothing at all when the
//!   configuration is invalid (the applied bundle stays).
//! - Delete: switch every installer to uninstall (no shims, no RuntimeClasses), wait until the
//!   DaemonSet reports every node clean (bounded), then delete the ManagedResource. A Shoot that
//!   is itself being deleted skips the uninstall: its nodes go away.
//! - ForceDelete: delete the ManagedResource without waiting for anything.
//! - Migrate: keep the shoot objects (`keepObjects`), delete the ManagedResource, never uninstall.
//! - Restore: reconcile.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Api, Client, ResourceExt};

use crate::desired_shims::Rollout;
use crate::gardener::api::{ErrorCode, Extension, ManagedResource, Shoot};
use crate::gardener::error_codes::CodedError;
use crate::gardener::extension::{Actuator, ActuatorContext, Outcome};
use crate::gardener::imagevector::{ImageVector, ImageVectorError};
use crate::gardener::managed_resource;
use crate::shim::config::{self, Catalog, ConfigError, desired, images};
use crate::shim::render::{self, BundleInput};

/// Name of the ManagedResource in the shoot namespace.
pub const MANAGED_RESOURCE: &str = "extension-containerd-shim";
/// The `origin` label of our ManagedResources (never `gardener`).
pub const ORIGIN: &str = render::names::MANAGED_BY;

/// Settings of the actuator.
#[derive(Clone, Debug)]
pub struct ActuatorSettings {
    /// How long a delete waits for the nodes to uninstall before it removes the bundle anyway.
    pub uninstall_timeout: Duration,
    /// How often an operation that waits looks again.
    pub poll_interval: Duration,
}

impl Default for ActuatorSettings {
    fn default() -> Self {
        ActuatorSettings {
            uninstall_timeout: Duration::from_secs(10 * 60),
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
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The shoot owner's providerConfig is invalid; fixing it is up to them.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the Cluster of namespace {namespace} embeds no Shoot")]
    NoShoot { namespace: String },
    /// The operator's image vector or catalog does not serve what the configuration needs.
    #[error(transparent)]
    Images(#[from] desired::DesiredError),
    #[error("the image vector has no usable installer image: {0}")]
    InstallerImage(#[source] ImageVectorError),
    #[error(transparent)]
    ManagedResource(#[from] managed_resource::Error),
    #[error("cannot read ManagedResource {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl CodedError for ShimError {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ShimError::Config(e) => e.codes(),
            ShimError::ManagedResource(e) => e.codes(),
            _ => Vec::new(),
        }
    }
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
        }
    }

    fn installer_image(&self) -> Result<String, ShimError> {
        images::own_image(&self.images, images::INSTALLER_IMAGE)
            .map(|i| i.to_string())
            .map_err(ShimError::InstallerImage)
    }

    /// The packed bundle for the Extension's configuration (pure apart from reading the
    /// injected catalog and image vector). Shared with the offline renderer.
    pub fn install_bundle(
        &self,
        ext: &Extension,
        shoot: &Shoot,
    ) -> Result<managed_resource::SecretData, ShimError> {
        let validated = config::load_spec(&ext.spec, &self.catalog, shoot)?;
        let desired = desired::desired_shims(&validated, &self.images)?;
        let input = BundleInput::install(&validated, desired, &self.installer_image()?, shoot);
        pack(render::render(&input))
    }

    fn uninstall_bundle(
        &self,
        ext: &Extension,
        shoot: &Shoot,
    ) -> Result<managed_resource::SecretData, ShimError> {
        let (rollout, max_unavailable) = last_rollout(ext);
        let input =
            BundleInput::uninstall(rollout, max_unavailable, &self.installer_image()?, shoot);
        pack(render::render(&input))
    }

    async fn apply(
        &self,
        namespace: &str,
        data: &managed_resource::SecretData,
    ) -> Result<bool, ShimError> {
        Ok(managed_resource::create_or_update_for_shoot(
            &self.client,
            namespace,
            MANAGED_RESOURCE,
            ORIGIN,
            false,
            data,
        )
        .await?)
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

    /// Deletes the ManagedResource and reports progress until gardener-resource-manager has
    /// removed it (and with it, unless `keepObjects`, every shoot object).
    async fn delete_bundle(&self, namespace: &str, what: &str) -> Result<Outcome, ShimError> {
        if self.managed_resource(namespace).await?.is_none() {
            return self.bundle_gone(namespace).await;
        }
        managed_resource::delete(&self.client, namespace, MANAGED_RESOURCE).await?;
        Ok(Outcome::InProgress {
            description: format!(
                "Waiting until the ManagedResource {MANAGED_RESOURCE} is deleted ({what})"
            ),
            requeue_after: self.settings.poll_interval,
        })
    }

    /// The ManagedResource is gone: its superseded secrets (an older configuration, the
    /// install bundle the uninstall bundle replaced) go too, rather than waiting for a garbage
    /// collector.
    async fn bundle_gone(&self, namespace: &str) -> Result<Outcome, ShimError> {
        let deleted =
            managed_resource::delete_leftover_secrets(&self.client, namespace, MANAGED_RESOURCE)
                .await?;
        if deleted > 0 {
            tracing::info!(namespace = %namespace, deleted, "deleted superseded bundle secrets");
        }
        Ok(Outcome::Done)
    }

    async fn reconcile_bundle(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        let shoot = ctx.shoot().ok_or_else(|| ShimError::NoShoot {
            namespace: namespace.clone(),
        })?;
        // Validation and rendering come first: an invalid configuration must not touch the
        // bundle that is applied now.
        let data = self.install_bundle(ctx.extension, shoot)?;
        if shoot.hibernation_enabled() {
            // The shoot's API server and resource manager are (being) scaled down; a rollout now
            // would wait for nodes that are gone. The wake-up reconcile applies the change.
            tracing::info!(namespace = %namespace, "shoot is hibernated; leaving the installed bundle as it is");
            return Ok(Outcome::Done);
        }
        let written = self.apply(&namespace, &data).await?;
        tracing::info!(namespace = %namespace, written, "shoot bundle applied");
        Ok(Outcome::Done)
    }
}

fn namespace_of(ext: &Extension) -> String {
    ext.namespace().unwrap_or_default()
}

fn pack(bundle: render::Bundle) -> Result<managed_resource::SecretData, ShimError> {
    Ok(managed_resource::pack(bundle.into_manifests()?)?)
}

/// The restart budget and DaemonSet rollout of the configuration being removed, so uninstalling
/// is paced like installing. An unreadable configuration falls back to the defaults.
fn last_rollout(ext: &Extension) -> (Rollout, IntOrString) {
    let rollout = config::decode::decode(ext.spec.provider_config.as_ref())
        .ok()
        .and_then(|c| c.rollout);
    let restarts = rollout
        .as_ref()
        .and_then(|r| r.max_concurrent_restarts)
        .unwrap_or(1)
        .max(1);
    let unavailable = rollout
        .and_then(|r| r.max_unavailable)
        .unwrap_or(IntOrString::Int(1));
    (
        Rollout {
            max_concurrent_restarts: restarts,
        },
        unavailable,
    )
}

/// How long the Extension has been deleted.
fn deleting_for(ext: &Extension) -> Duration {
    ext.metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| jiff::Timestamp::now().duration_since(t.0).try_into().ok())
        .unwrap_or_default()
}

impl Actuator for ShimActuator {
    type Error = ShimError;

    async fn reconcile(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        self.reconcile_bundle(ctx).await
    }

    async fn delete(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, ShimError> {
        let namespace = namespace_of(ctx.extension);
        let Some(shoot) = ctx.shoot() else {
            return self
                .delete_bundle(&namespace, "no Shoot to uninstall from")
                .await;
        };
        if shoot.is_being_deleted() {
            return self
                .delete_bundle(&namespace, "the shoot is being deleted")
                .await;
        }
        let Some(current) = self.managed_resource(&namespace).await? else {
            return self.bundle_gone(&namespace).await;
        };
        if current.metadata.deletion_timestamp.is_some() {
            return self.delete_bundle(&namespace, "uninstalled").await;
        }
        let written = self
            .apply(&namespace, &self.uninstall_bundle(ctx.extension, shoot)?)
            .await?;
        let state = if written {
            Err(crate::gardener::api::managed_resource::Unhealthy(
                "the uninstall configuration was just applied".to_string(),
            ))
        } else {
            current.check_rolled_out()
        };
        match state {
            Ok(()) => self.delete_bundle(&namespace, "every node is clean").await,
            Err(progress) => {
                let waited = deleting_for(ctx.extension);
                if waited >= self.settings.uninstall_timeout {
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
                Ok(Outcome::InProgress {
                    description: format!("Uninstalling the shims from the nodes: {progress}"),
                    requeue_after: self.settings.poll_interval,
                })
            }
        }
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
        self.reconcile_bundle(ctx).await
    }
}
