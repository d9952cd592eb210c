//! The files containerd reads: the main config and, recursively, every file its `imports` name,
//! resolved as the node's containerd resolves them; and the checks that need all of them: a
//! disabled CRI plugin, runtime tables of our handlers that belong to someone else, and (on
//! containerd 1.x) an import that would replace the CRI table we edit.
//!
//! How containerd finds the files (observed with the real 1.6 and 2.3 binaries, pinned by
//! `test/integration/containerd_config.rs`):
//!
//! - an entry is a glob only when it contains `*`, expanded with Go's rules ([`super::glob`]);
//! - containerd 2.x resolves every relative entry against the importing file's directory;
//!   containerd 1.x does so for a relative file name, but expands a relative glob against its
//!   own working directory, which for the service is `/`;
//! - imported files' own `imports` are followed too, each file once;
//! - a missing file named exactly is skipped by 2.x and makes 1.x fail to start (its dump,
//!   which validation runs, reports that).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;

use super::config_version::{ConfigVersion, parse_toml};
use super::daemon_version::ContainerdVersion;
use super::error::ConfigError;
use super::glob::{expand, is_glob};
use super::host::{HostFs, read_host};
use super::imports::{imports_of, resolve};
use super::key_path::KeyPath;
use super::ownership::{OwnedHandler, Ownership};
use super::runtime::{RuntimeEntry, describe_runtime, runs_a_binary_below};

/// At most this many files are followed through `imports`; more is not a config anyone writes,
/// and the walk must end on any host.
const MAX_FILES: usize = 256;

/// One file containerd reads, parsed.
pub(crate) struct ReadFile {
    pub path: PathBuf,
    pub doc: DocumentMut,
}

/// The files `containerd --config <main>` reads, in the order it reads them: `main` first,
/// then its imports, breadth first; without `ours`, the drop-in we generate as a whole (which
/// is checked on its own, also when it is not TOML). Empty when `main` does not exist.
pub(crate) fn files_read(
    host: &dyn HostFs,
    containerd: ContainerdVersion,
    main: &Path,
    ours: Option<&Path>,
) -> Result<Vec<ReadFile>, ConfigError> {
    let mut queue = vec![main.to_path_buf()];
    let mut seen: BTreeSet<PathBuf> = queue.iter().cloned().collect();
    let mut files = Vec::new();
    let mut next = 0;
    while next < queue.len() && files.len() < MAX_FILES {
        let path = queue[next].clone();
        next += 1;
        if Some(path.as_path()) == ours {
            continue;
        }
        let Some(text) = read_host(host, &path)? else {
            continue;
        };
        let doc = parse_toml(&path, &text)?;
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        for entry in imports_of(&path, &doc)? {
            let relative_to =
                if is_glob(&entry) && !containerd.resolves_import_globs_from_the_file() {
                    Path::new("/")
                } else {
                    dir.as_path()
                };
            let resolved = resolve(relative_to, &entry);
            let found = if is_glob(&entry) {
                expand(host, &resolved)?
            } else {
                vec![resolved]
            };
            for file in found {
                if seen.insert(file.clone()) {
                    queue.push(file);
                }
            }
        }
        files.push(ReadFile { path, doc });
    }
    Ok(files)
}

/// The names containerd accepts in `disabled_plugins` for its CRI plugin: the short name of
/// containerd 1.x and the ids of the plugins that serve runtimes in 1.x and 2.x.
const CRI_PLUGIN_NAMES: &[&str] = &[
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// A node whose containerd has no CRI plugin cannot serve a runtime handler to the kubelet.
/// containerd adds up `disabled_plugins` of every file it reads, so each one counts.
pub(crate) fn ensure_cri_enabled(files: &[ReadFile]) -> Result<(), ConfigError> {
    for file in files {
        let disabled = file
            .doc
            .get("disabled_plugins")
            .and_then(toml_edit::Item::as_array)
            .into_iter()
            .flat_map(|array| array.iter())
            .filter_map(toml_edit::Value::as_str)
            .find(|name| CRI_PLUGIN_NAMES.contains(name));
        if let Some(plugin) = disabled {
            return Err(ConfigError::CriDisabled {
                path: file.path.clone(),
                plugin: plugin.to_string(),
            });
        }
    }
    Ok(())
}

/// containerd 1.x replaces a whole plugin table of the main file with an imported file's (2.x
/// merges them): where an import defines the CRI plugin's table, runtimes we add to `edited`
/// never reach containerd. Refused up front, naming the file.
pub(crate) fn ensure_cri_table_not_imported(
    files: &[ReadFile],
    containerd: ContainerdVersion,
    edited: &Path,
) -> Result<(), ConfigError> {
    if containerd.merges_imports() {
        return Ok(());
    }
    for file in files.iter().filter(|file| file.path != edited) {
        for plugin in ["cri", "io.containerd.grpc.v1.cri"] {
            let key = KeyPath::new(["plugins", plugin]);
            if table_like_at(&file.doc, &key).is_some() {
                return Err(ConfigError::CriTableImported {
                    path: file.path.clone(),
                    main: edited.to_path_buf(),
                    key,
                    containerd: containerd.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Where a runtime table of each config version lives. Every file is searched at all of them:
/// containerd 2.x reads the split CRI plugin's table also from a version-2 file (it does not
/// overwrite it when migrating), and a table at a path the node's release ignores is refused
/// too rather than reasoned away: it still names our handler for someone else.
const LAYOUTS: [ConfigVersion; 3] = [ConfigVersion::V1, ConfigVersion::V2, ConfigVersion::V3];

/// Refuses a runtime table of one of our handlers that is not ours, in any file containerd
/// reads. Ours are the tables the record says we wrote in that file, in `editable` (the file
/// we edit in place) a table that points at our managed binary (ours from a run whose record
/// was lost), and anywhere the table gardener-node-agent wrote for the same shim
/// ([`RuntimeEntry::delivered_by_node_agent`]): those handlers are returned, taken over.
pub(crate) fn ensure_no_foreign_handlers(
    files: &[ReadFile],
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
    editable: Option<&Path>,
) -> Result<Vec<String>, ConfigError> {
    let mut taken_over = Vec::new();
    for file in files {
        let record = previous.file(&file.path);
        for runtime in runtimes {
            for layout in LAYOUTS {
                let key = layout.runtime_table(&runtime.handler);
                let Some(table) = table_like_at(&file.doc, &key) else {
                    continue;
                };
                let recorded = record
                    .and_then(|r| r.handler(&runtime.handler))
                    .is_some_and(|owned| owned.table == key);
                let adoptable = Some(file.path.as_path()) == editable
                    && runtime.managed_key.value_in(table) == Some(runtime.runtime_path.as_str());
                // The same shim as the node agent delivered it (a switch from `osc`): taken over
                // where it is edited in place, overridden by our drop-in elsewhere, until the
                // agent's `op: remove` takes its table away.
                let handed_over = runtime.delivered_by_node_agent(table);
                if !(recorded || adoptable || handed_over) {
                    return Err(ConfigError::ForeignRuntime {
                        path: file.path.clone(),
                        key,
                        defines: describe_runtime(table),
                    });
                }
                if handed_over && !recorded && !taken_over.contains(&runtime.handler) {
                    taken_over.push(runtime.handler.clone());
                }
            }
        }
    }
    Ok(taken_over)
}

/// Whether containerd's main config `main` holds gardener-node-agent's table of `handler`
/// for the shim whose files the agent keeps below `dir` (at any config version's path; the
/// agent translates the path for the file's version). That is where the agent writes an
/// OperatingSystemConfig's plugin entries; a missing file holds none.
pub fn node_agent_table(
    host: &dyn HostFs,
    main: &Path,
    handler: &str,
    dir: &str,
) -> Result<bool, ConfigError> {
    let Some(doc) = document(host, main)? else {
        return Ok(false);
    };
    Ok(LAYOUTS.iter().any(|layout| {
        table_like_at(&doc, &layout.runtime_table(handler))
            .is_some_and(|table| runs_a_binary_below(table, dir))
    }))
}

/// Whether the table the installer edited in place for `owned` (in `file`) now carries
/// gardener-node-agent's values for the shim whose files the agent keeps below `dir`: its
/// binary lies there and the installer's managed key no longer holds the installer's path.
/// (A table the installer took over from the agent keeps the agent's `runtime_path` beside
/// the installer's `runtime_type` on containerd 1.6.0 to 1.6.20; that one is still ours.)
pub fn node_agent_values_in(
    host: &dyn HostFs,
    file: &Path,
    owned: &OwnedHandler,
    dir: &str,
) -> Result<bool, ConfigError> {
    let Some(doc) = document(host, file)? else {
        return Ok(false);
    };
    Ok(table_like_at(&doc, &owned.table).is_some_and(|table| {
        runs_a_binary_below(table, dir)
            && owned.managed_key.value_in(table) != Some(owned.runtime_path.as_str())
    }))
}

/// The parsed file, or `None` where it does not exist.
fn document(host: &dyn HostFs, path: &Path) -> Result<Option<DocumentMut>, ConfigError> {
    read_host(host, path)?
        .map(|text| parse_toml(path, &text))
        .transpose()
}

/// The table at `path`, however it is written: a `[header]`, dotted keys or an inline table.
fn table_like_at<'d>(doc: &'d DocumentMut, path: &KeyPath) -> Option<&'d dyn toml_edit::TableLike> {
    let mut here: &dyn toml_edit::TableLike = doc.as_table();
    for segment in path.segments() {
        here = here.get(segment)?.as_table_like()?;
    }
    Some(here)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::containerd::MemoryHost;

    const C1: ContainerdVersion = ContainerdVersion::new(1, 7, 27);
    const C2: ContainerdVersion = ContainerdVersion::new(2, 3, 7);
    const MAIN: &str = "/etc/containerd/config.toml";

    fn paths(host: &MemoryHost, containerd: ContainerdVersion) -> Vec<String> {
        files_read(host, containerd, Path::new(MAIN), None)
            .unwrap()
            .iter()
            .map(|f| f.path.display().to_string())
            .collect()
    }

    #[test]
    fn follows_imports_as_each_release_resolves_them() {
        let host = MemoryHost::new()
            .with(
                MAIN,
                "version = 2\nimports = [\"conf.d/*.toml\", \"extra.toml\", \"/opt/abs/*.toml\"]\n",
            )
            .with(
                "/etc/containerd/conf.d/10-a.toml",
                "version = 2\nimports = [\"nested/b.toml\"]\n",
            )
            .with("/etc/containerd/conf.d/nested/b.toml", "version = 2\n")
            .with("/etc/containerd/extra.toml", "version = 2\n")
            .with(
                "/opt/abs/x.toml",
                "version = 2\nimports = [\"/etc/containerd/extra.toml\"]\n",
            )
            .with("/conf.d/from-root.toml", "version = 2\n");
        // 2.x: everything relative to the importing file; each file once.
        assert_eq!(
            paths(&host, C2),
            [
                MAIN,
                "/etc/containerd/conf.d/10-a.toml",
                "/etc/containerd/extra.toml",
                "/opt/abs/x.toml",
                "/etc/containerd/conf.d/nested/b.toml",
            ]
        );
        // 1.x: a relative glob resolves against containerd's working directory, `/`.
        assert_eq!(
            paths(&host, C1),
            [
                MAIN,
                "/conf.d/from-root.toml",
                "/etc/containerd/extra.toml",
                "/opt/abs/x.toml",
            ]
        );
    }

    #[test]
    fn a_missing_main_file_reads_nothing_and_cycles_end() {
        assert!(paths(&MemoryHost::new(), C2).is_empty());
        let host = MemoryHost::new()
            .with(MAIN, "imports = [\"/etc/containerd/conf.d/*.toml\"]\n")
            .with(
                "/etc/containerd/conf.d/a.toml",
                "imports = [\"/etc/containerd/config.toml\", \"a.toml\"]\n",
            );
        assert_eq!(paths(&host, C2), [MAIN, "/etc/containerd/conf.d/a.toml"]);
    }

    #[test]
    fn containerd_1_refuses_an_import_that_replaces_the_cri_table() {
        let host = MemoryHost::new()
            .with(
                MAIN,
                "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause\"\n",
            )
            .with(
                "/etc/containerd/conf.d/20-mirror.toml",
                "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"docker.io\"]\n  endpoint = [\"https://mirror\"]\n",
            )
            .with(
                "/etc/containerd/conf.d/10-gc.toml",
                "version = 2\n[plugins.\"io.containerd.gc.v1.scheduler\"]\n  pause_threshold = 0.02\n",
            );
        let files = files_read(&host, C1, Path::new(MAIN), None).unwrap();
        let err = ensure_cri_table_not_imported(&files, C1, Path::new(MAIN))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/containerd/conf.d/20-mirror.toml"),
            "{err}"
        );
        assert!(
            err.contains("plugins.\"io.containerd.grpc.v1.cri\""),
            "{err}"
        );
        // containerd 2.x merges the import into the main file's table.
        let files = files_read(&host, C2, Path::new(MAIN), None).unwrap();
        ensure_cri_table_not_imported(&files, C2, Path::new(MAIN)).unwrap();
    }

    #[test]
    fn errors_name_the_imported_file() {
        let host = MemoryHost::new()
            .with(MAIN, "imports = [\"/etc/containerd/conf.d/*.toml\"]\n")
            .with("/etc/containerd/conf.d/bad.toml", "[plugins\n");
        let err = files_read(&host, C2, Path::new(MAIN), None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/etc/containerd/conf.d/bad.toml"), "{err}");
    }
}
