//! What validation produces: a providerConfig with every shim resolved and every default
//! applied, ready for the desired set.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::admission::PolicyApi;
use crate::desired_shims::{self, Arch, ConfigFile, OptionValue, UrlArtifact};

/// A providerConfig that passed validation, with defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedConfig {
    /// The shims, sorted by name.
    pub shims: Vec<ValidatedShim>,
    pub rollout: ValidatedRollout,
    /// The Shoot's Kubernetes version: the image vector's target version.
    pub kubernetes_version: Option<String>,
    /// The admission-policy API that confines the installer on this Shoot.
    pub policy_api: PolicyApi,
}

/// Rollout settings with defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedRollout {
    pub max_concurrent_restarts: u32,
    /// The installer DaemonSet's `rollingUpdate.maxUnavailable`.
    pub max_unavailable: IntOrString,
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
    /// The shim with this name.
    pub fn shim(&self, name: &str) -> Option<&ValidatedShim> {
        self.shims.iter().find(|s| s.name == name)
    }

    /// The desired-set rollout.
    pub fn desired_rollout(&self) -> desired_shims::Rollout {
        desired_shims::Rollout {
            max_concurrent_restarts: self.rollout.max_concurrent_restarts,
        }
    }
}
