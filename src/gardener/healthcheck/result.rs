//! Results of single health checks and their aggregation per condition type.
//!
//! The aggregation is deterministic: results are taken in registration order, so the same
//! situation always yields the same message and codes. (Gardener's Go library collects them
//! from a channel in completion order, so its message can reorder between two runs and move
//! `lastUpdateTime` without any change in health.)

use std::time::Duration;

use crate::gardener::api::ErrorCode;

/// What one health check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckResult {
    /// Everything the check looks at is healthy.
    Successful,
    /// Healthy, with a fact worth showing in the condition message (for example how many
    /// nodes serve a runtime).
    SuccessfulWithNote { note: String },
    /// Something is unhealthy; `detail` says what.
    Unsuccessful {
        detail: String,
        codes: Vec<ErrorCode>,
    },
    /// Something is still rolling out. With a `threshold`, the condition may stay `Progressing`
    /// for that long before it becomes `False`; without one it is `False` at once.
    Progressing {
        detail: String,
        codes: Vec<ErrorCode>,
        threshold: Option<Duration>,
    },
    /// The check could not be executed (API error, timeout); health is unknown.
    Failed { detail: String },
}

impl CheckResult {
    pub fn unsuccessful(detail: impl Into<String>) -> CheckResult {
        CheckResult::Unsuccessful {
            detail: detail.into(),
            codes: Vec::new(),
        }
    }

    pub fn progressing(detail: impl Into<String>, threshold: Option<Duration>) -> CheckResult {
        CheckResult::Progressing {
            detail: detail.into(),
            codes: Vec::new(),
            threshold,
        }
    }

    pub fn failed(error: impl std::fmt::Display) -> CheckResult {
        CheckResult::Failed {
            detail: error.to_string(),
        }
    }

    /// Attaches error codes. Only unsuccessful and progressing results carry codes into the
    /// condition; on the other variants this does nothing.
    pub fn with_codes(mut self, new: impl IntoIterator<Item = ErrorCode>) -> CheckResult {
        if let CheckResult::Unsuccessful { codes, .. } | CheckResult::Progressing { codes, .. } =
            &mut self
        {
            codes.extend(new);
        }
        self
    }
}

/// The combined health of all checks of one condition type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateHealth {
    /// Every check was successful.
    Healthy,
    /// At least one check was unsuccessful or could not be executed.
    Unhealthy,
    /// No check was unhealthy, but at least one is progressing.
    Progressing,
}

/// The outcome of all checks of one condition type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aggregate {
    pub health: AggregateHealth,
    /// The details of the checks that were not successful; empty when healthy.
    pub detail: String,
    pub successful: usize,
    pub unsuccessful: usize,
    pub progressing: usize,
    pub failed: usize,
    /// Codes of the unsuccessful and progressing checks, first occurrence first, without
    /// repeats.
    pub codes: Vec<ErrorCode>,
    /// The smallest threshold of the progressing checks (only when `health` is
    /// `Progressing`).
    pub threshold: Option<Duration>,
    /// Notes of successful checks, in check order.
    pub notes: Vec<String>,
}

/// Combines the results of the checks of one condition type.
pub fn aggregate(results: &[CheckResult]) -> Aggregate {
    let mut failed = Vec::new();
    let mut unsuccessful = Vec::new();
    let mut progressing = Vec::new();
    let mut successful = 0;
    let mut notes = Vec::new();
    let mut codes = Vec::new();
    let mut threshold: Option<Duration> = None;
    for result in results {
        match result {
            CheckResult::Successful => successful += 1,
            CheckResult::SuccessfulWithNote { note } => {
                successful += 1;
                notes.push(note.clone());
            }
            CheckResult::Failed { detail } => failed.push(detail.as_str()),
            CheckResult::Unsuccessful { detail, codes: c } => {
                unsuccessful.push(detail.as_str());
                add_unique(&mut codes, c);
            }
            CheckResult::Progressing {
                detail,
                codes: c,
                threshold: t,
            } => {
                progressing.push(detail.as_str());
                add_unique(&mut codes, c);
                if let Some(t) = t {
                    threshold = Some(threshold.map_or(*t, |current| current.min(*t)));
                }
            }
        }
    }
    let health = if !failed.is_empty() || !unsuccessful.is_empty() {
        AggregateHealth::Unhealthy
    } else if !progressing.is_empty() {
        AggregateHealth::Progressing
    } else {
        AggregateHealth::Healthy
    };
    let detail = match health {
        AggregateHealth::Healthy => String::new(),
        AggregateHealth::Unhealthy | AggregateHealth::Progressing => {
            describe(&failed, &unsuccessful, &progressing)
        }
    };
    Aggregate {
        health,
        detail,
        successful,
        unsuccessful: unsuccessful.len(),
        progressing: progressing.len(),
        failed: failed.len(),
        codes,
        threshold: if health == AggregateHealth::Progressing {
            threshold
        } else {
            None
        },
        notes,
    }
}

/// The condition message of checks that did not all succeed.
fn describe(failed: &[&str], unsuccessful: &[&str], progressing: &[&str]) -> String {
    // Category prefixes only help when categories mix.
    let categories = [
        !failed.is_empty(),
        !unsuccessful.is_empty(),
        !progressing.is_empty(),
    ];
    let mixed = categories.iter().filter(|present| **present).count() > 1;
    [
        ("Unable to execute", failed),
        ("Failed", unsuccessful),
        ("Progressing", progressing),
    ]
    .into_iter()
    .filter(|(_, details)| !details.is_empty())
    .map(|(prefix, details)| {
        let listed = list_details(details);
        if mixed {
            format!("{prefix} {}: {listed}", checks_word(details.len()))
        } else {
            listed
        }
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// "check" or "checks".
pub(crate) fn checks_word(count: usize) -> &'static str {
    if count == 1 { "check" } else { "checks" }
}

/// One detail as it is, several numbered `1) … 2) …`; each ends with a dot.
fn list_details(details: &[&str]) -> String {
    match details {
        [single] => with_trailing_dot(single),
        many => many
            .iter()
            .enumerate()
            .map(|(i, d)| format!("{}) {}", i + 1, with_trailing_dot(d)))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn with_trailing_dot(detail: &str) -> String {
    if detail.ends_with('.') {
        detail.to_string()
    } else {
        format!("{detail}.")
    }
}

fn add_unique(into: &mut Vec<ErrorCode>, codes: &[ErrorCode]) {
    for code in codes {
        if !into.contains(code) {
            into.push(*code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorCode::*;

    fn mins(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    #[test]
    fn no_results_and_only_successes_are_healthy() {
        for results in [
            vec![],
            vec![CheckResult::Successful, CheckResult::Successful],
        ] {
            let a = aggregate(&results);
            assert_eq!(a.health, AggregateHealth::Healthy);
            assert_eq!(a.detail, "");
            assert_eq!(a.successful, results.len());
            assert!(a.codes.is_empty() && a.threshold.is_none());
        }
    }

    #[test]
    fn a_single_unsuccessful_detail_gets_a_dot_and_no_number() {
        let a = aggregate(&[
            CheckResult::Successful,
            CheckResult::unsuccessful("mr broken"),
        ]);
        assert_eq!(a.health, AggregateHealth::Unhealthy);
        assert_eq!(a.detail, "mr broken.");
        assert_eq!((a.successful, a.unsuccessful), (1, 1));
        let dotted = aggregate(&[CheckResult::unsuccessful("already.")]);
        assert_eq!(dotted.detail, "already.");
    }

    #[test]
    fn several_details_of_one_category_are_numbered() {
        let a = aggregate(&[
            CheckResult::unsuccessful("a"),
            CheckResult::unsuccessful("b."),
        ]);
        assert_eq!(a.detail, "1) a. 2) b.");
        let p = aggregate(&[
            CheckResult::progressing("x", None),
            CheckResult::progressing("y", None),
        ]);
        assert_eq!(p.detail, "1) x. 2) y.");
    }

    #[test]
    fn mixed_categories_are_prefixed_in_a_fixed_order() {
        let a = aggregate(&[
            CheckResult::progressing("rolling", Some(mins(5))),
            CheckResult::unsuccessful("u1"),
            CheckResult::failed("boom"),
            CheckResult::unsuccessful("u2"),
        ]);
        assert_eq!(a.health, AggregateHealth::Unhealthy);
        assert_eq!(
            a.detail,
            "Unable to execute check: boom. Failed checks: 1) u1. 2) u2. Progressing check: rolling."
        );
        assert_eq!((a.failed, a.unsuccessful, a.progressing), (1, 2, 1));
        assert_eq!(
            a.threshold, None,
            "a threshold only matters for a progressing aggregate"
        );
    }

    #[test]
    fn a_failed_check_alone_is_not_prefixed() {
        let a = aggregate(&[CheckResult::failed("cannot read"), CheckResult::Successful]);
        assert_eq!(a.health, AggregateHealth::Unhealthy);
        assert_eq!(a.detail, "cannot read.");
        assert_eq!(a.failed, 1);
    }

    #[test]
    fn codes_come_from_unsuccessful_and_progressing_checks_without_repeats() {
        let a = aggregate(&[
            CheckResult::unsuccessful("a").with_codes([ConfigurationProblem]),
            CheckResult::failed("f").with_codes([InfraDependencies]),
            CheckResult::progressing("p", None)
                .with_codes([RetryableInfraDependencies, ConfigurationProblem]),
            CheckResult::Successful.with_codes([ProblematicWebhook]),
        ]);
        assert_eq!(a.codes, [ConfigurationProblem, RetryableInfraDependencies]);
    }

    #[test]
    fn progressing_takes_the_smallest_threshold_that_is_set() {
        let a = aggregate(&[
            CheckResult::Successful,
            CheckResult::progressing("slow", Some(mins(10))),
            CheckResult::progressing("none", None),
            CheckResult::progressing("fast", Some(mins(3))),
        ]);
        assert_eq!(a.health, AggregateHealth::Progressing);
        assert_eq!(a.threshold, Some(mins(3)));
        assert_eq!(a.detail, "1) slow. 2) none. 3) fast.");
        let none = aggregate(&[CheckResult::progressing("p", None)]);
        assert_eq!(
            (none.health, none.threshold),
            (AggregateHealth::Progressing, None)
        );
    }
}
