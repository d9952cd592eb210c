//! Read access to the node's file system, as the planner sees it.
//!
//! The planner never touches the disk itself: it reads through [`HostFs`] and returns a plan.
//! Every path it deals in is a *host* path (as containerd sees it, `/etc/containerd/...`), even
//! when the installer runs in a container that mounts the host's root elsewhere.

use std::io;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// Reads host files by host path.
pub trait HostFs {
    /// The file's text, or `None` when nothing exists at the path.
    fn read(&self, path: &Path) -> io::Result<Option<String>>;

    /// Whether anything (file or directory) exists at the path.
    fn exists(&self, path: &Path) -> io::Result<bool>;

    /// The names of the entries of a directory, sorted; empty when nothing exists there or it
    /// is not a directory. Import globs are expanded with it.
    fn entries(&self, dir: &Path) -> io::Result<Vec<String>>;
}

/// Reads `read`, wrapping I/O errors with the path.
pub(crate) fn read_host(host: &dyn HostFs, path: &Path) -> Result<Option<String>, ConfigError> {
    host.read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Calls `entries`, wrapping I/O errors with the path.
pub(crate) fn entries_host(host: &dyn HostFs, dir: &Path) -> Result<Vec<String>, ConfigError> {
    host.entries(dir).map_err(|source| ConfigError::Read {
        path: dir.to_path_buf(),
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

    fn entries(&self, dir: &Path) -> io::Result<Vec<String>> {
        let listing = match std::fs::read_dir(self.resolve(dir)) {
            Ok(listing) => listing,
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(Vec::new());
            }
            Err(err) => return Err(err),
        };
        let mut names = Vec::new();
        for entry in listing {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::containerd::MemoryHost;

    #[test]
    fn memory_host_knows_files_and_their_directories() {
        let host = MemoryHost::new()
            .with("/etc/containerd/conf.d/a.toml", "x")
            .with("/etc/containerd/conf.d/sub/b.toml", "y")
            .with("/etc/containerd/config.toml", "z");
        assert_eq!(
            host.read(Path::new("/etc/containerd/conf.d/a.toml"))
                .unwrap()
                .as_deref(),
            Some("x")
        );
        assert!(host.exists(Path::new("/etc/containerd/conf.d")).unwrap());
        assert!(!host.exists(Path::new("/etc/containerd/conf.toml")).unwrap());
        // A path that merely shares a string prefix is not a parent.
        assert!(!host.exists(Path::new("/etc/containerd/conf")).unwrap());
        assert_eq!(
            host.entries(Path::new("/etc/containerd/conf.d")).unwrap(),
            ["a.toml", "sub"]
        );
        assert_eq!(
            host.entries(Path::new("/etc/containerd")).unwrap(),
            ["conf.d", "config.toml"]
        );
        assert!(host.entries(Path::new("/nowhere")).unwrap().is_empty());
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
        assert!(
            root.entries(Path::new("/etc/containerd"))
                .unwrap()
                .is_empty()
        );
        std::fs::write(root.resolve(file), "version = 2\n").unwrap();
        assert_eq!(root.read(file).unwrap().as_deref(), Some("version = 2\n"));
        assert!(root.exists(Path::new("/etc/containerd")).unwrap());
        assert_eq!(
            root.entries(Path::new("/etc/containerd")).unwrap(),
            ["config.toml"]
        );
        assert!(
            root.entries(file).unwrap().is_empty(),
            "a file lists nothing"
        );
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
