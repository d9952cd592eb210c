//! Status types shared by all extension resources (`pkg/apis/core/v1beta1/types_common.go`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// Gardener error codes (`ErrorCode`). gardenlet treats the codes marked non-retryable as a
/// reason to stop retrying the shoot, so they must only be attached when they are true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    #[serde(rename = "ERR_INFRA_UNAUTHENTICATED")]
    InfraUnauthenticated,
    #[serde(rename = "ERR_INFRA_UNAUTHORIZED")]
    InfraUnauthorized,
    #[serde(rename = "ERR_INFRA_QUOTA_EXCEEDED")]
    InfraQuotaExceeded,
    #[serde(rename = "ERR_INFRA_RATE_LIMITS_EXCEEDED")]
    InfraRateLimitsExceeded,
    #[serde(rename = "ERR_INFRA_DEPENDENCIES")]
    InfraDependencies,
    #[serde(rename = "ERR_RETRYABLE_INFRA_DEPENDENCIES")]
    RetryableInfraDependencies,
    #[serde(rename = "ERR_INFRA_RESOURCES_DEPLETED")]
    InfraResourcesDepleted,
    #[serde(rename = "ERR_CLEANUP_CLUSTER_RESOURCES")]
    CleanupClusterResources,
    #[serde(rename = "ERR_CONFIGURATION_PROBLEM")]
    ConfigurationProblem,
    #[serde(rename = "ERR_RETRYABLE_CONFIGURATION_PROBLEM")]
    RetryableConfigurationProblem,
    #[serde(rename = "ERR_PROBLEMATIC_WEBHOOK")]
    ProblematicWebhook,
    /// A code this build does not know (a newer Gardener's): kept decodable so one foreign
    /// code cannot make a whole Extension unreadable for the watch.
    #[serde(other, rename = "ERR_UNKNOWN")]
    Unknown,
}

impl ErrorCode {
    /// The wire name, e.g. `ERR_CONFIGURATION_PROBLEM`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InfraUnauthenticated => "ERR_INFRA_UNAUTHENTICATED",
            ErrorCode::InfraUnauthorized => "ERR_INFRA_UNAUTHORIZED",
            ErrorCode::InfraQuotaExceeded => "ERR_INFRA_QUOTA_EXCEEDED",
            ErrorCode::InfraRateLimitsExceeded => "ERR_INFRA_RATE_LIMITS_EXCEEDED",
            ErrorCode::InfraDependencies => "ERR_INFRA_DEPENDENCIES",
            ErrorCode::RetryableInfraDependencies => "ERR_RETRYABLE_INFRA_DEPENDENCIES",
            ErrorCode::InfraResourcesDepleted => "ERR_INFRA_RESOURCES_DEPLETED",
            ErrorCode::CleanupClusterResources => "ERR_CLEANUP_CLUSTER_RESOURCES",
            ErrorCode::ConfigurationProblem => "ERR_CONFIGURATION_PROBLEM",
            ErrorCode::RetryableConfigurationProblem => "ERR_RETRYABLE_CONFIGURATION_PROBLEM",
            ErrorCode::ProblematicWebhook => "ERR_PROBLEMATIC_WEBHOOK",
            ErrorCode::Unknown => "ERR_UNKNOWN",
        }
    }

    /// Whether gardenlet stops retrying a shoot that reports this code
    /// (`HasNonRetryableErrorCode`).
    pub fn is_non_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::InfraUnauthenticated
                | ErrorCode::InfraUnauthorized
                | ErrorCode::InfraQuotaExceeded
                | ErrorCode::InfraRateLimitsExceeded
                | ErrorCode::InfraDependencies
                | ErrorCode::ConfigurationProblem
                | ErrorCode::ProblematicWebhook
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `LastOperationType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationType {
    Create,
    Reconcile,
    Delete,
    Migrate,
    Restore,
    LiveMigrate,
    /// A type this build does not know.
    #[serde(other)]
    Unknown,
}

impl OperationType {
    pub fn as_str(self) -> &'static str {
        match self {
            OperationType::Create => "Create",
            OperationType::Reconcile => "Reconcile",
            OperationType::Delete => "Delete",
            OperationType::Migrate => "Migrate",
            OperationType::Restore => "Restore",
            OperationType::LiveMigrate => "LiveMigrate",
            OperationType::Unknown => "Unknown",
        }
    }
}

/// `LastOperationState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationState {
    Processing,
    Succeeded,
    Error,
    Failed,
    Pending,
    Aborted,
    /// A state this build does not know.
    #[serde(other)]
    Unknown,
}

/// `status.lastOperation`; the CRD requires all five fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    pub description: String,
    pub last_update_time: Time,
    pub progress: i32,
    pub state: OperationState,
    #[serde(rename = "type")]
    pub type_: OperationType,
}

/// `status.lastError`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    pub description: String,
    #[serde(default, rename = "taskID", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// Gardener's condition status: Kubernetes' three values plus `Progressing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Progressing,
    /// Also what a status this build does not know decodes to.
    #[serde(other)]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_from_newer_gardeners_still_decode() {
        let codes: Vec<ErrorCode> =
            serde_json::from_str(r#"["ERR_CONFIGURATION_PROBLEM","ERR_SOMETHING_NEW"]"#).unwrap();
        assert_eq!(codes, [ErrorCode::ConfigurationProblem, ErrorCode::Unknown]);
        let op: LastOperation = serde_json::from_str(
            r#"{"description":"d","lastUpdateTime":"2026-01-01T00:00:00Z","progress":1,"state":"Paused","type":"Teleport"}"#,
        )
        .unwrap();
        assert_eq!(
            (op.type_, op.state),
            (OperationType::Unknown, OperationState::Unknown)
        );
    }
}

/// A Gardener condition (`v1beta1.Condition`): unlike Kubernetes' it has `lastUpdateTime` and
/// `codes`, and the CRD requires every field but `codes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub last_transition_time: Time,
    pub last_update_time: Time,
    pub reason: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<ErrorCode>,
}
