//! Errors of the reconciler layer.

use std::time::Duration;

use crate::gardener::api::cluster::ShootDecodeError;
use crate::gardener::api::{ErrorCode, OperationType};
use crate::gardener::error_codes::CodedError;

/// Why a reconcile failed. Every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("cannot {action} Extension {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read Namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("Cluster {namespace} not found for the Extension in shoot namespace {namespace}")]
    ClusterMissing { namespace: String },
    #[error("cannot read Cluster {namespace}: {source}")]
    ClusterRead {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    ClusterDecode(#[from] ShootDecodeError),
    /// The actuator failed; the Error status has been written.
    #[error("{operation:?} of Extension {object} failed: {message}")]
    Actuator {
        operation: OperationType,
        object: String,
        message: String,
        codes: Vec<ErrorCode>,
    },
    #[error("{operation:?} of Extension {object} timed out after {after:?}")]
    Timeout {
        operation: Option<OperationType>,
        object: String,
        after: Duration,
    },
}

impl ReconcileError {
    /// A stable, low-cardinality label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Kube { .. } | ReconcileError::Namespace { .. } => "api",
            ReconcileError::ClusterMissing { .. }
            | ReconcileError::ClusterRead { .. }
            | ReconcileError::ClusterDecode(_) => "cluster",
            ReconcileError::Actuator { .. } => "actuator",
            ReconcileError::Timeout { .. } => "timeout",
        }
    }
}

impl CodedError for ReconcileError {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ReconcileError::Actuator { codes, .. } => codes.clone(),
            _ => Vec::new(),
        }
    }
}
