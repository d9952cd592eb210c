//! The record of exactly what this installer wrote into containerd's configuration.
//!
//! The installer keeps it in its on-host state file. Uninstall and every later install read it
//! instead of guessing from file contents: a key is ours only if the record says so, so keys that
//! others own are never touched, and a table of the same name that someone else wrote is a
//! conflict, not ours to overwrite.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::key_path::KeyPath;
use super::runtime::ManagedKey;

/// Everything we own, per file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ownership {
    /// Sorted by path; files in which we own nothing are left out.
    #[serde(default)]
    pub files: Vec<OwnedFile>,
}

/// What a file is to containerd; decides how uninstall validates and whether a backup is taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum FileRole {
    /// A config file containerd reads directly (edited in place).
    Config,
    /// A drop-in that `main` imports.
    DropIn { main: PathBuf },
}

/// Our part of one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnedFile {
    /// Host path.
    pub path: PathBuf,
    pub role: FileRole,
    /// We created the file: uninstall deletes it as a whole.
    #[serde(default)]
    pub created: bool,
    /// Runtime handler tables, by handler.
    #[serde(default)]
    pub handlers: Vec<OwnedHandler>,
    /// Tables we created (parents such as `plugins."io.containerd.grpc.v1.cri".containerd.runtimes`,
    /// our handler tables and their `options`). Uninstall removes one only when it is empty
    /// afterwards; a table that existed before we came is never listed, so never removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_tables: Vec<KeyPath>,
    /// Entries we appended to the top-level `imports` array.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
    /// We created the `imports` key itself (remove it when our entries were its only ones).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub created_imports: bool,
    /// The file as it was before we first changed it (for files we edit but did not create).
    /// When removing our keys leaves a document that means the same as this one, uninstall
    /// writes these exact bytes: the structured edit cannot keep every file's spelling (one key
    /// quoted two ways in two table headers comes out in one spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// Runtimes containerd provided implicitly that we wrote out so that adding ours keeps them
    /// (containerd 1.x drops its built-in `runc` once a file defines any runtime). They go
    /// with our last runtime, which gives containerd its implicit default back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptHandler>,
    /// We wrote the backup `<path>.containerd-shim.bak` before our first edit; it goes when
    /// nothing of ours is left in the file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backup: bool,
}

/// A runtime table we wrote out for containerd's implicit one: the keys we wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeptHandler {
    pub handler: String,
    /// Absolute key path of the handler table.
    pub table: KeyPath,
    /// Keys we wrote, relative to `table`.
    pub keys: Vec<KeyPath>,
}

/// Our keys in one handler's table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnedHandler {
    pub handler: String,
    /// Absolute key path of the handler table.
    pub table: KeyPath,
    /// Keys we wrote, relative to `table` (e.g. `runtime_type`, `options.SystemdCgroup`).
    pub keys: Vec<KeyPath>,
    /// The path of our managed binary we wrote (at `managed_key`); identifies our table after a
    /// lost state file and lets validation tell our runtime from a foreign one of the same name.
    pub runtime_path: String,
    #[serde(default, skip_serializing_if = "ManagedKey::is_default")]
    pub managed_key: ManagedKey,
    /// The `runtime_type` we wrote.
    pub runtime_type: String,
}

impl Ownership {
    /// Our record for a file, if we own anything in it.
    pub fn file(&self, path: &Path) -> Option<&OwnedFile> {
        self.files.iter().find(|file| file.path == path)
    }

    /// Whether we own nothing anywhere.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Every handler we own, over all files.
    pub fn handlers(&self) -> impl Iterator<Item = &OwnedHandler> {
        self.files.iter().flat_map(|file| file.handlers.iter())
    }

    /// Everything either record claims: what the installer keeps while a change is in flight,
    /// so that finishing it and rolling it back both find every key that may be ours. Claiming
    /// a key that is absent is harmless (removing it is a no-op); forgetting one would leave it
    /// behind for good.
    pub fn union(&self, other: &Ownership) -> Ownership {
        let mut files: Vec<OwnedFile> = self.files.clone();
        for theirs in &other.files {
            let Some(mine) = files.iter_mut().find(|f| f.path == theirs.path) else {
                files.push(theirs.clone());
                continue;
            };
            mine.created |= theirs.created;
            mine.created_imports |= theirs.created_imports;
            mine.backup |= theirs.backup;
            if mine.original.is_none() {
                mine.original = theirs.original.clone();
            }
            for handler in &theirs.handlers {
                match mine
                    .handlers
                    .iter_mut()
                    .find(|h| h.handler == handler.handler && h.table == handler.table)
                {
                    Some(existing) => {
                        for key in &handler.keys {
                            if !existing.keys.contains(key) {
                                existing.keys.push(key.clone());
                            }
                        }
                    }
                    None => mine.handlers.push(handler.clone()),
                }
            }
            for table in &theirs.created_tables {
                if !mine.created_tables.contains(table) {
                    mine.created_tables.push(table.clone());
                }
            }
            for entry in &theirs.imports {
                if !mine.imports.contains(entry) {
                    mine.imports.push(entry.clone());
                }
            }
            for kept in &theirs.kept {
                match mine
                    .kept
                    .iter_mut()
                    .find(|k| k.handler == kept.handler && k.table == kept.table)
                {
                    Some(existing) => {
                        for key in &kept.keys {
                            if !existing.keys.contains(key) {
                                existing.keys.push(key.clone());
                            }
                        }
                    }
                    None => mine.kept.push(kept.clone()),
                }
            }
        }
        Ownership::from_files(files)
    }

    /// The record after handing `handlers` over to gardener-node-agent (a switch from
    /// `delivery: daemonset` to `osc`, once the agent serves them), and the files whose backup
    /// (`<file>.containerd-shim.bak`) goes with it.
    ///
    /// In a file we edit in place (containerd 1.x) the agent has by then written its values
    /// over our keys of the handler's table: the table is the agent's now, so the record
    /// forgets it instead of letting an uninstall remove it. A file left with no handler of
    /// ours is forgotten as a whole: the runtimes we wrote out for containerd's implicit ones
    /// must stay defined beside the agent's table, parent tables we created hold it, and the
    /// original bytes no longer describe the file the agent re-encoded; only our backup of it
    /// goes. Drop-ins stay recorded: our drop-in would keep overriding the agent's table, so
    /// the uninstall removes it.
    pub fn hand_over_in_place(&self, handlers: &BTreeSet<String>) -> (Ownership, Vec<PathBuf>) {
        let mut backups = Vec::new();
        let mut files = Vec::new();
        for file in &self.files {
            if file.role != FileRole::Config
                || !file.handlers.iter().any(|h| handlers.contains(&h.handler))
            {
                files.push(file.clone());
                continue;
            }
            let (given, kept): (Vec<&OwnedHandler>, Vec<&OwnedHandler>) = file
                .handlers
                .iter()
                .partition(|h| handlers.contains(&h.handler));
            if kept.is_empty() {
                if file.backup {
                    backups.push(file.path.clone());
                }
                continue;
            }
            let mut file = file.clone();
            file.handlers = kept.into_iter().cloned().collect();
            file.created_tables
                .retain(|table| !given.iter().any(|h| table.starts_with(&h.table)));
            files.push(file);
        }
        (Ownership::from_files(files), backups)
    }

    /// Builds a normalised record: files sorted by path, empty records dropped.
    pub(crate) fn from_files(files: impl IntoIterator<Item = OwnedFile>) -> Self {
        let mut files: Vec<OwnedFile> = files.into_iter().filter(|file| !file.is_empty()).collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ownership { files }
    }
}

impl OwnedFile {
    /// An empty record for a file.
    pub fn new(path: impl Into<PathBuf>, role: FileRole) -> Self {
        OwnedFile {
            path: path.into(),
            role,
            created: false,
            handlers: Vec::new(),
            created_tables: Vec::new(),
            imports: Vec::new(),
            created_imports: false,
            original: None,
            kept: Vec::new(),
            backup: false,
        }
    }

    /// Whether the record claims nothing (then it need not be kept).
    pub fn is_empty(&self) -> bool {
        !self.created
            && self.handlers.is_empty()
            && self.created_tables.is_empty()
            && self.imports.is_empty()
            && !self.created_imports
            && self.kept.is_empty()
    }

    /// Our record of a handler in this file.
    pub fn handler(&self, handler: &str) -> Option<&OwnedHandler> {
        self.handlers.iter().find(|owned| owned.handler == handler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Ownership {
        let mut main = OwnedFile::new("/etc/containerd/config.toml", FileRole::Config);
        main.imports = vec!["/etc/containerd/conf.d/50-containerd-shim.toml".into()];
        main.created_imports = true;
        let mut dropin = OwnedFile::new(
            "/etc/containerd/conf.d/50-containerd-shim.toml",
            FileRole::DropIn {
                main: "/etc/containerd/config.toml".into(),
            },
        );
        dropin.created = true;
        dropin.handlers.push(OwnedHandler {
            managed_key: Default::default(),
            handler: "spin".into(),
            table: KeyPath::new([
                "plugins",
                "io.containerd.cri.v1.runtime",
                "containerd",
                "runtimes",
                "spin",
            ]),
            keys: vec![
                KeyPath::new(["runtime_type"]),
                KeyPath::new(["options", "SystemdCgroup"]),
            ],
            runtime_path: "/opt/spin".into(),
            runtime_type: "io.containerd.spin.v2".into(),
        });
        let empty = OwnedFile::new("/nowhere", FileRole::Config);
        Ownership::from_files([dropin, main, empty])
    }

    #[test]
    fn normalises_order_and_drops_empty_records() {
        let ownership = record();
        let paths: Vec<_> = ownership.files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/etc/containerd/conf.d/50-containerd-shim.toml"),
                PathBuf::from("/etc/containerd/config.toml")
            ]
        );
        assert_eq!(ownership.handlers().count(), 1);
        assert!(
            ownership
                .file(Path::new("/etc/containerd/conf.d/50-containerd-shim.toml"))
                .unwrap()
                .handler("spin")
                .is_some()
        );
        assert!(Ownership::default().is_empty());
    }

    #[test]
    fn union_claims_everything_either_record_claims() {
        let full = record();
        let empty = Ownership::default();
        assert_eq!(full.union(&empty), full);
        assert_eq!(empty.union(&full), full);
        assert_eq!(full.union(&full), full);
        let mut other = OwnedFile::new("/etc/containerd/config.toml", FileRole::Config);
        other.imports = vec!["/x.toml".into()];
        let merged = full.union(&Ownership::from_files([other]));
        let main = merged
            .file(Path::new("/etc/containerd/config.toml"))
            .unwrap();
        assert_eq!(
            main.imports,
            ["/etc/containerd/conf.d/50-containerd-shim.toml", "/x.toml"]
        );
        assert!(main.created_imports);
        assert_eq!(merged.handlers().count(), 1);
    }

    #[test]
    fn round_trips_through_json_and_rejects_unknown_fields() {
        let ownership = record();
        let json = serde_json::to_string_pretty(&ownership).unwrap();
        assert!(json.contains("\"createdImports\": true"), "{json}");
        assert!(json.contains("\"dropIn\""), "{json}");
        assert_eq!(serde_json::from_str::<Ownership>(&json).unwrap(), ownership);
        let err = serde_json::from_str::<Ownership>(r#"{"files":[],"extra":1}"#).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }
}
