//! The built-in check of a ManagedResource in the Extension's namespace.

use std::borrow::Cow;

use futures::future::BoxFuture;

use super::check::{CheckContext, HealthCheck};
use super::result::CheckResult;
use crate::gardener::api::{ErrorCode, ManagedResource};

/// Checks that gardener-resource-manager applied the named ManagedResource (in the
/// Extension's namespace) and found every object in it healthy.
///
/// It reads the ManagedResource from [`SharedCaches`](crate::gardener::cache::SharedCaches),
/// which hold only the ManagedResources carrying this extension's `origin` label: one without
/// it is reported as not found. It does not look at `ResourcesProgressing`, so a rollout in
/// progress is healthy as long as the resource manager reports the objects healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedResourceCheck {
    pub name: String,
}

impl ManagedResourceCheck {
    pub fn new(name: impl Into<String>) -> ManagedResourceCheck {
        ManagedResourceCheck { name: name.into() }
    }
}

impl HealthCheck for ManagedResourceCheck {
    fn name(&self) -> Cow<'_, str> {
        Cow::Owned(format!("ManagedResource {}", self.name))
    }

    fn check<'a>(&'a self, ctx: &'a CheckContext) -> BoxFuture<'a, CheckResult> {
        let namespace = ctx.namespace();
        let mr = ctx.caches.managed_resource(&namespace, &self.name);
        let result = managed_resource_result(&self.name, &namespace, mr.as_deref());
        Box::pin(std::future::ready(result))
    }
}

/// The check result for the ManagedResource `name` in `namespace`, given what the cache holds.
pub fn managed_resource_result(
    name: &str,
    namespace: &str,
    mr: Option<&ManagedResource>,
) -> CheckResult {
    let Some(mr) = mr else {
        return CheckResult::unsuccessful(format!(
            "Managed Resource {name:?} in namespace {namespace:?} not found"
        ));
    };
    match mr.check_healthy() {
        Ok(()) => CheckResult::Successful,
        Err(unhealthy) => {
            let detail = format!(
                "managed resource {name:?} in namespace {namespace:?} is unhealthy: {unhealthy}"
            );
            // An object the API server rejects will be rejected again on every retry: only the
            // shoot owner's configuration can fix it, and gardenlet must know that.
            let codes =
                is_configuration_problem(&detail).then_some(ErrorCode::ConfigurationProblem);
            CheckResult::unsuccessful(detail).with_codes(codes)
        }
    }
}

const APPLY_ERROR: &str = "error during apply of object ";
const INVALID: &str = " is invalid:";

/// Whether a message reports that the API server rejected an object as invalid, i.e. whether
/// it matches `(?i)error during apply of object .* is invalid:` within one line (as Go's
/// regexp `.` does not cross line breaks).
pub fn is_configuration_problem(message: &str) -> bool {
    message.split('\n').any(|line| {
        let line = line.to_lowercase();
        // The earliest start leaves the most room for the rest of the pattern.
        line.find(APPLY_ERROR)
            .is_some_and(|start| line[start + APPLY_ERROR.len()..].contains(INVALID))
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::gardener::api::{
        Condition, ConditionStatus, ManagedResourceSpec, ManagedResourceStatus,
    };

    fn condition(type_: &str, status: ConditionStatus, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            last_update_time: Time(jiff::Timestamp::UNIX_EPOCH),
            reason: "R".into(),
            message: message.into(),
            codes: vec![],
        }
    }

    fn mr(generation: i64, observed: i64, conditions: Vec<Condition>) -> ManagedResource {
        let mut mr = ManagedResource::new("ext-shoot", ManagedResourceSpec::default());
        mr.metadata.namespace = Some("shoot--p--s".into());
        mr.metadata.generation = Some(generation);
        mr.status = Some(ManagedResourceStatus {
            conditions,
            observed_generation: Some(observed),
            secrets_data_checksum: None,
        });
        mr
    }

    fn healthy_conditions() -> Vec<Condition> {
        vec![
            condition(
                "ResourcesApplied",
                ConditionStatus::True,
                "All resources are applied.",
            ),
            condition(
                "ResourcesHealthy",
                ConditionStatus::True,
                "All resources are healthy.",
            ),
        ]
    }

    #[test]
    fn missing_is_unsuccessful_not_found() {
        assert_eq!(
            managed_resource_result("ext-shoot", "shoot--p--s", None),
            CheckResult::unsuccessful(
                r#"Managed Resource "ext-shoot" in namespace "shoot--p--s" not found"#
            )
        );
    }

    #[test]
    fn healthy_is_successful_even_while_progressing() {
        let mut conditions = healthy_conditions();
        conditions.push(condition(
            "ResourcesProgressing",
            ConditionStatus::True,
            "DaemonSet rolling",
        ));
        assert_eq!(
            managed_resource_result("ext-shoot", "shoot--p--s", Some(&mr(2, 2, conditions))),
            CheckResult::Successful
        );
    }

    #[test]
    fn t8a_outdated_observed_generation_is_unsuccessful_although_both_conditions_are_true() {
        let result = managed_resource_result(
            "ext-shoot",
            "shoot--p--s",
            Some(&mr(3, 2, healthy_conditions())),
        );
        let CheckResult::Unsuccessful { detail, codes } = result else {
            panic!("expected unsuccessful, got {result:?}");
        };
        assert!(
            detail.starts_with(
                r#"managed resource "ext-shoot" in namespace "shoot--p--s" is unhealthy: "#
            ),
            "{detail}"
        );
        assert!(detail.contains("outdated (2/3)"), "{detail}");
        assert!(codes.is_empty());
    }

    #[test]
    fn an_invalid_object_is_a_configuration_problem() {
        let applied = condition(
            "ResourcesApplied",
            ConditionStatus::False,
            "Could not apply all new resources: 1 error occurred:\n\t* Error during apply of object \"/v1, Kind=ConfigMap x/Bad_Name\": ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value",
        );
        let result = managed_resource_result("ext-shoot", "ns", Some(&mr(1, 1, vec![applied])));
        let CheckResult::Unsuccessful { detail, codes } = result else {
            panic!("expected unsuccessful, got {result:?}");
        };
        assert!(
            detail.contains(r#"ConfigMap "Bad_Name" is invalid"#),
            "{detail}"
        );
        assert_eq!(codes, [ErrorCode::ConfigurationProblem]);
    }

    #[test]
    fn other_apply_failures_carry_no_code() {
        let applied = condition(
            "ResourcesApplied",
            ConditionStatus::False,
            "secret managedresource-x not found",
        );
        let result = managed_resource_result("ext-shoot", "ns", Some(&mr(1, 1, vec![applied])));
        assert!(
            matches!(result, CheckResult::Unsuccessful { ref codes, .. } if codes.is_empty()),
            "{result:?}"
        );
    }

    #[test]
    fn configuration_problem_matcher_follows_the_pattern() {
        for (message, expected) in [
            (
                "error during apply of object \"v1/ConfigMap\": ConfigMap \"a\" is invalid: x",
                true,
            ),
            ("ERROR DURING APPLY OF OBJECT x IS INVALID:", true),
            ("error during apply of object  is invalid:", true),
            (
                "prefix text error during apply of object a is invalid: and more",
                true,
            ),
            (
                "second line\nerror during apply of object a is invalid:",
                true,
            ),
            ("error during apply of object a\nis invalid:", false),
            ("error during apply of object a is invalid", false),
            ("error during apply of objecta is invalid:", false),
            ("error during apply of object is invalid:", false),
            ("a is invalid: error during apply of object b", false),
            ("", false),
        ] {
            assert_eq!(is_configuration_problem(message), expected, "{message:?}");
        }
    }
}
