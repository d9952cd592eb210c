//! Where a shim's files live on the host, below the installer's state directory:
//!
//! ```text
//! /var/lib/containerd-shim-installer/
//!   state.json
//!   versions/<shim>/<version>-<digest12>/bin/<binary>        immutable once renamed into place
//!   versions/<shim>/<version>-<digest12>/config/<file>
//!   versions/<shim>/<version>-<digest12>/manifest.json       names, sizes and sha256 of the files
//!   versions/<shim>/<version>-<digest12>.staging/            transient, renamed or removed
//!   current/<shim> -> ../versions/<shim>/<version>-<digest12>   the stable path
//! ```
//!
//! containerd's `runtime_path` is `current/<shim>/bin/<first binary>`, and `{{binDir}}` /
//! `{{configDir}}` resolve to `current/<shim>/bin` and `current/<shim>/config`. An upgrade
//! renames a new symlink over `current/<shim>`: one atomic step switches all of a shim's
//! binaries and config files together, the config containerd reads does not change (no
//! restart), and running shims keep executing their old inode in the old directory.
//! The directory name carries a digest of the content, so a changed artifact of the same
//! version is a new directory, never an overwrite.

use std::path::{Path, PathBuf};

/// Suffix of a version directory being assembled.
pub const STAGING_SUFFIX: &str = ".staging";
/// Name of the manifest inside a version directory.
pub const MANIFEST: &str = "manifest.json";

/// The host paths below a state directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    state_dir: PathBuf,
}

impl Layout {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Layout {
            state_dir: state_dir.into(),
        }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join(crate::installer::state::STATE_FILE)
    }

    pub fn versions_root(&self) -> PathBuf {
        self.state_dir.join("versions")
    }

    pub fn versions(&self, shim: &str) -> PathBuf {
        self.versions_root().join(shim)
    }

    pub fn version_dir(&self, shim: &str, dir: &str) -> PathBuf {
        self.versions(shim).join(dir)
    }

    pub fn staging_dir(&self, shim: &str, dir: &str) -> PathBuf {
        self.versions(shim).join(format!("{dir}{STAGING_SUFFIX}"))
    }

    pub fn current_root(&self) -> PathBuf {
        self.state_dir.join("current")
    }

    /// The stable symlink of a shim.
    pub fn current(&self, shim: &str) -> PathBuf {
        self.current_root().join(shim)
    }

    /// What `current/<shim>` points at: relative, so it resolves the same on the host and
    /// through the pod's `/host` mount.
    pub fn link_target(shim: &str, dir: &str) -> PathBuf {
        Path::new("../versions").join(shim).join(dir)
    }

    /// The version directory name a link target names, if it is one of ours.
    pub fn dir_of_target(shim: &str, target: &Path) -> Option<String> {
        let rest = target
            .strip_prefix(Path::new("../versions").join(shim))
            .ok()?;
        let mut parts = rest.components();
        let name = parts.next()?.as_os_str().to_str()?.to_string();
        parts.next().is_none().then_some(name)
    }

    pub fn bin_dir(&self, shim: &str) -> PathBuf {
        self.current(shim).join("bin")
    }

    pub fn config_dir(&self, shim: &str) -> PathBuf {
        self.current(shim).join("config")
    }

    /// containerd's `runtime_path` for a shim whose first binary is `binary`.
    pub fn runtime_path(&self, shim: &str, binary: &str) -> PathBuf {
        self.bin_dir(shim).join(binary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let layout = Layout::new("/var/lib/containerd-shim-installer");
        assert_eq!(
            layout.runtime_path("spin", "containerd-shim-spin-v2"),
            PathBuf::from(
                "/var/lib/containerd-shim-installer/current/spin/bin/containerd-shim-spin-v2"
            )
        );
        assert_eq!(
            layout.staging_dir("spin", "v1-abc"),
            PathBuf::from("/var/lib/containerd-shim-installer/versions/spin/v1-abc.staging")
        );
        let target = Layout::link_target("spin", "v1-abc");
        assert_eq!(target, PathBuf::from("../versions/spin/v1-abc"));
        assert_eq!(
            Layout::dir_of_target("spin", &target).as_deref(),
            Some("v1-abc")
        );
        assert_eq!(Layout::dir_of_target("other", &target), None);
        assert_eq!(Layout::dir_of_target("spin", Path::new("/x")), None);
    }
}
