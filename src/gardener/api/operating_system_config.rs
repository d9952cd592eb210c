//! `extensions.gardener.cloud/v1alpha1` `OperatingSystemConfig`: only the parts a containerd
//! runtime is delivered through (`spec.criConfig.containerd.plugins`, `spec.files`).
//!
//! Unlike the other views in this module, an OSC is mutated and handed back (by a mutating
//! webhook), so every level we touch keeps the fields it does not model in `other` and
//! serialises them again unchanged.

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The OSC label naming the worker pool the config is for.
pub const POOL_LABEL: &str = "worker.gardener.cloud/pool";

/// `OperatingSystemConfig.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "OperatingSystemConfig",
    plural = "operatingsystemconfigs",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystemConfigSpec {
    /// The container runtime and its configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_config: Option<CriConfig>,
    /// Files the node agent writes on the node; one that disappears is removed from the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    /// Everything else (`type`, `purpose`, `units`, ...), kept as it came.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `spec.criConfig`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriConfig {
    /// `containerd` on every node this extension supports.
    pub name: String,
    /// `spec.criConfig.containerd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<ContainerdConfig>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The CRI name of containerd.
pub const CRI_CONTAINERD: &str = "containerd";

/// `spec.criConfig.containerd`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerdConfig {
    /// Patches of containerd's config, applied by the node agent in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfig>,
    /// `sandboxImage`, `registries`, ...
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One patch of containerd's config: the table at `plugins.<path...>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginConfig {
    /// Unset means [`PluginOp::Add`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<PluginOp>,
    /// Keys below `plugins`, outermost first.
    pub path: Vec<String>,
    /// Merged into the table on `add` (a nested table is replaced whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Value>,
}

/// What the node agent does with [`PluginConfig::path`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginOp {
    Add,
    /// Deletes the table with everything below it.
    Remove,
}

/// `spec.files[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Absolute path on the node.
    pub path: String,
    /// File mode; the node agent's default applies when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<u32>,
    pub content: FileContent,
    /// `hostName`, ...
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `spec.files[].content`: exactly one source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<FileContentInline>,
    /// A file taken from an OCI image that the node agent pulls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<FileContentImageRef>,
    /// `secretRef`, `transmitUnencoded`, ...
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Content in the OSC itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContentInline {
    /// Empty for plain text, `b64` for base64.
    #[serde(default)]
    pub encoding: String,
    pub data: String,
}

/// A file inside an OCI image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContentImageRef {
    pub image: String,
    /// Absolute path of the file in the image.
    pub file_path_in_image: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmodelled_fields_survive_a_round_trip() {
        let text = "apiVersion: extensions.gardener.cloud/v1alpha1\n\
            kind: OperatingSystemConfig\n\
            metadata: {name: osc, namespace: shoot--a--b, labels: {worker.gardener.cloud/pool: a}}\n\
            spec:\n  type: gardenlinux\n  purpose: reconcile\n  units: [{name: x.service}]\n\
            \x20 criConfig:\n    name: containerd\n    cgroupDriver: systemd\n\
            \x20   containerd:\n      sandboxImage: pause\n      registries: [{upstream: docker.io}]\n\
            \x20     plugins: [{op: remove, path: [a, b]}, {path: [c], values: {k: 1}}]\n\
            \x20 files:\n  - path: /etc/x\n    hostName: h\n    permissions: 420\n\
            \x20   content: {secretRef: {name: s, dataKey: d}, transmitUnencoded: true}\n\
            \x20 - path: /var/bin/y\n    content: {imageRef: {image: 'r/i:1', filePathInImage: /y}}\n";
        let osc: OperatingSystemConfig = super::super::from_yaml(text).expect("OSC decodes");
        let original: Value = serde_json::to_value(
            crate::gardener::decode::yaml_value(
                text,
                &crate::gardener::decode::PathStyle::MANIFEST,
            )
            .expect("YAML"),
        )
        .expect("JSON");
        let again = serde_json::to_value(&osc).expect("encodes");
        assert_eq!(again, original);
        let containerd = osc.spec.cri_config.unwrap().containerd.unwrap();
        assert_eq!(containerd.plugins[0].op, Some(PluginOp::Remove));
        assert_eq!(
            osc.spec.files[1]
                .content
                .image_ref
                .as_ref()
                .unwrap()
                .file_path_in_image,
            "/y"
        );
    }
}
