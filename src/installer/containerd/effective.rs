//! containerd's effective configuration, as `containerd config dump` prints it, and the proof
//! that a candidate configuration changes nothing but our runtimes.
//!
//! `config dump` succeeding only says that containerd can parse the files. It does not say
//! that containerd still runs what it ran before: containerd 1.x fills in its default `runc`
//! runtime only while no file defines any runtime, so adding one table of ours silently drops
//! `runc`, and the CRI plugin then refuses to load ("no corresponding runtime configured ...
//! for default_runtime_name"). The only reliable test is to compare the whole effective
//! configuration before and after, with our own parts taken out of both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use toml_edit::{DocumentMut, Item, Table, Value};

use super::config_version::ConfigVersion;
use super::daemon_version::ContainerdVersion;
use super::dump::ExpectedRuntime;
use super::error::ConfigError;
use super::key_path::{KeyPath, table_at};
use super::runtime::{ManagedKey, describe_runtime};

/// At most this many differences are named in an error; the rest are counted.
const MAX_LISTED: usize = 8;

/// A runtime containerd provides without any file defining it, with the values a file must
/// give to define the same runtime explicitly.
#[derive(Clone, Debug)]
pub struct KeptRuntime {
    pub handler: String,
    /// Relative to the runtime's table.
    pub values: Vec<(KeyPath, Value)>,
}

/// One merged configuration, as the daemon sees it.
#[derive(Clone, Debug)]
pub struct EffectiveConfig {
    doc: DocumentMut,
    /// Where runtimes are in a dump of this daemon (always its own latest layout).
    layout: ConfigVersion,
}

/// What is ours in a dump: the runtime handlers we write.
#[derive(Clone, Debug, Default)]
pub struct Ours {
    pub handlers: BTreeSet<String>,
}

impl EffectiveConfig {
    /// Parses the stdout of `containerd config dump`. `config` names the file dumped, for
    /// messages.
    pub fn parse(
        config: &Path,
        containerd: ContainerdVersion,
        dump: &str,
    ) -> Result<EffectiveConfig, ConfigError> {
        let doc: DocumentMut =
            dump.parse()
                .map_err(|err: toml_edit::TomlError| ConfigError::DumpNotToml {
                    config: config.to_path_buf(),
                    message: err.to_string(),
                })?;
        Ok(EffectiveConfig {
            doc,
            layout: containerd.dump_layout(),
        })
    }

    /// The runtime handlers the CRI plugin has, sorted.
    pub fn runtime_handlers(&self) -> Vec<String> {
        table_at(self.doc.as_table(), &self.layout.runtimes_table())
            .map(|table| table.iter().map(|(key, _)| key.to_string()).collect())
            .unwrap_or_default()
    }

    /// `default_runtime_name` of the CRI plugin.
    pub fn default_runtime(&self) -> Option<String> {
        let containerd = self.layout.runtimes_table();
        let parent = KeyPath::new(&containerd.segments()[..containerd.segments().len() - 1]);
        table_at(self.doc.as_table(), &parent)
            .and_then(|table| table.get("default_runtime_name"))
            .and_then(Item::as_str)
            .map(str::to_string)
    }

    /// What a file must say to define the same runtime explicitly, relative to its table: the
    /// top-level values that differ from what containerd decodes from an absent key (empty
    /// strings, zero, false, empty lists), and every value of its sub-tables (`options`, which
    /// containerd keeps as a map).
    pub fn runtime_values(&self, handler: &str) -> Vec<(KeyPath, Value)> {
        let mut out = Vec::new();
        if let Some(table) = table_at(self.doc.as_table(), &self.layout.runtime_table(handler)) {
            collect_set_values(table, &KeyPath::default(), &mut out);
        }
        out
    }

    /// The runtimes of this configuration that are not ours, to be kept explicitly when a file
    /// that defines none is about to define ours (containerd 1.x then stops filling in its own).
    pub fn runtimes_to_keep(&self, ours: &BTreeSet<String>) -> Vec<KeptRuntime> {
        self.runtime_handlers()
            .into_iter()
            .filter(|handler| !ours.contains(handler))
            .map(|handler| KeptRuntime {
                values: self.runtime_values(&handler),
                handler,
            })
            .collect()
    }

    /// Fails when this configuration (the one before our change) already has a runtime of one
    /// of `present` that is not ours: not a handler of our record (`recorded`), and no key of
    /// its table points at our binary. The files containerd reads are searched before anything
    /// is planned ([`super::plan_install`]); this catches what no file defines, such as
    /// containerd's built-in default runtime, and a file the search could not resolve.
    pub fn ensure_not_taken(
        &self,
        config: &Path,
        present: &[ExpectedRuntime],
        recorded: &[String],
    ) -> Result<(), ConfigError> {
        for expected in present {
            if recorded.contains(&expected.handler) {
                continue;
            }
            let key = self.layout.runtime_table(&expected.handler);
            let Some(table) = table_at(self.doc.as_table(), &key) else {
                continue;
            };
            let ours = [
                ManagedKey::RuntimePath,
                ManagedKey::BinaryName,
                ManagedKey::RuntimeType,
            ]
            .into_iter()
            .any(|managed| managed.value_in(table) == Some(expected.runtime_path.as_str()));
            if !ours {
                return Err(ConfigError::ForeignEffectiveRuntime {
                    config: config.to_path_buf(),
                    key,
                    defines: describe_runtime(table),
                });
            }
        }
        Ok(())
    }

    /// Every leaf value by key path, with our runtimes taken out. `imports` is left out as
    /// well: it lists the files read (containerd 1.x prints the dumped file itself and every
    /// imported one, ours too), and what they contain is compared as the merged tables.
    fn flatten(&self, ours: &Ours) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        flatten_table(self.doc.as_table(), &KeyPath::default(), &mut out);
        out.remove("imports");
        let runtimes = self.layout.runtimes_table();
        out.retain(|key, _| {
            !ours.handlers.iter().any(|handler| {
                let prefix = runtimes.join([handler.as_str()]).to_string();
                key == &prefix || key.starts_with(&format!("{prefix}."))
            })
        });
        out
    }
}

/// Everything that differs between two effective configurations once our parts are taken out
/// of both, as `key: before -> after` lines.
pub fn differences(before: &EffectiveConfig, after: &EffectiveConfig, ours: &Ours) -> Vec<String> {
    let before = before.flatten(ours);
    let after = after.flatten(ours);
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let (old, new) = (before.get(key), after.get(key));
            (old != new).then(|| {
                format!(
                    "{key}: {} -> {}",
                    old.map_or("(unset)", String::as_str),
                    new.map_or("(unset)", String::as_str)
                )
            })
        })
        .collect()
}

/// Fails when the candidate changes anything that is not ours.
pub fn ensure_only_ours_changed(
    config: &Path,
    before: &EffectiveConfig,
    after: &EffectiveConfig,
    ours: &Ours,
) -> Result<(), ConfigError> {
    let changes = differences(before, after, ours);
    if changes.is_empty() {
        return Ok(());
    }
    let mut listed: Vec<String> = changes.iter().take(MAX_LISTED).cloned().collect();
    if changes.len() > MAX_LISTED {
        listed.push(format!("and {} more", changes.len() - MAX_LISTED));
    }
    Err(ConfigError::ForeignSettingsChanged {
        config: config.to_path_buf(),
        changes: listed,
    })
}

fn flatten_table(table: &Table, here: &KeyPath, out: &mut BTreeMap<String, String>) {
    for (key, item) in table.iter() {
        let path = here.join([key]);
        match item {
            Item::Table(child) => flatten_table(child, &path, out),
            Item::ArrayOfTables(array) => {
                for (i, child) in array.iter().enumerate() {
                    flatten_table(child, &path.join([i.to_string()]), out);
                }
            }
            Item::Value(Value::InlineTable(inline)) => {
                flatten_table(&inline.clone().into_table(), &path, out);
            }
            Item::Value(value) => {
                out.insert(path.to_string(), bare(value));
            }
            Item::None => {}
        }
    }
}

fn collect_set_values(table: &Table, here: &KeyPath, out: &mut Vec<(KeyPath, Value)>) {
    for (key, item) in table.iter() {
        let path = here.join([key]);
        match item {
            // A sub-table (`options`) decodes into a map, where an absent key is not the same
            // as a zero value: all of its keys are kept.
            Item::Table(child) => collect_all_values(child, &path, out),
            Item::Value(value) if !is_zero(value) => out.push((path, bare_value(value))),
            _ => {}
        }
    }
}

fn collect_all_values(table: &Table, here: &KeyPath, out: &mut Vec<(KeyPath, Value)>) {
    for (key, item) in table.iter() {
        let path = here.join([key]);
        match item {
            Item::Table(child) => collect_all_values(child, &path, out),
            Item::Value(value) => out.push((path, bare_value(value))),
            _ => {}
        }
    }
}

fn bare_value(value: &Value) -> Value {
    let mut value = value.clone();
    value.decor_mut().clear();
    value
}

/// What Go's TOML decoders leave a field at when its key is absent.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.value().is_empty(),
        Value::Integer(i) => *i.value() == 0,
        Value::Float(f) => *f.value() == 0.0,
        Value::Boolean(b) => !*b.value(),
        Value::Array(a) => a.is_empty(),
        Value::InlineTable(t) => t.is_empty(),
        Value::Datetime(_) => false,
    }
}

/// A value without its surrounding whitespace and comments, in one canonical spelling (the
/// dumps of containerd 1.x and 2.x quote strings differently).
fn bare(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{:?}", s.value()),
        Value::Array(array) => {
            let items: Vec<String> = array.iter().map(bare).collect();
            format!("[{}]", items.join(", "))
        }
        other => {
            let mut other = other.clone();
            other.decor_mut().clear();
            other.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c16() -> ContainerdVersion {
        ContainerdVersion::parse("containerd github.com/containerd/containerd 1.6.20 x").unwrap()
    }

    fn parse(text: &str) -> EffectiveConfig {
        EffectiveConfig::parse(Path::new("/etc/containerd/config.toml"), c16(), text).unwrap()
    }

    const BEFORE: &str = r#"imports = ["/etc/containerd/config.toml"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = ""
      privileged_without_host_devices = false
"#;

    #[test]
    fn adding_only_our_runtime_and_an_import_changes_nothing_foreign() {
        let after = BEFORE.replace(
            r#"imports = ["/etc/containerd/config.toml"]"#,
            r#"imports = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/50-containerd-shim.toml"]"#,
        ) + r#"    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
        BinaryName = "/var/lib/containerd-shim-installer/current/crun/bin/crun"
"#;
        let ours = Ours {
            handlers: ["crun".to_string()].into(),
        };
        assert_eq!(
            differences(&parse(BEFORE), &parse(&after), &ours),
            Vec::<String>::new()
        );
        // Without knowing what is ours, the same candidate is a change.
        assert!(!differences(&parse(BEFORE), &parse(&after), &Ours::default()).is_empty());
    }

    #[test]
    fn a_lost_default_runtime_is_named() {
        // Our runtime in place of the runc table containerd provided by itself.
        let runc = BEFORE
            .find(r#"    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]"#)
            .unwrap();
        let after = format!(
            r#"{}    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
      runtime_type = "io.containerd.runc.v2"
"#,
            &BEFORE[..runc]
        );
        let ours = Ours {
            handlers: ["crun".to_string()].into(),
        };
        let err = ensure_only_ours_changed(
            Path::new("/etc/containerd/config.toml"),
            &parse(BEFORE),
            &parse(&after),
            &ours,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                r#"plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type: "io.containerd.runc.v2" -> (unset)"#
            ),
            "{err}"
        );
    }

    #[test]
    fn spelling_and_whitespace_are_not_changes() {
        let other_quotes = BEFORE.replace('"', "'").replace("  ", "    ");
        assert!(differences(&parse(BEFORE), &parse(&other_quotes), &Ours::default()).is_empty());
    }

    #[test]
    fn reads_the_default_runtime_and_its_set_values() {
        let effective = parse(BEFORE);
        assert_eq!(effective.default_runtime().as_deref(), Some("runc"));
        assert_eq!(effective.runtime_handlers(), ["runc"]);
        let values: Vec<String> = effective
            .runtime_values("runc")
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        assert_eq!(values, [r#"runtime_type="io.containerd.runc.v2""#]);
    }
}
