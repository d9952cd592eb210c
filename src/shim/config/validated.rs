//! What validation produces: a providerConfig with every shim resolved and every default
//! applied, ready for the desired set.
//!
//! [`ValidatedConfig`] and [`ValidatedRollout`] have no public constructor and no public
//! fields: outside this module tree the only ways to get one are [`super::load_spec`] (which
//! validates, and so enforces every limit of docs/usage.md) and
//! [`ValidatedRollout::SAFE_DEFAULT`]. Rendering takes nothing else, so no path can turn a
//! raw providerConfig value into objects, Lease names or allocations.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::admission::PolicyApi;
use super::types::DeliveryMode;
use crate::desired_shims::{self, Arch, ConfigFile, OptionValue, UrlArtifact};

/// A providerConfig that passed validation, with defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedConfig {
    /// The shims, sorted by name.
    pub(super) shims: Vec<ValidatedShim>,
    pub(super) rollout: ValidatedRollout,
    /// The Shoot's Kubernetes version: the image vector's target version.
    pub(super) kubernetes_version: Option<String>,
    /// The admission-policy API that confines the installer on this Shoot.
    pub(super) policy_api: PolicyApi,
    /// The providerConfig's `delivery`, or the operator's default.
    pub(super) delivery: DeliveryMode,
}

/// Rollout settings with defaults applied, within the limits of validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedRollout {
    /// 1 to [`super::validate::MAX_CONCURRENT_RESTARTS`].
    pub(super) max_concurrent_restarts: u32,
    /// The installer DaemonSet's `rollingUpdate.maxUnavailable`: at least 1, or 1% to 100%.
    pub(super) max_unavailable: IntOrString,
}

impl ValidatedRollout {
    /// What a path that meets an invalid providerConfig uses instead of its values (docs/usage.md,
    /// "Limits"): one containerd restart at a time, one unavailable installer pod per pool.
    pub const SAFE_DEFAULT: ValidatedRollout = ValidatedRollout {
        max_concurrent_restarts: 1,
        max_unavailable: IntOrString::Int(1),
    };

    /// How many nodes may restart containerd at the same time: the restart budget's Lease slots.
    pub fn max_concurrent_restarts(&self) -> u32 {
        self.max_concurrent_restarts
    }

    /// The installer DaemonSet's `rollingUpdate.maxUnavailable`.
    pub fn max_unavailable(&self) -> &IntOrString {
        &self.max_unavailable
    }

    /// The desired-set rollout.
    pub fn desired(&self) -> desired_shims::Rollout {
        desired_shims::Rollout {
            max_concurrent_restarts: self.max_concurrent_restarts,
        }
    }
}

/// One shim, fully resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedShim {
    pub name: String,
    pub origin: ShimOrigin,
    /// containerd handler and `RuntimeClass.handler`.
    pub handler: String,
    pub runtime_class_name: String,
    pub runtime_type: String,
    pub version: String,
    /// The shim binary first (or the OCI runtime, with `oci_runtime`).
    pub binaries: Vec<ValidatedBinary>,
    pub oci_runtime: bool,
    pub options: BTreeMap<String, OptionValue>,
    pub pod_annotations: Vec<String>,
    pub privileged_without_host_devices: bool,
    pub config_files: Vec<ConfigFile>,
    /// `RuntimeClass.overhead.podFixed`; empty for none.
    pub overhead: BTreeMap<String, Quantity>,
    /// `RuntimeClass.scheduling.tolerations`.
    pub tolerations: Vec<core::Toleration>,
    /// The selected worker pools, sorted; never empty.
    pub worker_pools: Vec<String>,
    /// The shoot owner's extra node selector.
    pub node_selector: BTreeMap<String, String>,
    /// The node architectures of the selected pools.
    pub architectures: BTreeSet<Arch>,
}

/// Where a shim's definition came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShimOrigin {
    Catalog { entry: String },
    Custom,
}

/// A binary and its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedBinary {
    pub name: String,
    pub source: ValidatedSource,
}

/// Where a binary comes from, before image-vector resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValidatedSource {
    /// A catalog image, by image-vector name; resolved when the desired set is built.
    CatalogImage { image_name: String, path: String },
    /// A shoot owner's image reference.
    Image {
        image: String,
        path: String,
        sha256: BTreeMap<Arch, String>,
    },
    /// Downloads per architecture.
    Url {
        artifacts: BTreeMap<Arch, UrlArtifact>,
    },
}

impl ValidatedConfig {
    /// The shims, sorted by name.
    pub fn shims(&self) -> &[ValidatedShim] {
        &self.shims
    }

    /// The shim with this name.
    pub fn shim(&self, name: &str) -> Option<&ValidatedShim> {
        self.shims.iter().find(|s| s.name == name)
    }

    pub fn rollout(&self) -> &ValidatedRollout {
        &self.rollout
    }

    /// The Shoot's Kubernetes version: the image vector's target version.
    pub fn kubernetes_version(&self) -> Option<&str> {
        self.kubernetes_version.as_deref()
    }

    /// The admission-policy API that confines the installer on this Shoot.
    pub fn policy_api(&self) -> PolicyApi {
        self.policy_api
    }

    /// The desired-set rollout.
    pub fn desired_rollout(&self) -> desired_shims::Rollout {
        self.rollout.desired()
    }

    /// Who puts the shims on the nodes.
    pub fn delivery(&self) -> DeliveryMode {
        self.delivery
    }
}
