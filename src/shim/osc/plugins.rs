//! The `criConfig.containerd.plugins` entries of one handler.

use serde_json::{Map, Value, json};

use crate::desired_shims::{DesiredShim, OptionValue};
use crate::gardener::api::operating_system_config::{PluginConfig, PluginOp};

use super::layout::VersionDir;

/// Where containerd's runtime tables live below `plugins`, as the config version 2 spells it;
/// gardener-node-agent translates it for versions 3 and 4.
pub const CRI_RUNTIMES_PATH: [&str; 3] = ["io.containerd.grpc.v1.cri", "containerd", "runtimes"];

/// The plugin path of a handler's runtime table.
pub fn runtime_path(handler: &str) -> Vec<String> {
    CRI_RUNTIMES_PATH
        .iter()
        .map(|s| s.to_string())
        .chain(std::iter::once(handler.to_string()))
        .collect()
}

/// The entry that writes a handler's table with the values the installer writes:
/// `runtime_type`, the managed binary at `runtime_path` (a shim) or `options.BinaryName` (an
/// OCI runtime for containerd's runc shim), `pod_annotations`,
/// `privileged_without_host_devices` and `options` with the directories resolved.
///
/// The node agent merges `values` into an existing table, so a key the installer leaves out
/// when it has its default would keep a value an earlier version set; here such keys are
/// written with their default (`runtime_path = ""` is containerd's "unset"). `options` is
/// replaced whole by the agent and is written only when it has entries.
pub fn add_entry(shim: &DesiredShim, dir: &VersionDir) -> PluginConfig {
    let first_binary = shim
        .binaries
        .first()
        .map(|b| format!("{}/{}", dir.bin_dir(), b.name))
        .unwrap_or_default();
    let mut options: Map<String, Value> = shim
        .options
        .iter()
        .map(|(key, value)| {
            let value = match value {
                OptionValue::Bool(flag) => json!(flag),
                OptionValue::Int(number) => json!(number),
                OptionValue::String(text) => json!(dir.resolve(text)),
            };
            (key.clone(), value)
        })
        .collect();
    let managed_path = if shim.oci_runtime {
        options.insert("BinaryName".into(), json!(first_binary));
        String::new()
    } else {
        first_binary
    };
    let mut values = Map::new();
    values.insert("runtime_type".into(), json!(shim.runtime_type));
    values.insert("runtime_path".into(), json!(managed_path));
    values.insert("pod_annotations".into(), json!(shim.pod_annotations));
    values.insert(
        "privileged_without_host_devices".into(),
        json!(shim.privileged_without_host_devices),
    );
    if !options.is_empty() {
        values.insert("options".into(), Value::Object(options));
    }
    PluginConfig {
        op: None,
        path: runtime_path(&shim.handler),
        values: Some(Value::Object(values)),
    }
}

/// The entry that deletes a handler's table.
pub fn remove_entry(handler: &str) -> PluginConfig {
    PluginConfig {
        op: Some(PluginOp::Remove),
        path: runtime_path(handler),
        values: None,
    }
}

/// The handler whose runtime table an entry writes or deletes, if it is exactly one.
pub fn handler_of(entry: &PluginConfig) -> Option<&str> {
    match entry.path.as_slice() {
        [a, b, c, handler] if [a, b, c] == CRI_RUNTIMES_PATH => Some(handler),
        _ => None,
    }
}
