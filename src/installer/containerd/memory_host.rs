//! An in-memory [`HostFs`] for tests and fuzzing (the `test-util` feature): files by host path;
//! a directory exists when a file lies below it. It applies a [`Plan`] as the installer would.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::host::HostFs;
use super::plan::Plan;

/// An in-memory host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryHost {
    pub files: BTreeMap<PathBuf, String>,
}

impl MemoryHost {
    pub fn new() -> Self {
        MemoryHost::default()
    }

    /// Adds or replaces a file.
    pub fn with(mut self, path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        self.files.insert(path.into(), text.into());
        self
    }
}

impl HostFs for MemoryHost {
    fn read(&self, path: &Path) -> io::Result<Option<String>> {
        Ok(self.files.get(path).cloned())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.files.keys().any(|file| file.starts_with(path)))
    }

    fn entries(&self, dir: &Path) -> io::Result<Vec<String>> {
        let names: std::collections::BTreeSet<String> = self
            .files
            .keys()
            .filter_map(|file| file.strip_prefix(dir).ok())
            .filter_map(|rest| rest.components().next())
            .map(|first| first.as_os_str().to_string_lossy().into_owned())
            .collect();
        Ok(names.into_iter().collect())
    }
}

impl MemoryHost {
    /// Applies a plan as the installer would: backups, writes, deletes. The validation scratch
    /// file is not written; it is transient.
    pub fn apply(&mut self, plan: &Plan) {
        for backup in &plan.backups {
            self.files
                .insert(backup.destination.clone(), backup.content.clone());
        }
        for write in &plan.writes {
            self.files.insert(write.path.clone(), write.content.clone());
        }
        for delete in &plan.deletes {
            self.files.remove(&delete.path);
        }
    }
}
