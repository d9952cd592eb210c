//! The status the reconciler writes (gardener-contract.md §1.9): Processing, Error and Success,
//! as JSON merge patches of exactly the fields the primary controller owns. `conditions`
//! belong to the health-check controller and are never part of these patches.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::gardener::api::{ErrorCode, LastError, LastOperation, OperationState, OperationType};

/// Progress values Gardener's status updater writes.
pub const PROGRESS_PROCESSING: i32 = 1;
pub const PROGRESS_ERROR: i32 = 50;
pub const PROGRESS_SUCCEEDED: i32 = 100;

/// `metav1.Time` has second precision on the wire; truncating here keeps what we write equal to
/// what we read back, so comparisons against gardenlet's timestamp behave as in Go.
pub fn now() -> Time {
    let ts = Timestamp::now();
    Time(Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

/// The time to record for a status write of `ext`: now, but never earlier than the second of
/// gardenlet's `gardener.cloud/timestamp` annotation.
///
/// gardenlet accepts a success only if `lastUpdateTime >= truncate_to_second(timestamp)`. The
/// timestamp comes from gardenlet's clock; when that clock runs ahead of ours, a fast reconcile
/// would record a time before the request and gardenlet would wait for a reconcile that never
/// comes (the annotation is already gone). Every status written here is caused by that request,
/// so dating it no earlier than the request is true. A timestamp more than
/// [`MAX_CLOCK_SKEW`] ahead is not trusted.
pub fn status_time(timestamp_annotation: Option<&str>) -> Time {
    let now = now();
    let Some(requested) = timestamp_annotation.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return now;
    };
    let requested = Timestamp::from_second(requested.as_second()).unwrap_or(requested);
    let limit = now.0.checked_add(MAX_CLOCK_SKEW).unwrap_or(now.0);
    if requested > now.0 && requested <= limit {
        Time(requested)
    } else {
        now
    }
}

/// The largest clock difference to gardenlet that [`status_time`] compensates.
pub const MAX_CLOCK_SKEW: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

fn last_operation(
    type_: OperationType,
    state: OperationState,
    progress: i32,
    description: &str,
    now: &Time,
) -> LastOperation {
    LastOperation {
        description: description.to_string(),
        last_update_time: now.clone(),
        progress,
        state,
        type_,
    }
}

/// `Processing`: lastError and observedGeneration stay as they are (a stale error remains
/// visible while the next attempt runs).
pub fn processing(type_: OperationType, description: &str, now: &Time) -> Value {
    json!({"status": {
        "lastOperation": last_operation(type_, OperationState::Processing, PROGRESS_PROCESSING, description, now),
    }})
}

/// `Error`: the description is `"<description>: <error>"` with the first letter upper-cased,
/// in both lastOperation and lastError.
pub fn error(
    type_: OperationType,
    description: &str,
    cause: &str,
    codes: &[ErrorCode],
    generation: i64,
    now: &Time,
) -> Value {
    let text = format_error_description(description, cause);
    let last_error = LastError {
        description: text.clone(),
        task_id: None,
        codes: codes.to_vec(),
        last_update_time: Some(now.clone()),
    };
    json!({"status": {
        "lastOperation": last_operation(type_, OperationState::Error, PROGRESS_ERROR, &text, now),
        "lastError": last_error,
        "observedGeneration": generation,
    }})
}

/// `Success`: lastError is removed.
pub fn success(type_: OperationType, description: &str, generation: i64, now: &Time) -> Value {
    json!({"status": {
        "lastOperation": last_operation(type_, OperationState::Succeeded, PROGRESS_SUCCEEDED, description, now),
        "lastError": null,
        "observedGeneration": generation,
    }})
}

/// `FormatLastErrDescription(fmt.Errorf("%s: %v", description, err))`.
pub fn format_error_description(description: &str, cause: &str) -> String {
    upper_first(&format!("{description}: {cause}"))
}

/// Upper-cases the first character, as Gardener does for error descriptions.
pub fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Codes in the order found, without duplicates (gardenlet does not care about order, but a
/// stable order keeps the status from changing between identical errors).
pub fn dedup_codes(codes: impl IntoIterator<Item = ErrorCode>) -> Vec<ErrorCode> {
    let mut out: Vec<ErrorCode> = Vec::new();
    for c in codes {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The descriptions of each path (§1.8).
pub mod descriptions {
    pub const RECONCILE_PROCESSING: &str = "Reconciling the Extension";
    pub const RECONCILE_ERROR: &str = "Error reconciling Extension";
    pub const RECONCILE_SUCCESS: &str = "Successfully reconciled Extension";
    pub const DELETE_PROCESSING: &str = "Deleting the Extension";
    pub const DELETE_ERROR: &str = "Error deleting the Extension";
    pub const DELETE_SUCCESS: &str = "Successfully deleted the Extension";
    pub const RESTORE_PROCESSING: &str = "Restoring Extension resource";
    pub const RESTORE_ERROR: &str = "Unable to restore Extension resource";
    pub const RESTORE_SUCCESS: &str = "Successfully restored Extension resource";
    pub const MIGRATE_PROCESSING: &str = "Migrate Extension resource.";
    pub const MIGRATE_ERROR: &str = "Error migrating Extension resource";
    pub const MIGRATE_SUCCESS: &str = "Successfully migrated Extension resource";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Time {
        Time(Timestamp::from_second(1_767_225_600).unwrap())
    }

    #[test]
    fn processing_touches_only_last_operation() {
        let p = processing(
            OperationType::Create,
            descriptions::RECONCILE_PROCESSING,
            &t(),
        );
        assert_eq!(
            p,
            json!({"status": {"lastOperation": {
                "description": "Reconciling the Extension", "lastUpdateTime": "2026-01-01T00:00:00Z",
                "progress": 1, "state": "Processing", "type": "Create"}}})
        );
    }

    #[test]
    fn error_carries_codes_generation_and_capitalised_description() {
        let e = error(
            OperationType::Reconcile,
            descriptions::RECONCILE_ERROR,
            "boom",
            &[ErrorCode::ConfigurationProblem],
            3,
            &t(),
        );
        let status = &e["status"];
        assert_eq!(
            status["lastOperation"]["description"],
            "Error reconciling Extension: boom"
        );
        assert_eq!(status["lastOperation"]["progress"], 50);
        assert_eq!(status["lastOperation"]["state"], "Error");
        assert_eq!(
            status["lastError"]["description"],
            "Error reconciling Extension: boom"
        );
        assert_eq!(
            status["lastError"]["codes"],
            json!(["ERR_CONFIGURATION_PROBLEM"])
        );
        assert_eq!(status["observedGeneration"], 3);
        assert!(status.get("conditions").is_none());
    }

    #[test]
    fn success_clears_last_error() {
        let s = success(OperationType::Delete, descriptions::DELETE_SUCCESS, 7, &t());
        assert_eq!(s["status"]["lastError"], Value::Null);
        assert!(s["status"].as_object().unwrap().contains_key("lastError"));
        assert_eq!(s["status"]["lastOperation"]["progress"], 100);
        assert_eq!(s["status"]["observedGeneration"], 7);
    }

    #[test]
    fn upper_first_handles_unicode_and_empty() {
        assert_eq!(upper_first("éclair"), "Éclair");
        assert_eq!(upper_first(""), "");
        assert_eq!(format_error_description("error x", "y"), "Error x: y");
    }

    #[test]
    fn status_time_is_never_before_the_requested_second() {
        let now = now();
        let ahead = (now.0 + jiff::SignedDuration::from_millis(1700)).to_string();
        let t = status_time(Some(&ahead));
        assert_eq!(t.0.as_second(), now.0.as_second() + 1);
        let behind = (now.0 - jiff::SignedDuration::from_secs(30)).to_string();
        assert!(status_time(Some(&behind)).0 >= now.0);
        let absurd = (now.0 + jiff::SignedDuration::from_secs(3600)).to_string();
        assert!(status_time(Some(&absurd)).0 < now.0 + jiff::SignedDuration::from_secs(5));
        assert!(status_time(Some("not a time")).0 >= now.0);
        assert!(status_time(None).0 >= now.0);
    }

    #[test]
    fn now_has_second_precision() {
        let n = now();
        assert_eq!(n.0.subsec_nanosecond(), 0);
    }
}
