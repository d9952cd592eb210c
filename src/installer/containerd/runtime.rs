//! One runtime handler as it is written into the config: the desired shim with its host paths
//! resolved.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::desired_shims::{
    BIN_DIR_PLACEHOLDER, CONFIG_DIR_PLACEHOLDER, DesiredShim, OptionValue, node_agent_shim_dir,
};

use super::daemon_version::ContainerdVersion;
use super::error::ConfigError;

/// The key of a runtime table that holds the path of our managed binary. Its value is also how
/// a table is recognised as ours (after a lost state file) and told from a foreign runtime of
/// the same name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManagedKey {
    /// `runtime_path`: our binary is the shim containerd starts.
    #[default]
    RuntimePath,
    /// `options.BinaryName`: our binary is an OCI runtime (crun, ...) that containerd's own runc
    /// shim (`io.containerd.runc.v2`, found on containerd's PATH) runs.
    BinaryName,
    /// `runtime_type` holds the shim's absolute path: containerd 1.6.0 to 1.6.20 read
    /// `runtime_path` but never hand it to the task service (fixed in 1.6.21), so the shim is
    /// looked up by its type's binary name on containerd's PATH, where ours is not; an absolute
    /// path as the runtime type is started as it is.
    RuntimeType,
}

impl ManagedKey {
    /// The key, relative to the runtime table.
    pub fn segments(self) -> &'static [&'static str] {
        match self {
            ManagedKey::RuntimePath => &["runtime_path"],
            ManagedKey::BinaryName => &["options", "BinaryName"],
            ManagedKey::RuntimeType => &["runtime_type"],
        }
    }

    /// The key as containerd's docs spell it (`runtime_path`, `options.BinaryName`).
    pub fn name(self) -> &'static str {
        match self {
            ManagedKey::RuntimePath => "runtime_path",
            ManagedKey::BinaryName => "options.BinaryName",
            ManagedKey::RuntimeType => "runtime_type",
        }
    }

    pub fn is_default(&self) -> bool {
        *self == ManagedKey::RuntimePath
    }

    /// The value at this key in a runtime table.
    pub fn value_in(self, table: &dyn toml_edit::TableLike) -> Option<&str> {
        let (last, parents) = self.segments().split_last()?;
        let mut here = table;
        for segment in parents {
            here = here.get(segment)?.as_table_like()?;
        }
        here.get(last)?.as_str()
    }
}

/// Whether a runtime table's binary (`runtime_path`, or `options.BinaryName` for an OCI
/// runtime, the keys the extension's OperatingSystemConfig webhook writes) lies below `dir`.
pub(crate) fn runs_a_binary_below(table: &dyn toml_edit::TableLike, dir: &str) -> bool {
    [ManagedKey::RuntimePath, ManagedKey::BinaryName]
        .into_iter()
        .filter_map(|key| key.value_in(table))
        .any(|path| path.starts_with(dir))
}

/// What the engine writes into `runtimes.<handler>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeEntry {
    /// The table key and `RuntimeClass.handler` (DNS-1123 label).
    pub handler: String,
    /// `runtime_type`, e.g. `io.containerd.spin.v2`.
    pub runtime_type: String,
    /// Absolute host path of the stable symlink of our managed binary, so an upgrade swaps the
    /// symlink and never edits the config. Written at `managed_key`: `runtime_path` for a shim.
    pub runtime_path: String,
    /// Where `runtime_path` goes in the table.
    #[serde(default, skip_serializing_if = "ManagedKey::is_default")]
    pub managed_key: ManagedKey,
    /// `pod_annotations`; written only when non-empty.
    #[serde(default)]
    pub pod_annotations: Vec<String>,
    /// `privileged_without_host_devices`; written only when true.
    #[serde(default)]
    pub privileged_without_host_devices: bool,
    /// The `options` sub-table, typed as the shim's option struct expects.
    #[serde(default)]
    pub options: BTreeMap<String, OptionValue>,
    /// Where gardener-node-agent puts this shim's files when the extension delivers it through
    /// the OperatingSystemConfig ([`node_agent_shim_dir`]); see
    /// [`RuntimeEntry::delivered_by_node_agent`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_agent_dir: Option<String>,
}

impl RuntimeEntry {
    /// Resolves a desired shim for this node: `runtime_path` is the shim's stable symlink, and
    /// `{{configDir}}` / `{{binDir}}` in option values become the shim's host directories.
    pub fn from_desired(
        shim: &DesiredShim,
        runtime_path: &Path,
        config_dir: &Path,
        bin_dir: &Path,
    ) -> Result<Self, ConfigError> {
        let utf8 = |path: &Path| {
            path.to_str()
                .map(str::to_string)
                .ok_or_else(|| ConfigError::NonUtf8Path {
                    path: path.to_path_buf(),
                })
        };
        let config_dir = utf8(config_dir)?;
        let bin_dir = utf8(bin_dir)?;
        let options = shim
            .options
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    OptionValue::String(text) => OptionValue::String(
                        text.replace(CONFIG_DIR_PLACEHOLDER, &config_dir)
                            .replace(BIN_DIR_PLACEHOLDER, &bin_dir),
                    ),
                    other => other.clone(),
                };
                (key.clone(), value)
            })
            .collect();
        let entry = RuntimeEntry {
            handler: shim.handler.clone(),
            runtime_type: shim.runtime_type.clone(),
            runtime_path: utf8(runtime_path)?,
            managed_key: if shim.oci_runtime {
                ManagedKey::BinaryName
            } else {
                ManagedKey::RuntimePath
            },
            pod_annotations: shim.pod_annotations.clone(),
            privileged_without_host_devices: shim.privileged_without_host_devices,
            options,
            node_agent_dir: Some(node_agent_shim_dir(&shim.name)),
        };
        entry.validate()?;
        Ok(entry)
    }

    /// Whether `table`, a runtime table of this entry's handler that is not ours, is the one
    /// gardener-node-agent wrote for this very shim when the extension delivered it through
    /// the OperatingSystemConfig: its binary (`runtime_path`, or `options.BinaryName` for an
    /// OCI runtime, as the extension's webhook writes them) lies below the shim's own
    /// directory there. Such a table is the same shim in the other delivery mode, met when a
    /// shoot switches from `osc` to `daemonset`: the installer takes it over instead of
    /// refusing it, so the handler keeps being served while the node agent has not yet
    /// applied its `op: remove`. Anyone else's table of the handler name stays a conflict.
    pub fn delivered_by_node_agent(&self, table: &dyn toml_edit::TableLike) -> bool {
        self.node_agent_dir
            .as_deref()
            .is_some_and(|dir| runs_a_binary_below(table, dir))
    }

    /// This entry as `containerd` can use it. containerd before 1.7 hands a shim other than runc
    /// only the options `TypeUrl` and `ConfigPath` (its CRI decodes the table into those two
    /// fields and drops the rest); an options table without them reaches the shim as an empty
    /// body, which shims that expect their own options (runwasi's) refuse, failing every pod.
    /// So there the other options are left out: they could not take effect anyway.
    ///
    /// containerd 1.6.0 to 1.6.20 ignore `runtime_path` (see [`ManagedKey::RuntimeType`]): there
    /// the shim's path is written as its `runtime_type`.
    pub fn for_containerd(mut self, containerd: ContainerdVersion) -> RuntimeEntry {
        let passes_everything = self.runtime_type.starts_with("io.containerd.runc.")
            || containerd.passes_all_shim_options();
        if self.managed_key == ManagedKey::RuntimePath && !containerd.honours_runtime_path() {
            self.runtime_type = self.runtime_path.clone();
            self.managed_key = ManagedKey::RuntimeType;
        }
        if !passes_everything {
            let dropped: Vec<String> = self
                .options
                .keys()
                .filter(|key| !GENERIC_OPTIONS.contains(&key.as_str()))
                .cloned()
                .collect();
            if !dropped.is_empty() {
                tracing::info!(
                    handler = %self.handler,
                    %containerd,
                    ?dropped,
                    "containerd before 1.7 cannot pass these options to the shim; leaving them out"
                );
            }
            self.options
                .retain(|key, _| GENERIC_OPTIONS.contains(&key.as_str()));
        }
        self
    }

    /// Checks what containerd and Kubernetes require of these values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_handler(&self.handler)?;
        let invalid = |field: &'static str, value: &str, reason: &'static str| {
            Err(ConfigError::InvalidRuntime {
                handler: self.handler.clone(),
                field,
                value: value.to_string(),
                reason,
            })
        };
        if self.runtime_type.is_empty() || self.runtime_type.contains(char::is_whitespace) {
            return invalid(
                "runtime_type",
                &self.runtime_type,
                "must be a non-empty name without spaces",
            );
        }
        // containerd rejects relative shim paths; and only an absolute path keeps working when
        // containerd's PATH does not contain our directory.
        if !self.runtime_path.starts_with('/') {
            return invalid(
                self.managed_key.name(),
                &self.runtime_path,
                "must be an absolute host path",
            );
        }
        // The managed path is ours alone: an option of the same name would fight over it.
        if self.managed_key == ManagedKey::BinaryName && self.options.contains_key("BinaryName") {
            return invalid(
                "options.BinaryName",
                "",
                "is the managed path of an OCI runtime and cannot also be an option",
            );
        }
        if let Some(empty) = self.pod_annotations.iter().find(|a| a.is_empty()) {
            return invalid("pod_annotations", empty, "entries must not be empty");
        }
        if self.options.keys().any(String::is_empty) {
            return invalid("options", "", "option names must not be empty");
        }
        Ok(())
    }
}

/// What a runtime table of someone else's says, for error messages: its type and the binary it
/// runs, e.g. `runtime_type = "io.containerd.runc.v2", options.BinaryName = "/usr/bin/x"`.
pub(crate) fn describe_runtime(table: &dyn toml_edit::TableLike) -> String {
    let mut parts = Vec::new();
    for key in [
        ManagedKey::RuntimeType,
        ManagedKey::RuntimePath,
        ManagedKey::BinaryName,
    ] {
        let (last, parents) = match key.segments().split_last() {
            Some(split) => split,
            None => continue,
        };
        let mut here = Some(table);
        for segment in parents {
            here = here
                .and_then(|t| t.get(segment))
                .and_then(|i| i.as_table_like());
        }
        // Dumps print every field; an empty one says nothing.
        let value = match here.and_then(|t| t.get(last)) {
            Some(item) => match item.as_str() {
                Some("") => continue,
                Some(text) => format!("{text:?}"),
                None => item.to_string().trim().to_string(),
            },
            None => continue,
        };
        parts.push(format!("{} = {value}", key.name()));
    }
    if parts.is_empty() {
        "no runtime_type, runtime_path or options.BinaryName".to_string()
    } else {
        parts.join(", ")
    }
}

/// The options containerd's CRI hands to any shim (`runtimeoptions.Options`).
const GENERIC_OPTIONS: &[&str] = &["TypeUrl", "ConfigPath"];

/// A RuntimeClass handler must be a DNS-1123 label, and the same string is our table key.
pub fn validate_handler(handler: &str) -> Result<(), ConfigError> {
    let invalid = |reason| {
        Err(ConfigError::InvalidHandler {
            handler: handler.to_string(),
            reason,
        })
    };
    if handler.is_empty() || handler.len() > 63 {
        return invalid("must be 1 to 63 characters long");
    }
    if !handler
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return invalid("must consist of lower-case letters, digits and '-'");
    }
    if handler.starts_with('-') || handler.ends_with('-') {
        return invalid("must start and end with a letter or digit");
    }
    Ok(())
}

/// Refuses a desired set that names a handler twice: two shims cannot share one table.
pub(crate) fn validate_set(runtimes: &[RuntimeEntry]) -> Result<(), ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    for runtime in runtimes {
        runtime.validate()?;
        if !seen.insert(runtime.handler.as_str()) {
            return Err(ConfigError::DuplicateHandler {
                handler: runtime.handler.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built from JSON so that fields added to the contract later (all optional) do not break it.
    fn gvisor() -> DesiredShim {
        serde_json::from_str(
            r#"{
                "name": "gvisor",
                "handler": "runsc",
                "runtimeType": "io.containerd.runsc.v1",
                "version": "20250101",
                "binaries": [{"name": "containerd-shim-runsc-v1",
                              "source": {"url": {"artifacts": {}}}}],
                "options": {
                    "TypeUrl": "io.containerd.runsc.v1.options",
                    "ConfigPath": "{{configDir}}/runsc.toml",
                    "BinaryName": "{{binDir}}/runsc",
                    "SystemdCgroup": true,
                    "IoUid": 0
                },
                "podAnnotations": ["dev.gvisor.*"]
            }"#,
        )
        .unwrap()
    }

    #[test]
    fn resolves_placeholders_and_keeps_types() {
        let entry = RuntimeEntry::from_desired(
            &gvisor(),
            Path::new("/var/lib/shim/bin/containerd-shim-runsc-v1"),
            Path::new("/var/lib/shim/gvisor/1/config"),
            Path::new("/var/lib/shim/gvisor/1/bin"),
        )
        .unwrap();
        assert_eq!(entry.handler, "runsc");
        assert_eq!(
            entry.options["ConfigPath"],
            OptionValue::String("/var/lib/shim/gvisor/1/config/runsc.toml".into())
        );
        assert_eq!(
            entry.options["BinaryName"],
            OptionValue::String("/var/lib/shim/gvisor/1/bin/runsc".into())
        );
        assert_eq!(entry.options["SystemdCgroup"], OptionValue::Bool(true));
        assert_eq!(entry.options["IoUid"], OptionValue::Int(0));
        assert_eq!(
            entry.runtime_path,
            "/var/lib/shim/bin/containerd-shim-runsc-v1"
        );
    }

    #[test]
    fn rejects_bad_handlers() {
        for handler in [
            "",
            "Spin",
            "spin_v2",
            "-spin",
            "spin-",
            "a.b",
            &"a".repeat(64),
        ] {
            let err = validate_handler(handler).unwrap_err();
            assert!(
                err.to_string().contains(&format!("{handler:?}")),
                "{handler}: {err}"
            );
        }
        for handler in ["spin", "kata-qemu", "a", "wasmtime-v1", &"a".repeat(63)] {
            validate_handler(handler).unwrap();
        }
    }

    #[test]
    fn rejects_bad_fields() {
        let base = RuntimeEntry {
            managed_key: Default::default(),
            handler: "spin".into(),
            runtime_type: "io.containerd.spin.v2".into(),
            runtime_path: "/opt/shim".into(),
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            options: BTreeMap::new(),
            node_agent_dir: None,
        };
        base.validate().unwrap();
        let cases: Vec<(RuntimeEntry, &str)> = vec![
            (
                RuntimeEntry {
                    runtime_path: "bin/shim".into(),
                    ..base.clone()
                },
                "runtime_path \"bin/shim\"",
            ),
            (
                RuntimeEntry {
                    runtime_type: String::new(),
                    ..base.clone()
                },
                "runtime_type \"\"",
            ),
            (
                RuntimeEntry {
                    pod_annotations: vec![String::new()],
                    ..base.clone()
                },
                "pod_annotations",
            ),
            (
                RuntimeEntry {
                    options: BTreeMap::from([(String::new(), OptionValue::Bool(true))]),
                    ..base.clone()
                },
                "option names",
            ),
        ];
        for (entry, expected) in cases {
            let err = entry.validate().unwrap_err().to_string();
            assert!(err.contains("runtime spin"), "{err}");
            assert!(err.contains(expected), "{err}");
        }
        let err = validate_set(&[base.clone(), base]).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"spin\" is listed more than once"),
            "{err}"
        );
    }

    #[test]
    fn rejects_non_utf8_paths() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(OsStr::from_bytes(b"/var/\xff/shim"));
        let err = RuntimeEntry::from_desired(&gvisor(), bad, Path::new("/c"), Path::new("/b"))
            .unwrap_err();
        assert!(matches!(err, ConfigError::NonUtf8Path { .. }), "{err}");
    }

    #[test]
    fn containerd_before_1_7_gets_only_the_options_it_can_pass() {
        let entry = |runtime_type: &str| RuntimeEntry {
            handler: "h".into(),
            runtime_type: runtime_type.into(),
            runtime_path: "/opt/h".into(),
            managed_key: ManagedKey::RuntimePath,
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            options: BTreeMap::from([
                ("SystemdCgroup".into(), OptionValue::Bool(true)),
                ("ConfigPath".into(), OptionValue::String("/x.toml".into())),
            ]),
            node_agent_dir: None,
        };
        let c16 = ContainerdVersion::new(1, 6, 20);
        let wasm = entry("io.containerd.wasmtime.v1").for_containerd(c16);
        assert_eq!(wasm.options.keys().collect::<Vec<_>>(), ["ConfigPath"]);
        // runc's shim decodes all of its options, and 1.7 and 2.x pass the whole table.
        let runc = entry("io.containerd.runc.v2").for_containerd(c16);
        assert_eq!(runc.options.len(), 2);
        for newer in [
            ContainerdVersion::new(1, 7, 0),
            ContainerdVersion::new(2, 3, 7),
        ] {
            assert_eq!(
                entry("io.containerd.wasmtime.v1")
                    .for_containerd(newer)
                    .options
                    .len(),
                2
            );
        }
    }

    #[test]
    fn containerd_1_6_before_21_gets_the_shim_path_as_its_runtime_type() {
        let shim = RuntimeEntry {
            handler: "wasmtime".into(),
            runtime_type: "io.containerd.wasmtime.v1".into(),
            runtime_path: "/var/lib/containerd-shim-installer/current/wasmtime/bin/shim".into(),
            managed_key: ManagedKey::RuntimePath,
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            options: BTreeMap::new(),
            node_agent_dir: None,
        };
        let old = shim
            .clone()
            .for_containerd(ContainerdVersion::new(1, 6, 20));
        assert_eq!(old.managed_key, ManagedKey::RuntimeType);
        assert_eq!(old.runtime_type, shim.runtime_path);
        for fixed in [
            ContainerdVersion::new(1, 6, 21),
            ContainerdVersion::new(1, 7, 0),
        ] {
            assert_eq!(shim.clone().for_containerd(fixed), shim);
        }
        // An OCI runtime keeps containerd's own runc shim, found by its type.
        let crun = RuntimeEntry {
            runtime_type: "io.containerd.runc.v2".into(),
            managed_key: ManagedKey::BinaryName,
            ..shim.clone()
        };
        assert_eq!(
            crun.clone()
                .for_containerd(ContainerdVersion::new(1, 6, 20)),
            crun
        );
    }
}
