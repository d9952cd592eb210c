//! Everything the installer does to a node goes through [`Host`]: file writes, symlink swaps,
//! directory listings, the running processes' executables, host commands (`containerd`,
//! `systemctl`, `crictl`) and the clock. The containerd engine's read-only [`HostFs`] is its
//! supertrait, so the engine plans against the same host the installer changes.
//!
//! Two implementations: [`NodeHost`], the real node (host root mounted at `/host`, commands in
//! the host's mount namespace), and a test host (module `test_host`; tests and the `test-util`
//! feature only): a temporary directory standing in for the host root, whose `containerd config
//! dump` is a real containerd binary and whose restarts and verifications are scripted and
//! recorded.
//!
//! All paths are host paths (`/etc/containerd/config.toml`), whatever the implementation maps
//! them to.

mod error;
mod node_host;
mod rooted;
#[cfg(any(test, feature = "test-util"))]
mod test_host;

use std::io;
use std::path::{Path, PathBuf};

use crate::installer::containerd::{DumpOutput, ExpectedRuntime, HostFs};

pub use error::HostError;
pub use node_host::{NodeHost, NodeHostConfig};
pub use rooted::{RootedFs, RootedHost, is_temp_sibling, temp_sibling};
#[cfg(any(test, feature = "test-util"))]
pub use test_host::{HostEvent, ScriptedOutcome, TestHost};

/// What kind of thing is at a path (symlinks are not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// The facts about a path the installer decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    pub kind: FileKind,
    pub len: u64,
    /// Permission bits.
    pub mode: u32,
    /// Device and inode: identifies the file behind a running process's executable.
    pub id: (u64, u64),
}

/// A running process's executable, from `/proc/<pid>/exe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningExe {
    pub pid: u32,
    /// The host path the kernel reports (without a ` (deleted)` suffix).
    pub path: PathBuf,
    /// Device and inode of the executable, when it could be read.
    pub id: Option<(u64, u64)>,
}

/// A file being written (staging only: never a path containerd or a shim uses).
pub trait HostWriter: io::Write + Send {
    /// Flushes the data to disk (fsync) and closes the file.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// The node, as the installer changes it. The file operations are those of the host's
/// [`RootedFs`], each change behind [`RootedHost::guard_write`].
pub trait Host: RootedHost + HostFs + Send + Sync {
    // ----- files -----

    /// The file's bytes, `None` when nothing exists at the path.
    fn read_bytes(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.fs().read_bytes(path)
    }

    /// The sha256 (lower-case hex) of a file's content, streamed; `None` when it does not exist.
    fn sha256(&self, path: &Path) -> io::Result<Option<String>> {
        self.fs().sha256(path)
    }

    /// What is at the path (not following a final symlink), `None` when nothing is.
    fn info(&self, path: &Path) -> io::Result<Option<FileInfo>> {
        self.fs().info(path)
    }

    /// Entry names of a directory, sorted; empty when the directory does not exist.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.fs().list_dir(path)
    }

    /// A symlink's target, `None` when the path is not a symlink or does not exist.
    fn read_link(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        self.fs().read_link(path)
    }

    /// Creates a directory and its missing parents; returns the directories it created,
    /// outermost first, so a caller that fails later can remove exactly them.
    fn create_dir_all(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.guard_write(path)?;
        self.fs().create_dir_all(path)
    }

    /// Creates (or truncates) a file for writing. Used only for staging paths that nothing
    /// executes; live files are replaced with [`Host::write_file`] or renames.
    fn create_file(&self, path: &Path, mode: u32) -> io::Result<Box<dyn HostWriter>> {
        self.guard_write(path)?;
        self.fs().create_file(path, mode)
    }

    /// Replaces a file atomically: a temporary file in the same directory, fsync, rename.
    fn write_file(&self, path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
        self.guard_write(path)?;
        self.fs().write_file(path, content, mode)
    }

    /// Renames atomically (a file over a file, a symlink over a symlink, a directory to a
    /// new name).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.guard_write(from)?;
        self.guard_write(to)?;
        self.fs().rename(from, to)
    }

    /// Points `link` at `target` atomically: a new symlink `<link>.new`, renamed over `link`.
    fn swap_symlink(&self, link: &Path, target: &Path) -> io::Result<()> {
        self.guard_write(link)?;
        self.fs().swap_symlink(link, target)
    }

    /// Removes a file or symlink; nothing to remove is fine.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.guard_write(path)?;
        self.fs().remove_file(path)
    }

    /// Removes a directory tree; nothing to remove is fine.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.guard_write(path)?;
        self.fs().remove_dir_all(path)
    }

    /// Removes a directory if it is empty; returns whether it did.
    fn remove_empty_dir(&self, path: &Path) -> io::Result<bool> {
        self.guard_write(path)?;
        self.fs().remove_empty_dir(path)
    }

    /// Fails when files cannot be created in `dir` (or, when it does not exist yet, in its
    /// nearest existing ancestor): a read-only mount, an immutable directory.
    fn check_writable(&self, dir: &Path) -> io::Result<()> {
        self.guard_write(dir)?;
        self.fs().check_writable(dir)
    }

    /// Removes the installer's own directory, once empty (nothing of the installer is left).
    /// A directory with something in it, or one that is gone, is left as it is.
    fn remove_state_dir(&self, dir: &Path) -> io::Result<()> {
        self.guard_write(dir)?;
        self.fs().remove_empty_dir(dir).map(|_| ())
    }

    // ----- processes -----

    /// The executables of all running processes of the host.
    fn running_executables(&self) -> io::Result<Vec<RunningExe>>;

    /// How many ready pod sandboxes the CRI has with this runtime handler; `None` when the host
    /// cannot tell (no `crictl`). A shim stays on the node while a sandbox uses it: containerd
    /// needs its files to stop that pod. A sandbox that is not ready was stopped already (its
    /// pod was deleted): it does not hold a removal up.
    fn sandboxes_with_handler(&self, handler: &str) -> Result<Option<usize>, HostError>;

    // ----- commands in the host's mount namespace -----

    /// `containerd --version`.
    fn containerd_version(&self) -> Result<String, HostError>;

    /// `containerd --config <config> config dump`.
    fn config_dump(&self, config: &Path) -> Result<DumpOutput, HostError>;

    /// `systemctl restart containerd`.
    fn restart_containerd(&self) -> Result<(), HostError>;

    /// Waits (bounded) until containerd serves CRI again and reports exactly these runtimes;
    /// the error says what was observed.
    fn verify_containerd(&self, runtimes: &[ExpectedRuntime]) -> Result<(), HostError>;

    /// The runtime handlers containerd serves now, asked once (no waiting); `None` when the
    /// host cannot tell (no `crictl`).
    fn served_handlers(&self) -> Result<Option<std::collections::BTreeSet<String>>, HostError>;

    /// Which containerd process runs now; it differs after every start. `None` when the host
    /// cannot tell, which makes every check that relies on it run in full. containerd reads
    /// its configuration only when it starts, so while this stays the same, the handlers it
    /// serves are configured as they were.
    fn containerd_instance(&self) -> Option<String>;

    // ----- clock -----

    fn now(&self) -> jiff::Timestamp;
}
