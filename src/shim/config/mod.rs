//! The shoot owner's providerConfig and everything needed to turn it into the node
//! installer's desired set.
//!
//! The pipeline, each step pure:
//!
//! 1. [`decode::decode`]: `Extension.spec.providerConfig` (JSON) to [`types::ContainerdShimConfig`],
//!    strictly and within size bounds;
//! 2. [`validate::validate`]: with the [`catalog::Catalog`] and the Shoot's worker pools to a
//!    [`validate::ValidatedConfig`], reporting every problem at once;
//! 3. [`desired::desired_shims`]: with the image vector to the installer's
//!    [`crate::desired_shims::DesiredShims`].
//!
//! Errors of steps 1 and 2 are [`error::ConfigError`]s with `ERR_CONFIGURATION_PROBLEM`; the
//! actuator reports them and leaves the previously applied bundle alone.
//!
//! Every path that reads a providerConfig (reconcile, restore, delete, the health check, the
//! offline renderer) goes through [`load_spec`] or [`uninstall_rollout`]: a
//! [`ValidatedConfig`] cannot be had any other way, and rendering takes nothing else. A path
//! that meets an invalid configuration either reports it (reconcile, restore, render) or uses
//! [`ValidatedRollout::SAFE_DEFAULT`] (delete) or reports nothing (health); none of them reads
//! a raw value.

pub mod admission;
pub mod catalog;
pub mod custom_policy;
mod custom_shim;
pub mod decode;
pub mod desired;
pub mod error;
pub mod images;
pub mod pools;
pub mod scheduling;
pub mod schema;
pub mod syntax;
pub mod types;
pub mod validate;
pub mod validated;

#[cfg(test)]
mod bad_configs_test;
#[cfg(test)]
mod examples_test;
#[cfg(test)]
mod properties_test;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod valid_configs_test;

pub use catalog::Catalog;
pub use error::ConfigError;
pub use types::{API_VERSION, ContainerdShimConfig, KIND};
pub use validate::{ValidatedConfig, ValidatedRollout};

use crate::gardener::api::cluster::Shoot;
use crate::gardener::api::extension::ExtensionSpec;

/// Decodes and validates a providerConfig in one step: what the actuator calls before
/// rendering anything.
pub fn load(
    provider_config: Option<&serde_json::Value>,
    catalog: &Catalog,
    shoot: &Shoot,
) -> Result<ValidatedConfig, ConfigError> {
    let config = decode::decode(provider_config)?;
    validate::validate(&config, catalog, shoot)
}

/// [`load`] for an Extension's spec. A providerConfig the client could not even turn into a
/// value (nested deeper than the JSON decoder allows) is the shoot owner's to fix, like any
/// other invalid configuration.
pub fn load_spec(
    spec: &ExtensionSpec,
    catalog: &Catalog,
    shoot: &Shoot,
) -> Result<ValidatedConfig, ConfigError> {
    if let Some(error) = &spec.provider_config_error {
        return Err(decode::undecodable(error));
    }
    load(spec.provider_config.as_ref(), catalog, shoot)
}

/// The rollout settings an uninstall is paced with: those of the Extension's providerConfig
/// when it validates, else [`ValidatedRollout::SAFE_DEFAULT`] together with why it does not (it
/// may have turned invalid after the last good reconcile, or the catalog or the Shoot changed
/// since). Never a raw value: a hostile `maxConcurrentRestarts` cannot size the uninstall
/// bundle.
pub fn uninstall_rollout(
    spec: &ExtensionSpec,
    catalog: &Catalog,
    shoot: &Shoot,
) -> (ValidatedRollout, Option<ConfigError>) {
    match load_spec(spec, catalog, shoot) {
        Ok(validated) => (validated.rollout().clone(), None),
        Err(error) => (ValidatedRollout::SAFE_DEFAULT, Some(error)),
    }
}
