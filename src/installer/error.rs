//! The installer's error type. Every message says what failed and where (host path, URL, shim,
//! handler), because the operator reads it in the pod log or the status file on a node, not in
//! a debugger.

use std::path::PathBuf;

use super::containerd::ConfigError;
use super::download::DownloadError;
use super::host::HostError;

/// Why a converge run stopped.
#[derive(Debug, thiserror::Error)]
pub enum InstallerError {
    #[error(transparent)]
    Config(#[from] ConfigError),

    #[error("{action} {path}: {source}")]
    Host {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{path} is not writable ({reason}); the installer needs to write {purpose} there and \
         changed nothing"
    )]
    ReadOnly {
        path: PathBuf,
        purpose: String,
        reason: String,
    },

    #[error("host command `{command}` failed: {source}")]
    Command {
        command: String,
        #[source]
        source: Box<HostError>,
    },

    #[error(
        "shim {shim}: binary {binary} from {source_desc} has sha256 {actual}, expected {expected}; \
         nothing was installed"
    )]
    ChecksumMismatch {
        shim: String,
        binary: String,
        source_desc: String,
        expected: String,
        actual: String,
    },

    #[error("shim {shim}: binary {binary}: {message}")]
    Payload {
        shim: String,
        binary: String,
        message: String,
    },

    #[error("download of {url} failed: {source}")]
    Download {
        url: String,
        #[source]
        source: DownloadError,
    },

    #[error("shim {shim}: {message}")]
    InvalidShim { shim: String, message: String },

    #[error("cannot read the desired shim set {path}: {message}")]
    Desired { path: PathBuf, message: String },

    #[error("state file {path}: {message}")]
    State { path: PathBuf, message: String },

    #[error("Kubernetes API: {action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("Kubernetes API: {0}")]
    Cluster(String),

    #[error(
        "containerd did not come back healthy with the new configuration: {verify}; the previous \
         configuration was restored{}",
        not_recovered(.rollback)
    )]
    RestartFailed {
        /// Why the new configuration failed. Text, because an interrupted rollback records it
        /// in the state file and the next run finishes the rollback with it.
        verify: String,
        /// Why containerd did not come back with the restored configuration either.
        #[source]
        rollback: Option<Box<RestartError>>,
    },

    #[error(
        "a new shim version failed verification and was swapped back; the earlier version \
         serves again: {error}"
    )]
    SwappedBack {
        /// The swaps (shim, version, the version it replaced) and why they failed. Text, because
        /// an interrupted swap back records it in the state file and the next run finishes the
        /// swap back with it.
        error: String,
    },

    #[error(
        "containerd did not come back healthy: {verify}; after a restart: {restart} (the \
         configuration had not changed)"
    )]
    RepairFailed {
        verify: Box<HostError>,
        #[source]
        restart: Box<RestartError>,
    },

    /// Fault injection of crash tests (`Installer::kill_at`).
    #[cfg(any(test, feature = "test-util"))]
    #[error("run interrupted at step {0} (fault injection)")]
    Interrupted(usize),
}

/// Why containerd did not serve again after a restart.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("restarting containerd: {0}")]
    Restart(#[source] HostError),

    /// It restarted but does not serve the expected runtimes.
    #[error(transparent)]
    Verify(HostError),
}

fn not_recovered(rollback: &Option<Box<RestartError>>) -> String {
    match rollback {
        None => String::new(),
        Some(err) => format!(", but containerd did not recover with it either: {err}"),
    }
}

impl InstallerError {
    /// Wraps the failure of a host command with the command as the operator would run it.
    pub fn command(command: impl Into<String>, source: HostError) -> Self {
        InstallerError::Command {
            command: command.into(),
            source: Box::new(source),
        }
    }

    /// Wraps an I/O error of a host operation with what was attempted where.
    pub fn host(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        InstallerError::Host {
            action,
            path: path.into(),
            source,
        }
    }
}
