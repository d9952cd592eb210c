//! Read access to the node's file system, as the planner sees it.
//!
//! The planner never touches the disk itself: it reads through [`HostFs`] and returns a plan.
//! Every path it deals in is a *host* path (as containerd sees it, `/etc/containerd/...`), even
//! when the installer runs in a container that mounts the host's root elsewhere.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::plan::Plan;

/// Reads host files by host path.
pub trait HostFs {
    /// The file's text, or `None` when nothing exists at the path.
    fn read(&self, path: &Path) -> io::Result<Option<String>>;

    /// Whether anything (file or directory) exists at the path.
    fn exists(&self, path: &Path) -> io::Result<bool>;
}

/// Reads `read`, wrapping I/O errors with the path.
pub(crate) fn read_host(host: &dyn HostFs, path: &Path) -> Result<Option<String>, ConfigError> {
    host.read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Calls `exists`, wrapping I/O errors with the path.
pub(crate) fn exists_host(host: &dyn HostFs, path: &Path) -> Result<bool, ConfigError> {
    host.exists(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The real host file system, mounted at `root` (e.g. `/host` in the installer pod, `/` when
/// the installer runs on the host).
#[derive(Clone, Debug)]
pub struct HostRoot {
    root: PathBuf,
}

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HostRoot { root: root.into() }
    }

    /// Where a host path is found from this process.
    pub fn resolve(&self, host_path: &Path) -> PathBuf {
        let relative = host_path.strip_prefix("/").unwrap_or(host_path);
        self.root.join(relative)
    }
}

impl HostFs for HostRoot {
    fn read(&self, path: &Path) -> io::Result<Option<String>> {
        match std::fs::read(self.resolve(path)) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.resolve(path).try_exists()
    }
}

/// An in-memory host for tests and dry runs: files by host path; a directory exists when a file
/// lies below it.
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

impl HostFs for MemoryHost {
    fn read(&self, path: &Path) -> io::Result<Option<String>> {
        Ok(self.files.get(path).cloned())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.files.keys().any(|file| file.starts_with(path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_host_knows_files_and_their_directories() {
        let host = MemoryHost::new().with("/etc/k0s/containerd.d/a.toml", "x");
        assert_eq!(
            host.read(Path::new("/etc/k0s/containerd.d/a.toml"))
                .unwrap()
                .as_deref(),
            Some("x")
        );
        assert!(host.exists(Path::new("/etc/k0s/containerd.d")).unwrap());
        assert!(!host.exists(Path::new("/etc/k0s/containerd.toml")).unwrap());
        // A path that merely shares a string prefix is not a parent.
        assert!(!host.exists(Path::new("/etc/k0s/contain")).unwrap());
    }

    #[test]
    fn host_root_maps_host_paths_below_the_mount() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let file = Path::new("/etc/containerd/config.toml");
        assert_eq!(
            root.resolve(file),
            dir.path().join("etc/containerd/config.toml")
        );
        assert_eq!(root.read(file).unwrap(), None);
        assert!(!root.exists(file).unwrap());
        std::fs::create_dir_all(dir.path().join("etc/containerd")).unwrap();
        std::fs::write(root.resolve(file), "version = 2\n").unwrap();
        assert_eq!(root.read(file).unwrap().as_deref(), Some("version = 2\n"));
        assert!(root.exists(Path::new("/etc/containerd")).unwrap());
    }

    #[test]
    fn host_root_refuses_non_utf8_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.toml"), [0xff, 0xfe]).unwrap();
        let err = HostRoot::new(dir.path())
            .read(Path::new("/bad.toml"))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
