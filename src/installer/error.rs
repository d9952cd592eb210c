//! The installer's error type. Every message says what failed and where (host path, URL, shim,
//! handler), because the operator reads it in the pod log or the status file on a node, not in
//! a debugger.

use std::path::PathBuf;

use super::containerd::ConfigError;

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

    #[error("host command `{command}` failed: {message}")]
    Command { command: String, message: String },

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

    #[error("download of {url} failed: {message}")]
    Download { url: String, message: String },

    #[error("shim {shim}: {message}")]
    InvalidShim { shim: String, message: String },

    #[error("cannot read the desired shim set {path}: {message}")]
    Desired { path: PathBuf, message: String },

    #[error("state file {path}: {message}")]
    State { path: PathBuf, message: String },

    #[error("Kubernetes API: {0}")]
    Cluster(String),

    #[error(
        "containerd did not come back healthy with the new configuration: {verify}; the previous \
         configuration was restored{rollback}"
    )]
    RestartFailed { verify: String, rollback: String },

    #[error("run interrupted at step {0} (fault injection)")]
    Interrupted(usize),
}

impl InstallerError {
    /// Wraps an I/O error of a host operation with what was attempted where.
    pub fn host(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        InstallerError::Host {
            action,
            path: path.into(),
            source,
        }
    }
}
