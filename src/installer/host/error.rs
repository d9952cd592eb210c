//! Why a host command or a containerd service operation failed. The messages reach the operator
//! through the Node's failures annotation and the installer's log, so each one names the
//! command as it ran, how it ended and what it printed; the fields keep the same facts for code
//! that decides on them (a missing `crictl` is not a failure, a timeout is).

use std::path::PathBuf;
use std::process::{ExitStatus, Output};
use std::time::Duration;

use crate::installer::containerd::ConfigError;

/// A failed host command, or a containerd that does not serve what it should.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("empty command")]
    EmptyCommand,

    #[error("cannot open {} (needs hostPID and SYS_PTRACE): {source}", .path.display())]
    MountNamespace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The program could not be started: not installed on the host, not executable, or the
    /// mount namespace could not be joined.
    #[error("cannot start `{}` on the host: {source}", .argv.join(" "))]
    Spawn {
        argv: Vec<String>,
        #[source]
        source: std::io::Error,
    },

    #[error("`{}`: {source}", .argv.join(" "))]
    Wait {
        argv: Vec<String>,
        #[source]
        source: std::io::Error,
    },

    #[error("`{}`: did not finish within {timeout:?}; killed", .argv.join(" "))]
    TimedOut {
        argv: Vec<String>,
        timeout: Duration,
    },

    #[error("`{}` exited with {status}: {stderr}", .argv.join(" "))]
    Exited {
        argv: Vec<String>,
        status: ExitStatus,
        /// What the command printed on stderr, trimmed.
        stderr: String,
    },

    #[error("`{command}` is not JSON: {source}")]
    NotJson {
        command: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("{} is not UTF-8", .path.display())]
    PathNotUtf8 { path: PathBuf },

    #[error("systemd unit {unit} is {state:?}")]
    UnitInactive { unit: String, state: String },

    #[error("the CRI does not report RuntimeReady")]
    RuntimeNotReady,

    #[error("the CRI does not report runtime handler {handler}")]
    HandlerMissing { handler: String },

    #[error(
        "the CRI reports runtime handler {handler} with runtimeType {actual:?}, expected {expected:?}"
    )]
    HandlerType {
        handler: String,
        actual: Option<String>,
        expected: String,
    },

    #[error("containerd could not start a pod sandbox with runtime handler {handler}: {stderr}")]
    SandboxFailed {
        handler: String,
        status: ExitStatus,
        /// `crictl runp`'s stderr, trimmed.
        stderr: String,
    },

    /// `crictl` could not be started and the check without it failed too; both are kept
    /// because either may be what the operator has to fix.
    #[error("{crictl}; fallback {fallback}")]
    Fallback {
        crictl: Box<HostError>,
        #[source]
        fallback: Box<HostError>,
    },

    #[error(transparent)]
    Config(#[from] ConfigError),

    #[error("the configuration as it is now does not load (exit code {exit_code:?}): {stderr}")]
    ConfigDoesNotLoad {
        exit_code: Option<i32>,
        stderr: String,
    },

    #[error("{last} (still after {waited:?})")]
    StillFailing {
        #[source]
        last: Box<HostError>,
        waited: Duration,
    },

    #[error("the host operation did not complete: {0}")]
    Aborted(#[source] tokio::task::JoinError),

    // ----- the test host's simulated containerd -----
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("containerd does not start with {}: {stderr}", .config.display())]
    DoesNotStart { config: PathBuf, stderr: String },

    #[error("containerd is not running")]
    NotRunning,

    #[error("the running containerd: {0}")]
    RunningConfig(#[source] ConfigError),

    #[error("{0}")]
    Scripted(String),
}

impl HostError {
    /// The command ran and exited unsuccessfully.
    pub fn exited(argv: &[&str], output: &Output) -> Self {
        HostError::Exited {
            argv: owned(argv),
            status: output.status,
            stderr: stderr_of(output),
        }
    }

    /// Whether the command was never started, as when the host lacks the program.
    pub fn not_started(&self) -> bool {
        matches!(self, HostError::Spawn { .. })
    }
}

pub(super) fn owned(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|arg| (*arg).to_string()).collect()
}

pub(super) fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}
