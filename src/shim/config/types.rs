//! The providerConfig API (`containerd-shim.extensions.gardener.cloud/v1alpha1`,
//! kind `ContainerdShimConfig`), as a shoot owner writes it in
//! `Shoot.spec.extensions[{type: containerd-shim, providerConfig: ...}]`.
//!
//! Every struct rejects unknown fields, so a typo is an error instead of a silently ignored
//! setting. The doc comments are the descriptions in the generated JSON schema
//! (`docs/reference/provider-config.schema.json`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group and version of the providerConfig.
pub const API_VERSION: &str = "containerd-shim.extensions.gardener.cloud/v1alpha1";

/// The kind of the providerConfig.
pub const KIND: &str = "ContainerdShimConfig";

/// Configuration of the containerd-shim extension for one shoot: which extra containerd
/// runtimes (WebAssembly shims, gVisor, Kata, or a custom shim) are installed on which worker
/// pools, and how fast the installation rolls out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "ContainerdShimConfig")]
pub struct ContainerdShimConfig {
    /// Must be `containerd-shim.extensions.gardener.cloud/v1alpha1`.
    #[schemars(extend("const" = API_VERSION))]
    pub api_version: String,
    /// Must be `ContainerdShimConfig`.
    #[schemars(extend("const" = KIND))]
    pub kind: String,
    /// The shims to install. Each one becomes a containerd runtime handler on the selected
    /// nodes and a RuntimeClass in the shoot. An empty list installs nothing (and removes
    /// what an earlier configuration installed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shims: Vec<Shim>,
    /// How the installation rolls out across the shoot's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// Who puts the shims on the nodes: `daemonset` (the installer DaemonSet edits containerd's
    /// config and restarts containerd) or `osc` (gardener-node-agent applies them from each
    /// worker pool's OperatingSystemConfig; the installer only verifies and labels). Default:
    /// the operator's `--default-delivery`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
}

/// Who puts the shims on the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// The installer DaemonSet.
    #[serde(rename = "daemonset")]
    DaemonSet,
    /// The worker pools' OperatingSystemConfigs, applied by gardener-node-agent.
    Osc,
}

impl DeliveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::DaemonSet => "daemonset",
            DeliveryMode::Osc => "osc",
        }
    }
}

impl From<DeliveryMode> for crate::desired_shims::Delivery {
    fn from(mode: DeliveryMode) -> Self {
        match mode {
            DeliveryMode::DaemonSet => crate::desired_shims::Delivery::DaemonSet,
            DeliveryMode::Osc => crate::desired_shims::Delivery::Osc,
        }
    }
}

impl ContainerdShimConfig {
    /// The configuration that installs nothing: what an absent providerConfig means.
    pub fn empty() -> Self {
        ContainerdShimConfig {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            shims: Vec::new(),
            rollout: None,
            delivery: None,
        }
    }
}

/// One shim: a catalog entry or a custom shim, its RuntimeClass and where it is installed.
///
/// With neither `catalog` nor `custom`, `name` is looked up in the catalog, so
/// `{name: spin}` installs the catalog's default Spin version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Shim {
    /// Unique name of this shim in the list (DNS-1123 label). It names the shim's directory on
    /// the nodes and, when neither `catalog` nor `custom` is set, the catalog entry.
    pub name: String,
    /// Install a shim from the operator's catalog of well-known shims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogRef>,
    /// Install a shim that is not in the catalog. Mutually exclusive with `catalog`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomShim>,
    /// The RuntimeClass published for this shim. Name and handler default to the catalog's
    /// (for a custom shim: to `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<RuntimeClass>,
    /// containerd runtime options (`runtimes.<handler>.options`). For a catalog shim these
    /// override or add to the catalog's defaults and are restricted to the keys the shim
    /// accepts, with their types; for a custom shim they are taken as given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, OptionValue>,
    /// Worker pools (by name) whose nodes get the shim. Every named pool must exist and run
    /// containerd. Unset: every worker pool of the shoot that runs containerd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pools: Option<Vec<String>>,
    /// Further restricts the nodes that get the shim to those carrying all of these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod annotations containerd passes through to the shim (`pod_annotations`): annotation
    /// keys, or dotted key prefixes ending in `.` or `/` and then `*`, such as
    /// `example.com/*`. Unset: the catalog's default; set (even to an empty list): exactly
    /// this list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<Vec<String>>,
}

/// A reference to a catalog entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogRef {
    /// The catalog entry, e.g. `spin`, `crun`, `wasmtime`, `gvisor`,
    /// `kata-qemu`, or one the operator added.
    pub name: String,
    /// A version the catalog offers for this entry. Unset: the catalog's default version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A shim that is not in the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomShim {
    /// containerd `runtime_type`: `io.containerd.<name>.v<N>`.
    pub runtime_type: String,
    /// Version of the binaries; names the versioned directory on the nodes, so a change
    /// installs side by side and switches atomically.
    pub version: String,
    /// The files to install. The first one is the shim binary containerd starts.
    pub binaries: Vec<CustomBinary>,
    /// containerd `privileged_without_host_devices`; VM-based runtimes set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged_without_host_devices: bool,
}

/// One file of a custom shim: taken from an OCI image, or downloaded over HTTPS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomBinary {
    /// File name on the node (no directories), e.g. `containerd-shim-foo-v1`.
    pub name: String,
    /// Copy the file out of an image. Mutually exclusive with `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageFile>,
    /// Download the file, per node architecture. Mutually exclusive with `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<UrlFile>,
}

/// A file inside an OCI image. A shoot with pools of both architectures needs a multi-arch
/// image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageFile {
    /// The image reference, e.g. `registry.example.com/shims/foo:v1.2.3` (a digest is
    /// recommended).
    #[serde(rename = "ref")]
    pub reference: String,
    /// Absolute path of the file inside the image.
    pub path: String,
    /// Expected sha256 of the file per architecture (64 lower-case hex characters); checked
    /// on the node when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<ArchDigests>,
}

/// Expected sha256 digests per node architecture.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArchDigests {
    /// Digest of the amd64 file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd64: Option<String>,
    /// Digest of the arm64 file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm64: Option<String>,
}

/// Download locations per node architecture. Every architecture of the selected worker
/// pools needs an entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlFile {
    /// The file for amd64 nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd64: Option<UrlArtifact>,
    /// The file for arm64 nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm64: Option<UrlArtifact>,
}

/// A downloadable file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlArtifact {
    /// An `https://` URL, without credentials or fragment.
    pub url: String,
    /// sha256 of the file (64 lower-case hex characters); the node refuses a file that does
    /// not match.
    pub sha256: String,
}

/// The RuntimeClass of a shim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeClass {
    /// RuntimeClass name (DNS-1123 subdomain) that pods use in `runtimeClassName`.
    /// Default: the catalog's (e.g. `gvisor`, `wasmtime-spin-v2`), for a custom shim `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// containerd runtime handler (DNS-1123 label; not `runc`). Default: the catalog's
    /// (e.g. `runsc`, `spin`), for a custom shim `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// Resources a pod of this class uses on top of its containers (`overhead.podFixed`).
    /// Unset: the catalog's suggestion (set for VM-based runtimes); set: exactly this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// Tolerations added to pods of this class (`scheduling.tolerations`), e.g. for dedicated
    /// tainted pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// RuntimeClass overhead.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Overhead {
    /// Fixed per-pod overhead.
    pub pod_fixed: PodFixed,
}

/// Fixed per-pod resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodFixed {
    /// CPU quantity, e.g. `250m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub cpu: Option<Quantity>,
    /// Memory quantity, e.g. `160Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub memory: Option<Quantity>,
}

fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A Kubernetes quantity such as 250m, 1, 160Mi or 1Gi.",
        "anyOf": [{"type": "string"}, {"type": "number"}]
    })
}

/// A toleration, as in a pod spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// Taint key; empty with operator `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// Taint value; must be empty with `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Taint effect to tolerate; empty tolerates all effects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// How long a `NoExecute` taint is tolerated, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// Toleration operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

impl TolerationOperator {
    pub fn as_str(self) -> &'static str {
        match self {
            TolerationOperator::Equal => "Equal",
            TolerationOperator::Exists => "Exists",
        }
    }
}

/// Taint effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A containerd runtime option value. The TOML type matters to the shim
/// (`SystemdCgroup = true`, not `"true"`), so booleans, integers and strings stay distinct.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum OptionValue {
    Bool(bool),
    Int(i64),
    String(String),
}

// Decoded by hand rather than as an untagged enum: that one can only say "data did not match
// any variant", where the author needs to hear which types an option takes.
impl<'de> Deserialize<'de> for OptionValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = OptionValue;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false, an integer or a string")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<OptionValue, E> {
                Ok(OptionValue::Bool(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<OptionValue, E> {
                Ok(OptionValue::Int(v))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<OptionValue, E> {
                i64::try_from(v).map(OptionValue::Int).map_err(|_| {
                    E::custom(format!(
                        "expected an integer from {} to {}, got the integer {v}",
                        i64::MIN,
                        i64::MAX
                    ))
                })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OptionValue, E> {
                Ok(OptionValue::String(v.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<OptionValue, E> {
                Ok(OptionValue::String(v))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Rollout pacing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// How many nodes may restart containerd at the same time, across the whole shoot
    /// (1 to 100). Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_concurrent_restarts: Option<u32>,
    /// `maxUnavailable` of the installer DaemonSet's rolling update: a count (at least 1) or
    /// a percentage (`"1%"` to `"100%"`). Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_schema")]
    pub max_unavailable: Option<IntOrString>,
}

fn int_or_percent_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A count or a percentage such as \"25%\".",
        "anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+%$"}]
    })
}
