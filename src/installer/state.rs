//! The on-host state file, `<state dir>/state.json`: what the installer did on this node, so
//! that every run (after a crash, a pod restart, a node reboot) resumes from facts instead of
//! guessing from file contents.
//!
//! It is written atomically (temporary file, fsync, rename) before and after each step that
//! changes the node. A config change, and a switch of a shim's symlink to another version, is
//! journaled *before* the first file or symlink is changed (the [`ConfigTxn`]): it holds the
//! bytes to restore, the symlinks to point back, and both ownership records, so a run that dies
//! anywhere in the change, or whose change fails verification, can finish it or roll it back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::containerd::{ExpectedRuntime, Ownership, Validation};
use super::error::InstallerError;
use super::host::Host;

/// The schema this build writes and reads.
pub const STATE_SCHEMA: u32 = 1;

/// File name of the state file in the state directory.
pub const STATE_FILE: &str = "state.json";

/// Everything the installer remembers about its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct State {
    pub schema: u32,
    /// What we own in containerd's configuration (the engine's record). While a config change
    /// is in flight this is the union of the records before and after it, so that neither
    /// finishing nor rolling back can leave a key of ours behind unrecorded.
    #[serde(default)]
    pub ownership: Ownership,
    /// Per shim (by name): installed, being installed, failed, or being removed.
    #[serde(default)]
    pub shims: BTreeMap<String, ShimState>,
    /// The config change in flight, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigTxn>,
    /// The node failed to converge to this desired set; it is not retried automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Directories our config changes created (e.g. a drop-in directory); removed when empty
    /// once we own nothing in containerd's configuration any more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_dirs: Vec<PathBuf>,
    /// When containerd was last restarted by us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<jiff::Timestamp>,
}

/// Where a shim is in its life on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Selected, not yet verified with its current desired description.
    Installing,
    /// Verified: containerd serves the handler with this description.
    Active,
    /// The last attempt for this description failed; the config was rolled back.
    Failed,
    /// No longer selected; removal (or garbage collection of in-use binaries) is pending.
    Uninstalling,
}

/// One shim on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShimState {
    pub handler: String,
    /// Hash of the desired description the phase refers to.
    pub desired_hash: String,
    pub phase: Phase,
    /// The versioned directory the stable symlink points at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Earlier versioned directories, most recent first (the rollback window).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<String>,
    /// The description last verified on this node (its label may stay during an upgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<jiff::Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A file's content before a config change (`None`: the file did not exist).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackFile {
    pub path: PathBuf,
    pub content: Option<String>,
}

/// Where a journaled config change stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum TxnPhase {
    /// Files are (being) written; not validated yet.
    Writing,
    /// `config dump` accepted the files; containerd must restart into them.
    Validated,
    /// A restart into the new config was started.
    Restarting,
    /// Verification failed; the old config is (being) restored and containerd restarted.
    RollingBack { error: String },
}

/// A config change in flight (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigTxn {
    pub phase: TxnPhase,
    pub started_at: jiff::Timestamp,
    /// Content of every touched file before the first write of this change.
    pub rollback: Vec<RollbackFile>,
    /// Directories the change creates (deepest last); a rollback removes them when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_dirs: Vec<PathBuf>,
    /// The stable symlinks (by shim) before this change: `None` = absent.
    #[serde(default)]
    pub symlinks: BTreeMap<String, Option<PathBuf>>,
    pub ownership_before: Ownership,
    pub ownership_after: Ownership,
    /// How to check the written files with `containerd config dump`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
    /// The runtimes containerd must serve after the restart.
    #[serde(default)]
    pub runtimes: Vec<ExpectedRuntime>,
    /// Shims whose description this change is for (marked failed if it fails).
    #[serde(default)]
    pub shims: Vec<String>,
}

/// The node's failure to converge, remembered so the same desired set is not retried in a loop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Failure {
    pub node_hash: String,
    pub error: String,
    pub at: jiff::Timestamp,
}

impl State {
    pub fn new() -> Self {
        State {
            schema: STATE_SCHEMA,
            ..State::default()
        }
    }

    /// Reads the state file; a missing file is a fresh node. A corrupt or unknown file is an
    /// error: guessing would risk removing someone else's configuration.
    pub fn load(host: &dyn Host, path: &Path) -> Result<State, InstallerError> {
        let Some(bytes) = host
            .read_bytes(path)
            .map_err(|err| InstallerError::host("read", path, err))?
        else {
            return Ok(State::new());
        };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|err| InstallerError::State {
                path: path.to_path_buf(),
                message: format!(
                    "not valid JSON ({err}); move it away to start over (the installer adopts its \
                     own runtime tables by their runtime_path)"
                ),
            })?;
        let schema = value.get("schema").and_then(serde_json::Value::as_u64);
        if schema != Some(u64::from(STATE_SCHEMA)) {
            return Err(InstallerError::State {
                path: path.to_path_buf(),
                message: format!(
                    "schema {schema:?} is not {STATE_SCHEMA}, the one this installer reads"
                ),
            });
        }
        serde_json::from_value(value).map_err(|err| InstallerError::State {
            path: path.to_path_buf(),
            message: err.to_string(),
        })
    }

    /// Writes the state file atomically.
    pub fn store(&self, host: &dyn Host, path: &Path) -> Result<(), InstallerError> {
        let text = serde_json::to_string_pretty(self).map_err(|err| InstallerError::State {
            path: path.to_path_buf(),
            message: err.to_string(),
        })?;
        if let Some(parent) = path.parent() {
            host.create_dir_all(parent)
                .map_err(|err| InstallerError::host("create directory", parent, err))?;
        }
        host.write_file(path, format!("{text}\n").as_bytes(), 0o600)
            .map_err(|err| InstallerError::host("write", path, err))
    }

    /// Whether there is nothing left to remember (a fully uninstalled node).
    pub fn is_clean(&self) -> bool {
        self.ownership.is_empty()
            && self.created_dirs.is_empty()
            && self.shims.is_empty()
            && self.config.is_none()
            && self.failure.is_none()
    }
}

impl ConfigTxn {
    /// Whether the journal holds nothing but symlink switches (a new version of a shim whose
    /// configuration did not change): containerd reads nothing new, so proving the change needs
    /// no restart, and undoing it is pointing the symlinks back. A config change always writes
    /// or deletes a file, and journals its content first.
    pub fn switches_only(&self) -> bool {
        self.rollback.is_empty()
            && self.created_dirs.is_empty()
            && self.validation.is_none()
            && self.ownership_before == self.ownership_after
    }
}

impl ShimState {
    /// Whether containerd was verified to serve this exact description.
    pub fn verified_for(&self, desired_hash: &str) -> bool {
        self.phase == Phase::Active && self.verified_hash.as_deref() == Some(desired_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::host::TestHost;

    #[test]
    fn round_trips_and_refuses_unknown_content() {
        let dir = tempfile::tempdir().unwrap();
        let host = TestHost::new(dir.path(), "/nonexistent");
        let path = Path::new("/var/lib/containerd-shim-installer/state.json");
        assert_eq!(State::load(&host, path).unwrap(), State::new());

        let mut state = State::new();
        state.shims.insert(
            "spin".into(),
            ShimState {
                handler: "spin".into(),
                desired_hash: "abc".into(),
                phase: Phase::Active,
                active: Some("v1-0123456789ab".into()),
                previous: vec![],
                verified_hash: Some("abc".into()),
                verified_at: Some(jiff::Timestamp::UNIX_EPOCH),
                last_error: None,
            },
        );
        state.config = Some(ConfigTxn {
            phase: TxnPhase::RollingBack {
                error: "boom".into(),
            },
            started_at: jiff::Timestamp::UNIX_EPOCH,
            rollback: vec![RollbackFile {
                path: "/etc/containerd/config.toml".into(),
                content: None,
            }],
            created_dirs: vec!["/etc/containerd/conf.d".into()],
            symlinks: BTreeMap::from([("spin".to_string(), None)]),
            ownership_before: Ownership::default(),
            ownership_after: Ownership::default(),
            validation: None,
            runtimes: vec![],
            shims: vec!["spin".into()],
        });
        state.store(&host, path).unwrap();
        assert_eq!(State::load(&host, path).unwrap(), state);
        assert!(state.shims["spin"].verified_for("abc"));
        assert!(!state.shims["spin"].verified_for("other"));
        assert!(!state.is_clean());
        assert!(State::new().is_clean());

        std::fs::write(host.path(path), "{").unwrap();
        let err = State::load(&host, path).unwrap_err().to_string();
        assert!(
            err.contains("state.json") && err.contains("move it away"),
            "{err}"
        );
        std::fs::write(host.path(path), r#"{"schema": 7}"#).unwrap();
        let err = State::load(&host, path).unwrap_err().to_string();
        assert!(err.contains("schema Some(7)"), "{err}");
    }
}
