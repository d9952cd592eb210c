//! File operations on host paths below a root directory: `/host` in the installer pod, a
//! temporary directory in tests. Both host implementations share them, so the tests exercise
//! the same write, rename and symlink code the node runs.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::installer::containerd::{HostFs, HostRoot};

use super::{FileInfo, FileKind, HostWriter};

/// A host whose files lie below a root directory, as both hosts' do. The engine's read view
/// ([`HostFs`]) and the file operations of [`Host`](super::Host) are then the [`RootedFs`] ones,
/// written once for both.
pub trait RootedHost {
    fn fs(&self) -> &RootedFs;

    /// Refuses a change at `path` before it reaches the file system. On the node the kernel
    /// refuses what it must; the test host simulates read-only directories here.
    fn guard_write(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl<T: RootedHost> HostFs for T {
    fn read(&self, path: &Path) -> io::Result<Option<String>> {
        self.fs().host_root().read(path)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.fs().host_root().exists(path)
    }

    fn entries(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.fs().host_root().entries(dir)
    }
}

/// Host file operations below a root.
#[derive(Clone, Debug)]
pub struct RootedFs {
    root: HostRoot,
    base: PathBuf,
}

impl RootedFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let base = root.into();
        RootedFs {
            root: HostRoot::new(base.clone()),
            base,
        }
    }

    /// The engine's read view of the same root.
    pub fn host_root(&self) -> &HostRoot {
        &self.root
    }

    /// The directory host paths are mapped below.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Where a host path is found from this process.
    pub fn resolve(&self, host_path: &Path) -> PathBuf {
        self.root.resolve(host_path)
    }

    pub fn read_bytes(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.resolve(path)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    pub fn sha256(&self, path: &Path) -> io::Result<Option<String>> {
        match crate::installer::digest::sha256_file(&self.resolve(path)) {
            Ok(digest) => Ok(Some(digest)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    pub fn info(&self, path: &Path) -> io::Result<Option<FileInfo>> {
        let meta = match fs::symlink_metadata(self.resolve(path)) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        let file_type = meta.file_type();
        let kind = if file_type.is_symlink() {
            FileKind::Symlink
        } else if file_type.is_dir() {
            FileKind::Dir
        } else if file_type.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        };
        Ok(Some(FileInfo {
            kind,
            len: meta.len(),
            mode: meta.permissions().mode() & 0o7777,
            id: (meta.dev(), meta.ino()),
        }))
    }

    pub fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(self.resolve(path)) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut names = Vec::new();
        for entry in entries {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    pub fn read_link(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        match fs::read_link(self.resolve(path)) {
            Ok(target) => Ok(Some(target)),
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::InvalidInput =>
            {
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    pub fn create_dir_all(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut missing = Vec::new();
        let mut current = Some(path);
        while let Some(dir) = current {
            if self.info(dir)?.is_some() {
                break;
            }
            missing.push(dir.to_path_buf());
            current = dir.parent();
        }
        missing.reverse();
        for dir in &missing {
            match fs::create_dir(self.resolve(dir)) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
        }
        Ok(missing)
    }

    pub fn create_file(&self, path: &Path, mode: u32) -> io::Result<Box<dyn HostWriter>> {
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(self.resolve(path))?;
        // The umask may have narrowed the mode.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        Ok(Box::new(SyncedFile(file)))
    }

    pub fn write_file(&self, path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
        let temp = temp_sibling(path);
        let result = (|| {
            let mut writer = self.create_file(&temp, mode)?;
            writer.write_all(content)?;
            writer.finish()?;
            self.rename(&temp, path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(self.resolve(&temp));
        }
        result
    }

    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.resolve(from), self.resolve(to))?;
        sync_parent(&self.resolve(to))
    }

    pub fn swap_symlink(&self, link: &Path, target: &Path) -> io::Result<()> {
        let new = with_suffix(link, ".new");
        match fs::remove_file(self.resolve(&new)) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        std::os::unix::fs::symlink(target, self.resolve(&new))?;
        self.rename(&new, link)
    }

    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(self.resolve(path)) {
            Ok(()) => sync_parent(&self.resolve(path)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err),
        }
    }

    pub fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        match fs::remove_dir_all(self.resolve(path)) {
            Ok(()) => sync_parent(&self.resolve(path)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err),
        }
    }

    pub fn remove_empty_dir(&self, path: &Path) -> io::Result<bool> {
        match fs::remove_dir(self.resolve(path)) {
            Ok(()) => Ok(true),
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::DirectoryNotEmpty =>
            {
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    pub fn check_writable(&self, dir: &Path) -> io::Result<()> {
        let mut current = Some(dir);
        while let Some(candidate) = current {
            let resolved = self.resolve(candidate);
            if resolved.exists() {
                // access(2) reports EROFS for a read-only mount and EPERM for an immutable
                // directory, also for root; permission bits do not stop root.
                return rustix::fs::access(&resolved, rustix::fs::Access::WRITE_OK)
                    .map_err(io::Error::from);
            }
            current = candidate.parent();
        }
        Ok(())
    }
}

struct SyncedFile(fs::File);

impl io::Write for SyncedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl HostWriter for SyncedFile {
    fn finish(self: Box<Self>) -> io::Result<()> {
        self.0.sync_all()
    }
}

/// A unique temporary name next to `path`: same directory, so the final rename is atomic.
pub fn temp_sibling(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    path.with_file_name(unique)
}

/// Whether `entry` (a file name) is a [`temp_sibling`] of a file named `name`: what a process
/// killed between writing and renaming leaves behind.
pub fn is_temp_sibling(entry: &str, name: &str) -> bool {
    entry
        .strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(name))
        .is_some_and(|rest| rest.starts_with(".tmp-"))
}

pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A rename or unlink is durable only once its directory is synced.
fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) => match fs::File::open(parent) {
            Ok(dir) => dir.sync_all(),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err),
        },
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_siblings_are_recognised() {
        let temp = temp_sibling(Path::new("/var/lib/x/state.json"));
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_sibling(name, "state.json"));
        assert!(!is_temp_sibling("state.json", "state.json"));
        assert!(!is_temp_sibling(name, "other.json"));
    }

    #[test]
    fn writes_atomically_and_swaps_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(dir.path());
        let created = fs.create_dir_all(Path::new("/var/lib/x/bin")).unwrap();
        assert_eq!(
            created,
            [
                PathBuf::from("/var"),
                PathBuf::from("/var/lib"),
                PathBuf::from("/var/lib/x"),
                PathBuf::from("/var/lib/x/bin")
            ]
        );
        assert!(fs.create_dir_all(Path::new("/var/lib")).unwrap().is_empty());
        fs.write_file(Path::new("/var/lib/x/bin/a"), b"one", 0o755)
            .unwrap();
        let info = fs.info(Path::new("/var/lib/x/bin/a")).unwrap().unwrap();
        assert_eq!((info.kind, info.len, info.mode), (FileKind::File, 3, 0o755));
        assert_eq!(fs.list_dir(Path::new("/var/lib/x/bin")).unwrap(), ["a"]);

        fs.swap_symlink(Path::new("/var/lib/x/cur"), Path::new("bin"))
            .unwrap();
        assert_eq!(
            fs.read_link(Path::new("/var/lib/x/cur")).unwrap(),
            Some(PathBuf::from("bin"))
        );
        fs.swap_symlink(Path::new("/var/lib/x/cur"), Path::new("other"))
            .unwrap();
        assert_eq!(
            fs.read_link(Path::new("/var/lib/x/cur")).unwrap(),
            Some(PathBuf::from("other"))
        );
        assert_eq!(
            fs.list_dir(Path::new("/var/lib/x")).unwrap(),
            ["bin", "cur"]
        );
        assert_eq!(fs.read_link(Path::new("/var/lib/x/bin")).unwrap(), None);
        assert_eq!(fs.read_link(Path::new("/nothing")).unwrap(), None);
    }

    #[test]
    fn removal_of_missing_things_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(dir.path());
        fs.remove_file(Path::new("/a")).unwrap();
        fs.remove_dir_all(Path::new("/b")).unwrap();
        assert!(!fs.remove_empty_dir(Path::new("/c")).unwrap());
        fs.create_dir_all(Path::new("/d/e")).unwrap();
        assert!(!fs.remove_empty_dir(Path::new("/d")).unwrap());
        assert!(fs.remove_empty_dir(Path::new("/d/e")).unwrap());
        fs.check_writable(Path::new("/d/not/yet")).unwrap();
    }
}
