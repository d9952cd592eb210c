//! Gardener's condition builder and condition merge, as pure functions over values.
//!
//! gardenlet compares condition times to decide whether a report is fresh and how long a
//! state has lasted, so the times must move only when the meaning changes:
//! `lastTransitionTime` when the status changes, `lastUpdateTime` when reason, message or
//! codes change. A steady state therefore produces a condition equal to the old one, which is
//! what lets the controller skip writes entirely.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::gardener::api::{Condition, ConditionStatus, ErrorCode};

/// Written instead of an empty reason, so that the next update does not toggle back to "".
pub const UNSPECIFIED_REASON: &str = "Unspecified";
/// Written instead of an empty message, for the same reason.
pub const NO_MESSAGE: &str = "No message given.";

/// What a condition should say, without its times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionUpdate {
    pub condition_type: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub codes: Vec<ErrorCode>,
}

/// The current time at the precision the API stores (`metav1.Time` has whole seconds), so a
/// condition read back compares equal to the one written.
pub fn now_in_seconds() -> Timestamp {
    truncate_to_seconds(Timestamp::now())
}

/// Drops the sub-second part of `ts`.
pub fn truncate_to_seconds(ts: Timestamp) -> Timestamp {
    // Every whole second of a valid Timestamp is itself valid, so this cannot fail; the
    // fallback keeps the function total anyway.
    Timestamp::from_second(ts.as_second()).unwrap_or(ts)
}

/// Builds the condition `update` describes, carrying the times over from `old` (a condition of
/// the same type, if there was one) unless the rules say they move to `now`.
pub fn build_condition(
    old: Option<&Condition>,
    update: ConditionUpdate,
    now: Timestamp,
) -> Condition {
    let reason = non_empty_or(update.reason, UNSPECIFIED_REASON);
    let message = non_empty_or(update.message, NO_MESSAGE);
    let now = Time(now);
    let Some(old) = old else {
        return Condition {
            type_: update.condition_type,
            status: update.status,
            last_transition_time: now.clone(),
            last_update_time: now,
            reason,
            message,
            codes: update.codes,
        };
    };
    let last_transition_time = if old.status == update.status {
        old.last_transition_time.clone()
    } else {
        now.clone()
    };
    let last_update_time =
        if old.reason == reason && old.message == message && old.codes == update.codes {
            old.last_update_time.clone()
        } else {
            now
        };
    Condition {
        type_: update.condition_type,
        status: update.status,
        last_transition_time,
        last_update_time,
        reason,
        message,
        codes: update.codes,
    }
}

fn non_empty_or(value: String, fallback: &str) -> String {
    if value.is_empty() {
        fallback.to_string()
    } else {
        value
    }
}

/// The condition of type `condition_type` in `conditions`, if any.
pub fn find<'a>(conditions: &'a [Condition], condition_type: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == condition_type)
}

/// `existing` with every condition of `updates` replacing the one of the same type in place,
/// or appended when there is none; conditions of other types are kept as they are.
pub fn merge_conditions(
    existing: &[Condition],
    updates: impl IntoIterator<Item = Condition>,
) -> Vec<Condition> {
    let mut merged = existing.to_vec();
    for update in updates {
        match merged.iter_mut().find(|c| c.type_ == update.type_) {
            Some(slot) => *slot = update,
            None => merged.push(update),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn update(
        status: ConditionStatus,
        reason: &str,
        message: &str,
        codes: &[ErrorCode],
    ) -> ConditionUpdate {
        ConditionUpdate {
            condition_type: "SystemComponentsHealthy".into(),
            status,
            reason: reason.into(),
            message: message.into(),
            codes: codes.to_vec(),
        }
    }

    fn old() -> Condition {
        build_condition(
            None,
            update(True, "HealthCheckSuccessful", "fine", &[]),
            at(0),
        )
    }

    #[test]
    fn a_new_condition_gets_both_times_set_to_now() {
        let c = old();
        assert_eq!(c.last_transition_time, Time(at(0)));
        assert_eq!(c.last_update_time, Time(at(0)));
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (True, "HealthCheckSuccessful", "fine")
        );
        assert_eq!(c.type_, "SystemComponentsHealthy");
    }

    #[test]
    fn nothing_changed_keeps_the_condition_identical() {
        let old = old();
        let new = build_condition(
            Some(&old),
            update(True, "HealthCheckSuccessful", "fine", &[]),
            at(600),
        );
        assert_eq!(new, old);
    }

    #[test]
    fn t8c_changed_message_with_same_status_moves_only_the_update_time() {
        let old = old();
        let new = build_condition(
            Some(&old),
            update(True, "HealthCheckSuccessful", "still fine", &[]),
            at(60),
        );
        assert_eq!(new.last_transition_time, Time(at(0)));
        assert_eq!(new.last_update_time, Time(at(60)));
        assert_eq!(new.message, "still fine");
    }

    #[test]
    fn t8c_status_change_moves_the_transition_time() {
        let old = old();
        let new = build_condition(
            Some(&old),
            update(False, "HealthCheckSuccessful", "fine", &[]),
            at(60),
        );
        assert_eq!(new.last_transition_time, Time(at(60)));
        assert_eq!(
            new.last_update_time,
            Time(at(0)),
            "reason, message and codes are unchanged"
        );
        let both = build_condition(
            Some(&old),
            update(False, "HealthCheckUnsuccessful", "broken", &[]),
            at(90),
        );
        assert_eq!(both.last_transition_time, Time(at(90)));
        assert_eq!(both.last_update_time, Time(at(90)));
    }

    #[test]
    fn changed_reason_or_codes_move_the_update_time() {
        let old = old();
        let reason = build_condition(Some(&old), update(True, "Other", "fine", &[]), at(5));
        assert_eq!(
            (reason.last_transition_time.0, reason.last_update_time.0),
            (at(0), at(5))
        );
        let codes = build_condition(
            Some(&old),
            update(
                True,
                "HealthCheckSuccessful",
                "fine",
                &[ErrorCode::ConfigurationProblem],
            ),
            at(7),
        );
        assert_eq!(
            (codes.last_transition_time.0, codes.last_update_time.0),
            (at(0), at(7))
        );
        assert_eq!(codes.codes, [ErrorCode::ConfigurationProblem]);
        let cleared = build_condition(
            Some(&codes),
            update(True, "HealthCheckSuccessful", "fine", &[]),
            at(9),
        );
        assert_eq!(
            cleared.last_update_time.0,
            at(9),
            "dropping codes is a change too"
        );
        assert!(cleared.codes.is_empty());
    }

    #[test]
    fn empty_reason_and_message_are_replaced() {
        let c = build_condition(None, update(Unknown, "", "", &[]), at(0));
        assert_eq!(c.reason, UNSPECIFIED_REASON);
        assert_eq!(c.message, NO_MESSAGE);
        // Rebuilding from the same empty input is a steady state, not an update.
        let again = build_condition(Some(&c), update(Unknown, "", "", &[]), at(30));
        assert_eq!(again, c);
    }

    #[test]
    fn the_type_comes_from_the_update() {
        let mut foreign = old();
        foreign.type_ = "Other".into();
        let c = build_condition(
            Some(&foreign),
            update(True, "HealthCheckSuccessful", "fine", &[]),
            at(1),
        );
        assert_eq!(c.type_, "SystemComponentsHealthy");
    }

    #[test]
    fn merge_replaces_in_place_and_keeps_the_others() {
        let mk = |t: &str, m: &str| {
            let mut c = old();
            c.type_ = t.into();
            c.message = m.into();
            c
        };
        let existing = vec![mk("A", "a"), mk("B", "b"), mk("C", "c")];
        let merged = merge_conditions(&existing, [mk("B", "b2"), mk("D", "d")]);
        let view: Vec<_> = merged
            .iter()
            .map(|c| (c.type_.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(view, [("A", "a"), ("B", "b2"), ("C", "c"), ("D", "d")]);
        assert_eq!(merge_conditions(&existing, []), existing);
        assert_eq!(find(&merged, "D").map(|c| c.message.as_str()), Some("d"));
        assert!(find(&merged, "E").is_none());
    }

    #[test]
    fn now_has_whole_seconds() {
        let now = now_in_seconds();
        assert_eq!(now.subsec_nanosecond(), 0);
        let ts = Timestamp::from_second(100).unwrap() + jiff::SignedDuration::from_millis(999);
        assert_eq!(
            truncate_to_seconds(ts),
            Timestamp::from_second(100).unwrap()
        );
    }
}
