//! The pure steps of every operation that reads an Extension's providerConfig: what reconcile
//! and restore ([`Plan::install`]), delete ([`Plan::uninstall`]), the health check
//! ([`Plan::health`]) and the offline renderer compute from the Extension, its Shoot, the
//! catalog and the image vector before anything is applied. ForceDelete and Migrate read no
//! providerConfig.
//!
//! Each goes through the one validated view of the configuration ([`config::load_spec`]), so
//! what one Extension costs here is bounded by the limits of validation (docs/usage.md,
//! "Limits"), whatever it holds.

use crate::desired_shims::DesiredShims;
use crate::gardener::api::{Extension, Shoot};
use crate::gardener::imagevector::ImageVector;
use crate::gardener::managed_resource::Manifest;
use crate::shim::config::{self, Catalog, ConfigError, desired, images};
use crate::shim::error::ShimError;
use crate::shim::render::{self, BundleInput};

/// The catalog and image vector the steps read.
#[derive(Clone, Copy)]
pub struct Plan<'a> {
    pub catalog: &'a Catalog,
    pub images: &'a ImageVector,
}

/// The uninstall bundle, and why the providerConfig's own rollout settings were not used.
#[derive(Debug)]
pub struct Uninstall {
    pub manifests: Vec<Manifest>,
    /// The providerConfig is invalid: the bundle is paced with
    /// [`config::ValidatedRollout::SAFE_DEFAULT`].
    pub invalid_config: Option<ConfigError>,
}

impl Plan<'_> {
    fn installer_image(&self) -> Result<String, ShimError> {
        images::own_image(self.images, images::INSTALLER_IMAGE)
            .map(|i| i.to_string())
            .map_err(ShimError::InstallerImage)
    }

    /// Reconcile and restore: the install bundle of a valid configuration, or the
    /// configuration error (`ERR_CONFIGURATION_PROBLEM`) that leaves the applied one alone.
    pub fn install(&self, ext: &Extension, shoot: &Shoot) -> Result<Vec<Manifest>, ShimError> {
        let validated = config::load_spec(&ext.spec, self.catalog, shoot)?;
        let input = BundleInput::install(&validated, self.images, &self.installer_image()?, shoot)?;
        Ok(render::render(&input).into_manifests()?)
    }

    /// Delete: the bundle that switches every installer to uninstall. An invalid
    /// configuration does not stop it: the uninstall goes ahead with the safe defaults.
    pub fn uninstall(&self, ext: &Extension, shoot: &Shoot) -> Result<Uninstall, ShimError> {
        let (rollout, invalid_config) = config::uninstall_rollout(&ext.spec, self.catalog, shoot);
        let input = BundleInput::uninstall(&rollout, &self.installer_image()?, shoot);
        Ok(Uninstall {
            manifests: render::render(&input).into_manifests()?,
            invalid_config,
        })
    }

    /// The health check: the desired set whose nodes it counts; `None` for an invalid
    /// configuration (the lifecycle reports that, with its code) or images that do not resolve.
    pub fn health(&self, ext: &Extension, shoot: &Shoot) -> Option<DesiredShims> {
        let validated = config::load_spec(&ext.spec, self.catalog, shoot).ok()?;
        desired::desired_shims(&validated, self.images).ok()
    }
}
