//! From the aggregated checks of a condition type (or from hibernation) to what the condition
//! says: status, reason, message and codes.

use jiff::Timestamp;

use super::condition::ConditionUpdate;
use super::result::{Aggregate, AggregateHealth, checks_word};
use crate::gardener::api::{Condition, ConditionStatus};

/// Every check of the condition type was successful (also used while hibernated).
pub const REASON_SUCCESSFUL: &str = "HealthCheckSuccessful";
/// At least one check found something unhealthy.
pub const REASON_UNSUCCESSFUL: &str = "HealthCheckUnsuccessful";
/// A check is progressing and still within its threshold.
pub const REASON_PROGRESSING: &str = "HealthCheckProgressing";
/// At least one check could not be executed.
pub const REASON_CHECK_ERROR: &str = "ConditionCheckError";

pub const MESSAGE_SUCCESSFUL: &str = "All health checks successful";
pub const MESSAGE_HIBERNATED: &str = "Shoot is hibernated";

/// What the condition of `condition_type` says, given its checks and its previous state.
pub fn condition_update(
    condition_type: &str,
    aggregate: &Aggregate,
    old: Option<&Condition>,
    now: Timestamp,
) -> ConditionUpdate {
    let (status, reason, message, codes) = match aggregate.health {
        AggregateHealth::Healthy => (
            ConditionStatus::True,
            REASON_SUCCESSFUL,
            if aggregate.notes.is_empty() {
                MESSAGE_SUCCESSFUL.to_string()
            } else {
                format!("{MESSAGE_SUCCESSFUL}: {}", aggregate.notes.join("; "))
            },
            Vec::new(),
        ),
        // Health is unknown when a check could not run, even if another one found a problem:
        // gardenlet must not act on a report that may be incomplete.
        AggregateHealth::Unhealthy if aggregate.failed > 0 => (
            ConditionStatus::Unknown,
            REASON_CHECK_ERROR,
            format!(
                "failed to execute {} health {}: {}",
                aggregate.failed,
                checks_word(aggregate.failed),
                aggregate.detail
            ),
            Vec::new(),
        ),
        AggregateHealth::Unhealthy => (
            ConditionStatus::False,
            REASON_UNSUCCESSFUL,
            aggregate.detail.clone(),
            aggregate.codes.clone(),
        ),
        AggregateHealth::Progressing => {
            let (status, reason) = if may_stay_progressing(aggregate, old, now) {
                (ConditionStatus::Progressing, REASON_PROGRESSING)
            } else {
                (ConditionStatus::False, REASON_UNSUCCESSFUL)
            };
            (
                status,
                reason,
                aggregate.detail.clone(),
                aggregate.codes.clone(),
            )
        }
    };
    ConditionUpdate {
        condition_type: condition_type.to_string(),
        status,
        reason: reason.to_string(),
        message,
        codes,
    }
}

/// The progressing rule: a progressing condition type is reported `Progressing` only while its
/// threshold allows it, measured from the last status transition; after that, or without a
/// threshold, it is `False`, and once `False` it stays `False` until the checks recover.
///
/// Like Gardener's Go library, an old `Unknown` counts like an old `Progressing` (it is
/// measured against the threshold): a check that could not run for a moment does not turn a
/// rollout into a failure.
fn may_stay_progressing(aggregate: &Aggregate, old: Option<&Condition>, now: Timestamp) -> bool {
    let Some(threshold) = aggregate.threshold else {
        return false;
    };
    let Some(old) = old else {
        return true;
    };
    match old.status {
        ConditionStatus::True => true,
        ConditionStatus::False => false,
        ConditionStatus::Progressing | ConditionStatus::Unknown => {
            let since = now.duration_since(old.last_transition_time.0);
            // A transition time in the future (clock skew) counts as within the threshold.
            since.is_negative() || since.unsigned_abs() <= threshold
        }
    }
}

/// What every registered condition says while the shoot is hibernated: nothing runs, so
/// nothing can be unhealthy.
pub fn hibernated_update(condition_type: &str) -> ConditionUpdate {
    ConditionUpdate {
        condition_type: condition_type.to_string(),
        status: ConditionStatus::True,
        reason: REASON_SUCCESSFUL.to_string(),
        message: MESSAGE_HIBERNATED.to_string(),
        codes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gardener::api::ErrorCode;
    use crate::gardener::healthcheck::condition::build_condition;
    use crate::gardener::healthcheck::result::{CheckResult, aggregate};
    use ConditionStatus::*;

    const TYPE: &str = "SystemComponentsHealthy";

    #[test]
    fn notes_of_successful_checks_extend_the_success_message() {
        let results = [
            CheckResult::Successful,
            CheckResult::SuccessfulWithNote {
                note: "spin: 3/3 nodes verified".into(),
            },
        ];
        let update = condition_update(TYPE, &aggregate(&results), None, Timestamp::UNIX_EPOCH);
        assert_eq!(update.status, True);
        assert_eq!(
            update.message,
            "All health checks successful: spin: 3/3 nodes verified"
        );
        let plain = condition_update(
            TYPE,
            &aggregate(&[CheckResult::Successful]),
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(plain.message, MESSAGE_SUCCESSFUL);
    }

    fn at(minute: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minute * 60).unwrap()
    }

    fn old(status: ConditionStatus, since_minute: i64) -> Condition {
        build_condition(
            None,
            ConditionUpdate {
                condition_type: TYPE.into(),
                status,
                reason: "R".into(),
                message: "m".into(),
                codes: vec![],
            },
            at(since_minute),
        )
    }

    fn progressing(threshold: Option<u64>) -> Aggregate {
        aggregate(&[CheckResult::progressing(
            "rolling out",
            threshold.map(|m| Duration::from_secs(m * 60)),
        )
        .with_codes([ErrorCode::RetryableInfraDependencies])])
    }

    fn status(
        agg: &Aggregate,
        old: Option<&Condition>,
        now_minute: i64,
    ) -> (ConditionStatus, String) {
        let u = condition_update(TYPE, agg, old, at(now_minute));
        (u.status, u.reason)
    }

    #[test]
    fn healthy_is_true_with_the_fixed_message_and_no_codes() {
        let u = condition_update(TYPE, &aggregate(&[CheckResult::Successful]), None, at(0));
        assert_eq!(
            u,
            ConditionUpdate {
                condition_type: TYPE.into(),
                status: True,
                reason: REASON_SUCCESSFUL.into(),
                message: MESSAGE_SUCCESSFUL.into(),
                codes: vec![],
            }
        );
    }

    #[test]
    fn unsuccessful_is_false_with_details_and_codes() {
        let agg = aggregate(&[
            CheckResult::unsuccessful("bad").with_codes([ErrorCode::ConfigurationProblem])
        ]);
        let u = condition_update(TYPE, &agg, Some(&old(True, 0)), at(1));
        assert_eq!(
            (u.status, u.reason.as_str(), u.message.as_str()),
            (False, REASON_UNSUCCESSFUL, "bad.")
        );
        assert_eq!(u.codes, [ErrorCode::ConfigurationProblem]);
    }

    #[test]
    fn a_failed_check_makes_the_condition_unknown_without_codes() {
        let agg = aggregate(&[
            CheckResult::failed("timeout"),
            CheckResult::unsuccessful("bad").with_codes([ErrorCode::ConfigurationProblem]),
        ]);
        let u = condition_update(TYPE, &agg, None, at(0));
        assert_eq!((u.status, u.reason.as_str()), (Unknown, REASON_CHECK_ERROR));
        assert_eq!(
            u.message,
            "failed to execute 1 health check: Unable to execute check: timeout. Failed check: bad."
        );
        assert!(u.codes.is_empty());
        let two = aggregate(&[CheckResult::failed("a"), CheckResult::failed("b")]);
        assert_eq!(
            condition_update(TYPE, &two, None, at(0)).message,
            "failed to execute 2 health checks: 1) a. 2) b."
        );
    }

    #[test]
    fn t8b_progressing_with_a_threshold_and_no_old_condition_is_progressing() {
        let u = condition_update(TYPE, &progressing(Some(5)), None, at(0));
        assert_eq!(
            (u.status, u.reason.as_str()),
            (Progressing, REASON_PROGRESSING)
        );
        assert_eq!(u.message, "rolling out.");
        assert_eq!(u.codes, [ErrorCode::RetryableInfraDependencies]);
    }

    #[test]
    fn t8b_progressing_beyond_the_threshold_becomes_false() {
        let since = old(Progressing, 0);
        assert_eq!(
            status(&progressing(Some(5)), Some(&since), 6),
            (False, REASON_UNSUCCESSFUL.into())
        );
        assert_eq!(
            status(&progressing(Some(5)), Some(&since), 5),
            (Progressing, REASON_PROGRESSING.into())
        );
        assert_eq!(
            status(&progressing(Some(5)), Some(&since), 4),
            (Progressing, REASON_PROGRESSING.into())
        );
    }

    #[test]
    fn t8b_progressing_without_a_threshold_is_false_at_once() {
        for previous in [None, Some(old(True, 0)), Some(old(Progressing, 0))] {
            assert_eq!(
                status(&progressing(None), previous.as_ref(), 0),
                (False, REASON_UNSUCCESSFUL.into())
            );
        }
    }

    #[test]
    fn progressing_after_true_is_progressing_however_long_true_lasted() {
        assert_eq!(
            status(&progressing(Some(5)), Some(&old(True, 0)), 600),
            (Progressing, REASON_PROGRESSING.into())
        );
    }

    #[test]
    fn never_back_from_false_to_progressing() {
        assert_eq!(
            status(&progressing(Some(5)), Some(&old(False, 0)), 0),
            (False, REASON_UNSUCCESSFUL.into())
        );
    }

    #[test]
    fn an_old_unknown_is_measured_against_the_threshold_like_progressing() {
        assert_eq!(
            status(&progressing(Some(5)), Some(&old(Unknown, 0)), 3),
            (Progressing, REASON_PROGRESSING.into())
        );
        assert_eq!(
            status(&progressing(Some(5)), Some(&old(Unknown, 0)), 6),
            (False, REASON_UNSUCCESSFUL.into())
        );
    }

    #[test]
    fn a_transition_time_in_the_future_is_within_the_threshold() {
        assert_eq!(
            status(&progressing(Some(5)), Some(&old(Progressing, 10)), 0),
            (Progressing, REASON_PROGRESSING.into())
        );
    }

    #[test]
    fn a_progressing_condition_keeps_its_transition_time_until_it_turns_false() {
        let agg = progressing(Some(5));
        let first = build_condition(None, condition_update(TYPE, &agg, None, at(0)), at(0));
        let later = build_condition(
            Some(&first),
            condition_update(TYPE, &agg, Some(&first), at(3)),
            at(3),
        );
        assert_eq!(
            later, first,
            "steady progressing within the threshold writes nothing"
        );
        let expired = build_condition(
            Some(&later),
            condition_update(TYPE, &agg, Some(&later), at(6)),
            at(6),
        );
        assert_eq!(
            (expired.status, expired.last_transition_time.0),
            (False, at(6))
        );
        let stays = build_condition(
            Some(&expired),
            condition_update(TYPE, &agg, Some(&expired), at(7)),
            at(7),
        );
        assert_eq!(stays, expired);
    }

    #[test]
    fn hibernated_is_true_with_its_own_message() {
        let u = hibernated_update("ControlPlaneHealthy");
        assert_eq!(
            (
                u.condition_type.as_str(),
                u.status,
                u.reason.as_str(),
                u.message.as_str()
            ),
            (
                "ControlPlaneHealthy",
                True,
                REASON_SUCCESSFUL,
                MESSAGE_HIBERNATED
            )
        );
        assert!(u.codes.is_empty());
    }
}
