//! Errors of the health-check layer.

use std::time::Duration;

use crate::gardener::api::ErrorCode;
use crate::gardener::api::cluster::ShootDecodeError;
use crate::gardener::error_codes::CodedError;

#[derive(Debug, thiserror::Error)]
pub enum HealthCheckError {
    /// The configuration passed to [`run`](super::run) cannot work; nothing was started.
    #[error("invalid health check configuration: {0}")]
    InvalidConfig(String),

    /// A shoot-class Extension whose namespace has no Cluster (yet): retried with backoff, and
    /// the Cluster's arrival triggers a check as well.
    #[error("no Cluster {namespace} for the Extension {namespace}/{name}")]
    ClusterNotFound { namespace: String, name: String },

    #[error(transparent)]
    ShootDecode(#[from] ShootDecodeError),

    #[error("writing the conditions of Extension {namespace}/{name}: {source}")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    /// The Extension kept changing while the conditions were written: each write, and each
    /// one after reading the Extension again, was refused. The check is retried later.
    #[error(
        "writing the conditions of Extension {namespace}/{name}: it changed meanwhile; checking again"
    )]
    Conflict { namespace: String, name: String },

    #[error("health check of Extension {namespace}/{name} did not finish within {timeout:?}")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
}

impl CodedError for HealthCheckError {
    /// Health-check errors never reach `lastError`; they are logged and retried.
    fn codes(&self) -> Vec<ErrorCode> {
        Vec::new()
    }
}
