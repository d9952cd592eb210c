//! The one error type of the process runtime.

use std::time::Duration;

/// Why the runtime could not start, or why it stopped with a failure. Every variant that comes
/// from a flag names the flag and the value, so a misconfigured deployment says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A flag has a value the runtime cannot work with.
    #[error("invalid value {value:?} for {flag}: {reason}")]
    InvalidFlag {
        flag: &'static str,
        value: String,
        reason: String,
    },

    /// A flag that the enabled features need is missing.
    #[error("{flag} is required {why}")]
    MissingFlag { flag: &'static str, why: String },

    /// `--controllers` or `--disable-controllers` names a controller this extension does not
    /// have. Go extensions refuse to start in this case as well: a typo would otherwise
    /// silently leave a controller running or stopped.
    #[error("unknown controller {name:?} in {flag}; known controllers: {known}")]
    UnknownController {
        flag: &'static str,
        name: String,
        known: String,
    },

    /// A controller was added that is not among the names given to `Manager::new`.
    #[error("controller {name:?} is not one of the known controllers ({known})")]
    UnregisteredController { name: String, known: String },

    /// The same controller was added twice.
    #[error("controller {name:?} was added twice")]
    DuplicateController { name: String },

    /// The kubeconfig named by `--kubeconfig` (or `$KUBECONFIG`) cannot be used.
    #[error("cannot load the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },

    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error(
        "cannot find a Kubernetes client configuration (no --kubeconfig, no $KUBECONFIG or \
         ~/.kube/config, and not running in a cluster): {0}"
    )]
    InferConfig(#[source] kube::config::InferConfigError),

    /// The Kubernetes client cannot be built from the configuration.
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),

    /// Logging was initialised twice, or its filter is invalid.
    #[error("cannot initialise logging: {0}")]
    Logging(String),

    /// A signal handler cannot be installed.
    #[error("cannot listen for {signal}: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A server cannot listen on its address (in use, not local, no permission).
    #[error("cannot listen on {address} for the {server} server: {source}")]
    Bind {
        server: &'static str,
        address: String,
        #[source]
        source: std::io::Error,
    },

    /// A server stopped serving while the process was running.
    #[error("the {server} server on {address} failed: {reason}")]
    Server {
        server: &'static str,
        address: String,
        reason: String,
    },

    /// This replica was the leader and is no longer, or can no longer prove it is. The process
    /// must exit: another replica may already be reconciling.
    #[error("leader election lost: {0}")]
    LeadershipLost(String),

    /// Leader election stopped working before this replica became the leader.
    #[error("leader election failed: {0}")]
    LeaderElection(String),

    /// A controller task panicked.
    #[error("controller {name:?} panicked: {message}")]
    ControllerPanicked { name: &'static str, message: String },

    /// A controller returned while the process was not shutting down; controllers run until
    /// they are told to stop.
    #[error("controller {name:?} stopped although the process is not shutting down")]
    ControllerExited { name: &'static str },

    /// Controllers did not stop within the graceful-shutdown timeout and were aborted.
    #[error("controllers {names} did not stop within {timeout:?} and were aborted")]
    ShutdownTimeout { names: String, timeout: Duration },
}
