//! The catalog of well-known shims: the facts a shoot owner should not have to know
//! (runtime type, binary names, where they are in which image, options, config files).
//!
//! The built-in catalog is `catalog.yaml` next to this file. An operator changes it with an
//! overlay file in the same format, passed to the controller with
//! `--shim-catalog-overlay <path>` (env `SHIM_CATALOG_OVERLAY`), typically a ConfigMap rendered
//! from the chart's values. Merging, entry by entry:
//!
//! - an entry that is not in the catalog yet is added; it must then give every required field
//!   (`runtimeType`, `handler`, `runtimeClassName`, `defaultVersion`, `versions`, `binaries`);
//! - an entry set to `null` is removed (e.g. `crun: null` where the operator offers no crun);
//! - for an existing entry, every field the overlay sets replaces the built-in one, except
//!   `versions` and `options`, which merge key by key: a key set to `null` is removed, any
//!   other value adds or replaces that key. `overhead: null` removes the suggested overhead.
//!
//! The merged catalog is validated as a whole; a bad overlay stops the controller at start-up
//! rather than failing shoots one by one.

use super::custom_policy::CustomShimPolicy;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use super::syntax;
use super::types::{DeliveryMode, OptionValue};
use crate::desired_shims::Arch;
use crate::gardener::decode::{PathStyle, yaml_typed};

/// The command-line flag that names the operator's catalog overlay file.
pub const OVERLAY_FLAG: &str = "shim-catalog-overlay";

/// The environment variable that may name the overlay file instead of the flag.
pub const OVERLAY_ENV: &str = "SHIM_CATALOG_OVERLAY";

/// Upper bound on an overlay file, checked before parsing it.
const MAX_OVERLAY_BYTES: usize = 1024 * 1024;

const BUILTIN: &str = include_str!("catalog.yaml");

/// The Kata entry an operator adds as an overlay (no Kata payload is built, so it is not in the
/// built-in catalog); the tests of its facts load it.
#[cfg(test)]
pub(crate) const KATA_OVERLAY: &str =
    include_str!("../../../example/kata/shim-catalog-overlay.yaml");

/// Paths as the catalog's validation writes them: `catalog.shims[spin].versions[v1].image`.
const PATHS: PathStyle<'static> = PathStyle {
    root: "catalog",
    map_fields: &["shims", "versions", "options"],
};

/// The runtime type of containerd's own runc shim, which runs the OCI runtime an entry with
/// `ociRuntime` installs.
pub const OCI_RUNTIME_SHIM: &str = "io.containerd.runc.v2";

/// What this installation offers: the catalog entries by name, and the operator's rules for
/// custom shims beyond them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Catalog {
    pub shims: BTreeMap<String, CatalogEntry>,
    #[serde(skip)]
    pub custom_shims: CustomShimPolicy,
    /// The operator's delivery for a providerConfig that names none.
    #[serde(skip)]
    pub default_delivery: DeliveryMode,
}

/// Everything known about one well-known shim.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// One line for humans (docs, error messages).
    pub description: String,
    /// containerd `runtime_type`.
    pub runtime_type: String,
    /// Default containerd handler (the `runtimes.<handler>` key and `RuntimeClass.handler`).
    pub handler: String,
    /// Default RuntimeClass name.
    pub runtime_class_name: String,
    /// The version used when the shoot owner names none; a key of `versions`.
    pub default_version: String,
    /// The versions offered, by version string.
    pub versions: BTreeMap<String, CatalogVersion>,
    /// The files installed, the shim binary first (or the OCI runtime, with `oci_runtime`).
    pub binaries: Vec<CatalogBinary>,
    /// The first binary is an OCI runtime that containerd's own runc shim runs: the installer
    /// writes its path as `options.BinaryName` instead of `runtime_path`.
    pub oci_runtime: bool,
    /// The runtime options: defaults and which keys a shoot owner may set.
    pub options: BTreeMap<String, OptionSpec>,
    /// Default `pod_annotations`.
    pub pod_annotations: Vec<String>,
    /// containerd `privileged_without_host_devices`.
    pub privileged_without_host_devices: bool,
    /// Files the installer writes into the shim's config directory.
    pub config_files: Vec<CatalogConfigFile>,
    /// Suggested RuntimeClass overhead (VM-based runtimes).
    pub overhead: Option<CatalogOverhead>,
    /// Node architectures the binaries exist for.
    pub architectures: Vec<Arch>,
}

/// One version of a catalog entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogVersion {
    /// Image-vector name of the image that holds this version's binaries.
    pub image: String,
}

/// A file of a catalog shim and where it is in the version's image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogBinary {
    /// File name on the node.
    pub name: String,
    /// Absolute path inside the image.
    pub path: String,
}

/// A config file of a catalog shim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogConfigFile {
    /// File name inside the shim's config directory.
    pub name: String,
    /// Content; `{{binDir}}` and `{{configDir}}` are replaced on the node.
    pub content: String,
}

/// Suggested RuntimeClass overhead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogOverhead {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// How one runtime option behaves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OptionSpec {
    /// The TOML type the shim decodes the option into.
    #[serde(rename = "type")]
    pub kind: OptionType,
    /// Value written when the shoot owner sets none; unset writes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<OptionValue>,
    /// Set by the catalog only (e.g. gVisor's `ConfigPath`); a shoot owner may not change it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed: bool,
}

/// Option value types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptionType {
    Bool,
    Int,
    String,
}

impl OptionType {
    pub fn matches(self, value: &OptionValue) -> bool {
        matches!(
            (self, value),
            (OptionType::Bool, OptionValue::Bool(_))
                | (OptionType::Int, OptionValue::Int(_))
                | (OptionType::String, OptionValue::String(_))
        )
    }

    /// For messages: "must be a boolean".
    pub fn noun(self) -> &'static str {
        match self {
            OptionType::Bool => "a boolean",
            OptionType::Int => "an integer",
            OptionType::String => "a string",
        }
    }
}

/// Why the catalog could not be loaded: an operator problem, reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read shim catalog overlay {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("shim catalog {origin} is larger than {MAX_OVERLAY_BYTES} bytes")]
    TooLarge { origin: String },
    #[error("shim catalog {origin} is not valid: {message}")]
    Parse { origin: String, message: String },
    #[error("shim catalog is not valid:\n- {}", .problems.join("\n- "))]
    Invalid { problems: Vec<String> },
}

/// The file format of the built-in catalog and of overlays.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    shims: BTreeMap<String, Option<EntryOverlay>>,
}

/// An entry as a file gives it: every field optional so that an overlay can change one.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EntryOverlay {
    description: Option<String>,
    runtime_type: Option<String>,
    handler: Option<String>,
    runtime_class_name: Option<String>,
    default_version: Option<String>,
    versions: Option<BTreeMap<String, Option<CatalogVersion>>>,
    binaries: Option<Vec<CatalogBinary>>,
    oci_runtime: Option<bool>,
    options: Option<BTreeMap<String, Option<OptionSpec>>>,
    pod_annotations: Option<Vec<String>>,
    privileged_without_host_devices: Option<bool>,
    config_files: Option<Vec<CatalogConfigFile>>,
    #[serde(default, deserialize_with = "present")]
    overhead: Option<Option<CatalogOverhead>>,
    architectures: Option<Vec<Arch>>,
}

/// Tells an explicit `null` (`Some(None)`) from an absent field (`None`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl Catalog {
    /// The built-in catalog.
    pub fn builtin() -> Result<Catalog, CatalogError> {
        Catalog {
            shims: BTreeMap::new(),
            custom_shims: CustomShimPolicy::default(),
            default_delivery: DeliveryMode::DaemonSet,
        }
        .with_overlay_yaml("built-in", BUILTIN)
    }

    /// The built-in catalog with the overlay file at `overlay` applied, if any.
    pub fn load(overlay: Option<&Path>) -> Result<Catalog, CatalogError> {
        let catalog = Catalog::builtin()?;
        let Some(path) = overlay else {
            return Ok(catalog);
        };
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
            path: origin.clone(),
            source,
        })?;
        catalog.with_overlay_yaml(&origin, &text)
    }

    /// This catalog with an overlay (YAML text) merged in and the result validated.
    pub fn with_overlay_yaml(mut self, origin: &str, text: &str) -> Result<Catalog, CatalogError> {
        if text.len() > MAX_OVERLAY_BYTES {
            return Err(CatalogError::TooLarge {
                origin: origin.to_owned(),
            });
        }
        let file: CatalogFile = if text.trim().is_empty() {
            CatalogFile {
                shims: BTreeMap::new(),
            }
        } else {
            yaml_typed(text, &PATHS).map_err(|problem| CatalogError::Parse {
                origin: origin.to_owned(),
                message: problem.to_string(),
            })?
        };
        let mut problems = Vec::new();
        for (name, overlay) in file.shims {
            match overlay {
                None => {
                    self.shims.remove(&name);
                }
                Some(overlay) => match self.shims.get_mut(&name) {
                    Some(entry) => entry.apply(overlay),
                    None => match CatalogEntry::new(&name, overlay) {
                        Ok(entry) => {
                            self.shims.insert(name, entry);
                        }
                        Err(missing) => problems.extend(missing),
                    },
                },
            }
        }
        for (name, entry) in &self.shims {
            entry.check(name, &mut problems);
        }
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(CatalogError::Invalid { problems })
        }
    }

    /// The entry with this name.
    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.shims.get(name)
    }

    /// Entry names, sorted; for messages that list what is available.
    pub fn names(&self) -> Vec<&str> {
        self.shims.keys().map(String::as_str).collect()
    }

    /// Every image-vector name some entry refers to, sorted and without duplicates.
    pub fn image_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .shims
            .values()
            .flat_map(|entry| entry.versions.values().map(|v| v.image.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// The problems found in one catalog entry, each as `<field>: <value> <problem>`.
struct Problems<'p> {
    entry: &'p str,
    problems: &'p mut Vec<String>,
}

impl Problems<'_> {
    fn push(&mut self, field: String, value: &str, problem: String) {
        self.problems
            .push(format!("{field}: {} {problem}", super::error::quote(value)));
    }

    /// A problem of `field` of the entry.
    fn bad(&mut self, field: &str, value: &str, problem: String) {
        let field = format!("catalog.shims[{}].{field}", self.entry);
        self.push(field, value, problem);
    }
}

impl CatalogEntry {
    /// A new entry from an overlay, which must then give every required field.
    fn new(name: &str, overlay: EntryOverlay) -> Result<CatalogEntry, Vec<String>> {
        let mut missing = Vec::new();
        let mut require = |field: &str, present: bool| {
            if !present {
                missing.push(format!(
                    "catalog.shims[{name}].{field}: required for a new catalog entry"
                ));
            }
        };
        require("runtimeType", overlay.runtime_type.is_some());
        require("handler", overlay.handler.is_some());
        require("runtimeClassName", overlay.runtime_class_name.is_some());
        require("defaultVersion", overlay.default_version.is_some());
        require("versions", overlay.versions.is_some());
        require("binaries", overlay.binaries.is_some());
        if !missing.is_empty() {
            return Err(missing);
        }
        let mut entry = CatalogEntry {
            description: String::new(),
            runtime_type: String::new(),
            handler: String::new(),
            runtime_class_name: String::new(),
            default_version: String::new(),
            versions: BTreeMap::new(),
            binaries: Vec::new(),
            oci_runtime: false,
            options: BTreeMap::new(),
            pod_annotations: Vec::new(),
            privileged_without_host_devices: false,
            config_files: Vec::new(),
            overhead: None,
            architectures: vec![Arch::Amd64, Arch::Arm64],
        };
        entry.apply(overlay);
        Ok(entry)
    }

    /// Merges an overlay into this entry (see the module documentation).
    fn apply(&mut self, overlay: EntryOverlay) {
        fn set<T>(field: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *field = value;
            }
        }
        fn merge<T>(map: &mut BTreeMap<String, T>, changes: Option<BTreeMap<String, Option<T>>>) {
            for (key, change) in changes.unwrap_or_default() {
                match change {
                    Some(value) => {
                        map.insert(key, value);
                    }
                    None => {
                        map.remove(&key);
                    }
                }
            }
        }
        set(&mut self.description, overlay.description);
        set(&mut self.runtime_type, overlay.runtime_type);
        set(&mut self.handler, overlay.handler);
        set(&mut self.runtime_class_name, overlay.runtime_class_name);
        set(&mut self.default_version, overlay.default_version);
        merge(&mut self.versions, overlay.versions);
        set(&mut self.binaries, overlay.binaries);
        set(&mut self.oci_runtime, overlay.oci_runtime);
        merge(&mut self.options, overlay.options);
        set(&mut self.pod_annotations, overlay.pod_annotations);
        set(
            &mut self.privileged_without_host_devices,
            overlay.privileged_without_host_devices,
        );
        set(&mut self.config_files, overlay.config_files);
        set(&mut self.overhead, overlay.overhead);
        set(&mut self.architectures, overlay.architectures);
    }

    /// Appends every problem of this entry to `problems`.
    fn check(&self, name: &str, problems: &mut Vec<String>) {
        let mut found = Problems {
            entry: name,
            problems,
        };
        if let Err(p) = syntax::dns1123_label(name) {
            found.push(format!("catalog.shims[{name}]"), name, p);
        }
        if let Err(p) = syntax::runtime_type(&self.runtime_type) {
            found.bad("runtimeType", &self.runtime_type, p);
        }
        if let Err(p) = syntax::handler(&self.handler) {
            found.bad("handler", &self.handler, p);
        }
        if let Err(p) = syntax::dns1123_subdomain(&self.runtime_class_name) {
            found.bad("runtimeClassName", &self.runtime_class_name, p);
        }
        self.check_versions(&mut found);
        self.check_binaries(&mut found);
        if self.oci_runtime {
            self.check_oci_runtime(&mut found);
        }
        self.check_options(&mut found);
        for (i, pattern) in self.pod_annotations.iter().enumerate() {
            if let Err(p) = syntax::annotation_pattern(pattern) {
                found.bad(&format!("podAnnotations[{i}]"), pattern, p);
            }
        }
        self.check_config_files(&mut found);
        if let Some(overhead) = &self.overhead {
            for (field, value) in [("cpu", &overhead.cpu), ("memory", &overhead.memory)] {
                if let Some(value) = value
                    && let Err(p) = syntax::non_negative_quantity(value)
                {
                    found.bad(&format!("overhead.{field}"), value, p);
                }
            }
        }
        if self.architectures.is_empty() {
            found.bad(
                "architectures",
                "",
                "must list at least one architecture".into(),
            );
        }
    }

    fn check_versions(&self, found: &mut Problems<'_>) {
        if self.versions.is_empty() {
            found.bad("versions", "", "must offer at least one version".into());
        }
        if !self.versions.contains_key(&self.default_version) {
            found.bad(
                "defaultVersion",
                &self.default_version,
                "is not one of the entry's versions".into(),
            );
        }
        for (version, spec) in &self.versions {
            if let Err(p) = syntax::version(version) {
                found.bad(&format!("versions[{version}]"), version, p);
            }
            if spec.image.is_empty() {
                found.bad(
                    &format!("versions[{version}].image"),
                    &spec.image,
                    "must name an image-vector image".into(),
                );
            }
        }
    }

    fn check_binaries(&self, found: &mut Problems<'_>) {
        if self.binaries.is_empty() {
            found.bad("binaries", "", "must list at least one binary".into());
        }
        let mut seen = Vec::new();
        for (i, binary) in self.binaries.iter().enumerate() {
            if let Err(p) = syntax::file_name(&binary.name) {
                found.bad(&format!("binaries[{i}].name"), &binary.name, p);
            }
            if seen.contains(&binary.name.as_str()) {
                found.bad(
                    &format!("binaries[{i}].name"),
                    &binary.name,
                    "is listed twice".into(),
                );
            }
            seen.push(&binary.name);
            if let Err(p) = syntax::absolute_path(&binary.path) {
                found.bad(&format!("binaries[{i}].path"), &binary.path, p);
            }
        }
    }

    /// containerd's runc shim is the one that takes `BinaryName`, and the installer writes
    /// that option itself.
    fn check_oci_runtime(&self, found: &mut Problems<'_>) {
        if self.runtime_type != OCI_RUNTIME_SHIM {
            found.bad(
                "runtimeType",
                &self.runtime_type,
                format!("must be {OCI_RUNTIME_SHIM} for an OCI runtime (ociRuntime: true)"),
            );
        }
        if self.options.contains_key("BinaryName") {
            found.bad(
                "options[BinaryName]",
                "BinaryName",
                "is written by the installer for an OCI runtime (the first binary's path)".into(),
            );
        }
    }

    fn check_options(&self, found: &mut Problems<'_>) {
        for (key, spec) in &self.options {
            let field = format!("options[{key}]");
            if let Err(p) = syntax::option_key(key) {
                found.bad(&field, key, p);
            }
            match &spec.default {
                Some(value) if !spec.kind.matches(value) => found.bad(
                    &field,
                    key,
                    format!("has a default that is not {}", spec.kind.noun()),
                ),
                Some(OptionValue::String(s)) => {
                    if let Err(p) = syntax::option_string(s) {
                        found.bad(&field, s, p);
                    }
                }
                None if spec.fixed => found.bad(&field, key, "is fixed but has no default".into()),
                _ => {}
            }
        }
    }

    fn check_config_files(&self, found: &mut Problems<'_>) {
        let mut seen = Vec::new();
        for (i, file) in self.config_files.iter().enumerate() {
            if let Err(p) = syntax::file_name(&file.name) {
                found.bad(&format!("configFiles[{i}].name"), &file.name, p);
            }
            if seen.contains(&file.name.as_str()) {
                found.bad(
                    &format!("configFiles[{i}].name"),
                    &file.name,
                    "is listed twice".into(),
                );
            }
            seen.push(&file.name);
            if file.content.len() > 64 * 1024 {
                found.bad(
                    &format!("configFiles[{i}].content"),
                    &file.name,
                    "has more than 64 KiB of content".into(),
                );
            }
        }
    }

    /// Whether a shoot owner may set this option key.
    pub fn accepts_option(&self, key: &str) -> Option<&OptionSpec> {
        self.options.get(key).filter(|spec| !spec.fixed)
    }

    /// Option keys a shoot owner may set, for messages.
    pub fn settable_options(&self) -> Vec<&str> {
        self.options
            .iter()
            .filter(|(_, spec)| !spec.fixed)
            .map(|(key, _)| key.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Catalog {
        Catalog::builtin().unwrap()
    }

    #[test]
    fn builtin_catalog_is_valid_and_complete() {
        let catalog = builtin();
        assert_eq!(catalog.names(), ["crun", "gvisor", "spin", "wasmtime"]);
        let with_kata = catalog.with_overlay_yaml("kata", KATA_OVERLAY).unwrap();
        assert_eq!(
            with_kata.names(),
            ["crun", "gvisor", "kata-qemu", "spin", "wasmtime"]
        );
    }

    #[test]
    fn builtin_facts_are_right() {
        let catalog = builtin();
        let spin = catalog.get("spin").unwrap();
        assert_eq!(spin.runtime_type, "io.containerd.spin.v2");
        assert_eq!(spin.binaries[0].name, "containerd-shim-spin-v2");
        assert_eq!(spin.handler, "spin");
        assert!(spin.accepts_option("SystemdCgroup").is_some());

        let wasmtime = catalog.get("wasmtime").unwrap();
        assert_eq!(wasmtime.runtime_type, "io.containerd.wasmtime.v1");
        assert_eq!(wasmtime.binaries.len(), 1);
        assert_eq!(wasmtime.binaries[0].name, "containerd-shim-wasmtime-v1");
        assert_eq!(wasmtime.handler, "wasmtime");
        assert_eq!(
            wasmtime.options["SystemdCgroup"].default,
            Some(OptionValue::Bool(true))
        );

        let gvisor = catalog.get("gvisor").unwrap();
        assert_eq!(gvisor.runtime_type, "io.containerd.runsc.v1");
        assert_eq!(gvisor.handler, "runsc");
        assert_eq!(gvisor.runtime_class_name, "gvisor");
        let names: Vec<_> = gvisor.binaries.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["containerd-shim-runsc-v1", "runsc"]);
        assert_eq!(
            gvisor.options["TypeUrl"].default,
            Some(OptionValue::String("io.containerd.runsc.v1.options".into()))
        );
        assert_eq!(
            gvisor.options["ConfigPath"].default,
            Some(OptionValue::String("{{configDir}}/runsc.toml".into()))
        );
        assert!(gvisor.settable_options().is_empty());
        assert_eq!(gvisor.config_files[0].name, "runsc.toml");
        assert!(
            gvisor.config_files[0]
                .content
                .contains("binary_name = \"{{binDir}}/runsc\"")
        );

        let catalog = catalog.with_overlay_yaml("kata", KATA_OVERLAY).unwrap();
        let kata = catalog.get("kata-qemu").unwrap();
        assert_eq!(kata.runtime_type, "io.containerd.kata-qemu.v2");
        assert_eq!(kata.binaries[0].name, "containerd-shim-kata-v2");
        assert_eq!(kata.handler, "kata-qemu");
        assert!(kata.privileged_without_host_devices);
        assert!(kata.overhead.is_some());
    }

    /// A pod annotation containerd passes to a shim is input from whoever creates pods; the
    /// built-in entries pass none, so no pod author can reach a host-side process's arguments.
    #[test]
    fn builtin_entries_pass_no_pod_annotations() {
        let catalog = builtin().with_overlay_yaml("kata", KATA_OVERLAY).unwrap();
        for (name, entry) in &catalog.shims {
            assert!(
                entry.pod_annotations.is_empty(),
                "{name} passes {:?}",
                entry.pod_annotations
            );
        }
    }

    #[test]
    fn overlay_adds_an_entry_and_changes_fields_of_a_builtin_one() {
        let overlay = r#"
shims:
  lunatic:
    runtimeType: io.containerd.lunatic.v2
    handler: lunatic
    runtimeClassName: lunatic
    defaultVersion: "1.0"
    versions:
      "1.0": {image: containerd-shim-lunatic}
    binaries:
      - {name: containerd-shim-lunatic-v2, path: /bin/containerd-shim-lunatic-v2}
  spin:
    defaultVersion: v0.21.0
    versions:
      v0.21.0: {image: containerd-shim-spin-v0.21.0}
    options:
      SystemdCgroup: {type: bool, default: false}
  wasmtime: null
  gvisor:
    overhead: {cpu: 100m}
"#;
        let catalog = builtin().with_overlay_yaml("test", overlay).unwrap();
        assert!(catalog.get("wasmtime").is_none());
        let lunatic = catalog.get("lunatic").unwrap();
        assert_eq!(lunatic.architectures, [Arch::Amd64, Arch::Arm64]);
        let spin = catalog.get("spin").unwrap();
        assert_eq!(spin.default_version, "v0.21.0");
        assert_eq!(
            spin.versions.keys().collect::<Vec<_>>(),
            ["v0.21.0", "v0.24.0"]
        );
        assert_eq!(
            spin.runtime_type, "io.containerd.spin.v2",
            "untouched fields stay"
        );
        assert_eq!(
            spin.options["SystemdCgroup"].default,
            Some(OptionValue::Bool(false))
        );
        assert_eq!(
            catalog.get("gvisor").unwrap().overhead,
            Some(CatalogOverhead {
                cpu: Some("100m".into()),
                memory: None
            })
        );
    }

    #[test]
    fn overlay_removes_versions_options_and_overhead_with_null() {
        let overlay = r#"
shims:
  spin:
    defaultVersion: v1
    versions:
      v0.24.0: null
      v1: {image: spin-v1}
    options:
      SystemdCgroup: null
  kata-qemu:
    overhead: null
"#;
        let catalog = builtin()
            .with_overlay_yaml("kata", KATA_OVERLAY)
            .and_then(|c| c.with_overlay_yaml("test", overlay))
            .unwrap();
        let spin = catalog.get("spin").unwrap();
        assert_eq!(spin.versions.keys().collect::<Vec<_>>(), ["v1"]);
        assert!(spin.options.is_empty());
        assert_eq!(catalog.get("kata-qemu").unwrap().overhead, None);
    }

    #[test]
    fn overlay_problems_are_all_reported() {
        let overlay = r#"
shims:
  half:
    handler: half
  spin:
    handler: runc
    defaultVersion: v9
    binaries:
      - {name: ../evil, path: relative/path}
"#;
        let err = builtin().with_overlay_yaml("test", overlay).unwrap_err();
        let text = err.to_string();
        for expected in [
            "catalog.shims[half].runtimeType: required for a new catalog entry",
            "catalog.shims[spin].handler: \"runc\" is reserved",
            "catalog.shims[spin].defaultVersion: \"v9\" is not one of the entry's versions",
            "catalog.shims[spin].binaries[0].name: \"../evil\"",
            "catalog.shims[spin].binaries[0].path: \"relative/path\"",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }

    #[test]
    fn overlay_rejects_unknown_fields_and_bad_yaml() {
        let err = builtin()
            .with_overlay_yaml("test", "shims:\n  spin:\n    runtimeTyp: x\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "shim catalog test is not valid: catalog.shims[spin].runtimeTyp: unknown field \
             \"runtimeTyp\"; allowed: description, runtimeType, handler, runtimeClassName, \
             defaultVersion, versions, binaries, ociRuntime, options, podAnnotations, \
             privilegedWithoutHostDevices, configFiles, overhead, architectures (line 3)"
        );
        let err = builtin()
            .with_overlay_yaml("test", "shims: [unclosed")
            .unwrap_err();
        assert!(matches!(err, CatalogError::Parse { .. }), "{err}");
    }

    #[test]
    fn overlay_decoding_errors_name_the_field_the_value_and_what_is_allowed() {
        let message = |overlay: &str| {
            let text = builtin()
                .with_overlay_yaml("o.yaml", overlay)
                .unwrap_err()
                .to_string();
            for phrase in ["untagged enum", "DuplicateKeyPolicy", "invalid type:", "`"] {
                assert!(
                    !text.contains(phrase),
                    "library wording {phrase:?} in: {text}"
                );
            }
            text
        };
        assert_eq!(
            message(
                "shims:\n  spin:\n    options:\n      SystemdCgroup: {type: bool, default: [1]}\n"
            ),
            "shim catalog o.yaml is not valid: catalog.shims[spin].options[SystemdCgroup].default: \
             expected true, false, an integer or a string, got a list (line 4)"
        );
        assert_eq!(
            message("shims:\n  spin:\n    options:\n      SystemdCgroup: {type: boolean}\n"),
            "shim catalog o.yaml is not valid: catalog.shims[spin].options[SystemdCgroup].type: \
             \"boolean\" is not allowed; allowed: bool, int, string (line 4)"
        );
        assert_eq!(
            message("shims:\n  spin:\n    handler: a\n    handler: b\n"),
            "shim catalog o.yaml is not valid: catalog.shims[spin]: key \"handler\" appears twice \
             (again at line 4)"
        );
        assert_eq!(
            message("shims:\n  spin:\n    ociRuntime: sometimes\n"),
            "shim catalog o.yaml is not valid: catalog.shims[spin].ociRuntime: expected true or \
             false, got \"sometimes\" (line 3)"
        );
        assert_eq!(
            message("shims:\n  spin:\n    binaries:\n      - {name: x}\n"),
            "shim catalog o.yaml is not valid: catalog.shims[spin].binaries[0].path: is required \
             but missing (line 4)"
        );
    }

    #[test]
    fn empty_overlay_changes_nothing_and_oversized_is_refused() {
        assert_eq!(builtin().with_overlay_yaml("test", "").unwrap(), builtin());
        assert_eq!(
            builtin().with_overlay_yaml("test", "shims: {}\n").unwrap(),
            builtin()
        );
        let huge = format!("# {}\n", "x".repeat(MAX_OVERLAY_BYTES));
        assert!(matches!(
            builtin().with_overlay_yaml("test", &huge),
            Err(CatalogError::TooLarge { .. })
        ));
    }

    #[test]
    fn load_reads_the_overlay_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overlay.yaml");
        std::fs::write(&path, "shims:\n  wasmtime: null\n").unwrap();
        let catalog = Catalog::load(Some(&path)).unwrap();
        assert!(builtin().get("wasmtime").is_some());
        assert!(catalog.get("wasmtime").is_none());
        assert!(matches!(
            Catalog::load(Some(&dir.path().join("missing.yaml"))),
            Err(CatalogError::Read { .. })
        ));
        assert_eq!(Catalog::load(None).unwrap(), builtin());
    }
}
