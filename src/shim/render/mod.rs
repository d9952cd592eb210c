//! The shoot bundle: pure functions from the validated configuration and the shoot's facts to
//! the objects gardener-resource-manager applies into the shoot.
//!
//! [`Bundle`] names every object; [`Bundle::into_manifests`] destructures it without `..`, so a
//! new object type cannot be rendered and then forgotten.

pub mod admission;
pub mod daemonset;
pub mod names;
pub mod rbac;
pub mod runtime_class;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

use crate::desired_shims::DesiredShims;
use crate::gardener::api::Shoot;
use crate::gardener::imagevector::ImageVector;
use crate::gardener::managed_resource::{self, Manifest};
use crate::shim::config::admission::PolicyApi;
use crate::shim::config::desired::{self, DesiredError};
use crate::shim::config::{self, ValidatedConfig, ValidatedRollout};
use admission::AdmissionPolicies;

pub use runtime_class::RuntimeClassSpec;

/// Everything the bundle is rendered from. Its fields are private and its two constructors
/// take only validated input ([`ValidatedConfig`], [`ValidatedRollout`]): whatever scales the
/// bundle (shims, restart slots, options, ...) has passed the limits of validation.
#[derive(Clone, Debug)]
pub struct BundleInput {
    /// What the installers do: install these shims, or uninstall everything.
    desired: DesiredShims,
    /// One per shim; empty while uninstalling (no new pods may be scheduled for a shim that is
    /// going away).
    runtime_classes: Vec<RuntimeClassSpec>,
    /// The restart budget and the DaemonSets' rolling update.
    rollout: ValidatedRollout,
    installer_image: String,
    /// The worker pools whose nodes run containerd.
    containerd_pools: Vec<String>,
    /// The admission-policy API the Shoot serves; `None` only when uninstalling from a Shoot
    /// that serves none (nothing was ever installed there, see [`admission`]).
    policy_api: Option<PolicyApi>,
}

impl BundleInput {
    /// The bundle that installs the validated shims; the desired set is built here, from the
    /// same validated configuration, with catalog images resolved through `images`.
    pub fn install(
        config: &ValidatedConfig,
        images: &ImageVector,
        installer_image: &str,
        shoot: &Shoot,
    ) -> Result<BundleInput, DesiredError> {
        Ok(BundleInput {
            desired: desired::desired_shims(config, images)?,
            runtime_classes: config
                .shims()
                .iter()
                .map(|s| RuntimeClassSpec {
                    name: s.runtime_class_name.clone(),
                    handler: s.handler.clone(),
                    overhead: s.overhead.clone(),
                    tolerations: s.tolerations.clone(),
                })
                .collect(),
            rollout: config.rollout().clone(),
            installer_image: installer_image.to_string(),
            containerd_pools: containerd_pools(shoot),
            policy_api: Some(config.policy_api()),
        })
    }

    /// The bundle that makes every installer remove everything it installed: no shims, no
    /// RuntimeClasses. `rollout` keeps the pacing of the last applied configuration (see
    /// [`config::uninstall_rollout`]).
    pub fn uninstall(rollout: &ValidatedRollout, installer_image: &str, shoot: &Shoot) -> Self {
        BundleInput {
            desired: DesiredShims::uninstall(rollout.desired()),
            runtime_classes: Vec::new(),
            rollout: rollout.clone(),
            installer_image: installer_image.to_string(),
            containerd_pools: containerd_pools(shoot),
            policy_api: config::admission::policy_api(shoot).ok(),
        }
    }

    /// The desired set the installers get (before it is cut per pool).
    pub fn desired(&self) -> &DesiredShims {
        &self.desired
    }
}

/// Names of the worker pools whose nodes run containerd, sorted.
pub fn containerd_pools(shoot: &Shoot) -> Vec<String> {
    let mut pools: Vec<String> = shoot.containerd_pools().map(|p| p.name.clone()).collect();
    pools.sort();
    pools
}

/// The shoot-side objects.
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    pub service_account: ServiceAccount,
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub role: Role,
    pub role_binding: RoleBinding,
    /// Narrow the RBAC grants; see [`admission`].
    pub admission: Option<AdmissionPolicies>,
    /// The desired sets of the pools, one ConfigMap per distinct set, sorted by name.
    pub config_maps: Vec<ConfigMap>,
    /// One installer DaemonSet per containerd pool, sorted by pool.
    pub daemon_sets: Vec<DaemonSet>,
    pub runtime_classes: Vec<RuntimeClass>,
}

/// Renders the bundle. Deterministic: equal input gives equal output, so an unchanged
/// configuration writes nothing.
pub fn render(input: &BundleInput) -> Bundle {
    let mut config_maps: BTreeMap<String, ConfigMap> = BTreeMap::new();
    let mut daemon_sets = Vec::new();
    for pool in &input.containerd_pools {
        let desired = input.desired.for_pool(pool);
        let desired_json = desired.to_json();
        let config_map = daemonset::config_map(&desired_json);
        config_maps.insert(daemonset::config_map_name(&desired_json), config_map);
        daemon_sets.push(daemonset::daemon_set(&daemonset::DaemonSetInput {
            desired: &desired,
            desired_json: &desired_json,
            installer_image: &input.installer_image,
            pool,
            max_unavailable: input.rollout.max_unavailable(),
        }));
    }
    let mut runtime_classes: Vec<RuntimeClass> = input
        .runtime_classes
        .iter()
        .map(runtime_class::runtime_class)
        .collect();
    runtime_classes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let slots = input.rollout.max_concurrent_restarts();
    Bundle {
        service_account: rbac::service_account(),
        cluster_role: rbac::cluster_role(),
        cluster_role_binding: rbac::cluster_role_binding(),
        role: rbac::role(slots),
        role_binding: rbac::role_binding(),
        admission: input.policy_api.map(|api| admission::policies(api, slots)),
        config_maps: config_maps.into_values().collect(),
        daemon_sets,
        runtime_classes,
    }
}

impl Bundle {
    /// All objects as manifests for a ManagedResource, in a stable order. The scope of each
    /// object comes from its type, so a namespaced object without a namespace cannot slip
    /// through (gardener-resource-manager would put it into `default`).
    pub fn into_manifests(self) -> Result<Vec<Manifest>, managed_resource::Error> {
        let Bundle {
            service_account,
            cluster_role,
            cluster_role_binding,
            role,
            role_binding,
            admission,
            config_maps,
            daemon_sets,
            runtime_classes,
        } = self;
        let mut out = vec![
            Manifest::from_resource(&service_account)?,
            Manifest::from_resource(&cluster_role)?,
            Manifest::from_resource(&cluster_role_binding)?,
            Manifest::from_resource(&role)?,
            Manifest::from_resource(&role_binding)?,
        ];
        if let Some(admission) = &admission {
            out.extend(admission.manifests()?);
        }
        for config_map in &config_maps {
            out.push(Manifest::from_resource(config_map)?);
        }
        for daemon_set in &daemon_sets {
            out.push(Manifest::from_resource(daemon_set)?);
        }
        for rc in &runtime_classes {
            out.push(Manifest::from_resource(rc)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
