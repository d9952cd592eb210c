//! Waiting for gardener-resource-manager: polls of one ManagedResource until it is healthy,
//! rolled out or gone (Gardener's `WaitUntilHealthy`, `WaitUntilHealthyAndNotProgressing`,
//! `WaitUntilDeleted`), each bounded by a deadline.

use std::time::Duration;

use kube::{Api, Client};
use tokio::time::Instant;

use super::{Error, is_configuration_problem};
use crate::gardener::api::managed_resource::conditions::RESOURCES_APPLIED;
use crate::gardener::api::{ConditionStatus, ManagedResource};

/// Gardener's `IntervalWait`.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);
const MANAGED_RESOURCE: &str = "ManagedResource";
/// `ManagedResource.status.conditions[ResourcesApplied].reason` while GRM deletes.
const DELETION_FAILED: &str = "DeletionFailed";
const DELETION_PENDING: &str = "DeletionPending";

/// How long to wait and how often to look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub timeout: Duration,
    pub interval: Duration,
}

impl Wait {
    /// Polls every [`DEFAULT_POLL_INTERVAL`] for at most `timeout`.
    pub fn new(timeout: Duration) -> Wait {
        Wait {
            timeout,
            interval: DEFAULT_POLL_INTERVAL,
        }
    }

    pub fn with_interval(self, interval: Duration) -> Wait {
        Wait { interval, ..self }
    }
}

/// Gardener's `WaitUntilDeleted`: polls until the ManagedResource is gone. On timeout the
/// error carries GRM's `ResourcesApplied` message when it reports a failed or pending
/// deletion, and ERR_CONFIGURATION_PROBLEM when that message says an object is invalid.
pub async fn wait_until_deleted(
    client: &Client,
    namespace: &str,
    name: &str,
    wait: Wait,
) -> Result<(), Error> {
    let gone = |mr: Option<&ManagedResource>| match mr {
        None => Ok(()),
        Some(mr) => Err(not_deleted(namespace, name, wait.timeout, mr)),
    };
    poll(client, namespace, name, wait, gone, |last| last).await
}

/// The timeout error of [`wait_until_deleted`], from the last ManagedResource seen.
pub fn not_deleted(
    namespace: &str,
    name: &str,
    timeout: Duration,
    last: &ManagedResource,
) -> Error {
    let message = last
        .condition(RESOURCES_APPLIED)
        .filter(|c| {
            c.status != ConditionStatus::True
                && (c.reason == DELETION_FAILED || c.reason == DELETION_PENDING)
        })
        .map(|c| c.message.clone());
    Error::NotDeleted {
        namespace: namespace.to_string(),
        name: name.to_string(),
        timeout,
        configuration_problem: message.as_deref().is_some_and(is_configuration_problem),
        message,
    }
}

/// What [`wait_until`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// Gardener's `WaitUntilHealthy`: [`ManagedResource::check_healthy`].
    Healthy,
    /// Gardener's `WaitUntilHealthyAndNotProgressing`: also every rollout is complete
    /// ([`ManagedResource::check_rolled_out`]).
    RolledOut,
}

/// Polls the ManagedResource until it is what `awaited` asks, or the wait times out.
pub async fn wait_until(
    client: &Client,
    namespace: &str,
    name: &str,
    wait: Wait,
    awaited: Awaited,
) -> Result<(), Error> {
    let check = match awaited {
        Awaited::Healthy => ManagedResource::check_healthy,
        Awaited::RolledOut => ManagedResource::check_rolled_out,
    };
    let ready = |mr: Option<&ManagedResource>| match mr {
        None => Err(format!(
            "managedresources.resources.gardener.cloud {name:?} not found"
        )),
        Some(mr) => check(mr).map_err(|e| e.to_string()),
    };
    let timed_out = |last| Error::NotHealthy {
        namespace: namespace.to_string(),
        name: name.to_string(),
        timeout: wait.timeout,
        last,
    };
    poll(client, namespace, name, wait, ready, timed_out).await
}

/// Reads the ManagedResource every `wait.interval` until `done` holds for it (`None`: it does
/// not exist); on timeout, `timed_out` makes the error from what `done` said last.
async fn poll<E>(
    client: &Client,
    namespace: &str,
    name: &str,
    wait: Wait,
    done: impl Fn(Option<&ManagedResource>) -> Result<(), E>,
    timed_out: impl FnOnce(E) -> Error,
) -> Result<(), Error> {
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + wait.timeout;
    loop {
        let current = mrs
            .get_opt(name)
            .await
            .map_err(|e| Error::api("read", MANAGED_RESOURCE, namespace, name, e))?;
        let last = match done(current.as_ref()) {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if !sleep_before(deadline, wait.interval).await {
            return Err(timed_out(last));
        }
    }
}

/// Sleeps for `interval`, but not past `deadline`; false when the deadline has passed, so
/// every wait ends.
async fn sleep_before(deadline: Instant, interval: Duration) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    tokio::time::sleep(interval.min(deadline - now)).await;
    true
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::gardener::api::managed_resource::ManagedResourceStatus;
    use crate::gardener::api::{Condition, ErrorCode, ManagedResourceSpec};
    use crate::gardener::error_codes::CodedError;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub(in crate::gardener::managed_resource) fn with_applied(
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> ManagedResource {
        let mut mr = ManagedResource::new("mr", ManagedResourceSpec::default());
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        mr.status = Some(ManagedResourceStatus {
            conditions: vec![Condition {
                type_: RESOURCES_APPLIED.into(),
                status,
                last_transition_time: now.clone(),
                last_update_time: now,
                reason: reason.into(),
                message: message.into(),
                codes: vec![],
            }],
            ..Default::default()
        });
        mr
    }

    #[test]
    fn deletion_timeout_carries_grms_deletion_message() {
        let invalid = "error during apply of object \"v1/ConfigMap/a/b\" is invalid: data";
        let err = not_deleted(
            "ns",
            "mr",
            Duration::from_secs(3),
            &with_applied(ConditionStatus::False, "DeletionFailed", invalid),
        );
        assert!(err.to_string().contains(invalid), "{err}");
        assert_eq!(err.codes(), vec![ErrorCode::ConfigurationProblem]);

        let pending = not_deleted(
            "ns",
            "mr",
            Duration::from_secs(3),
            &with_applied(
                ConditionStatus::Progressing,
                "DeletionPending",
                "waiting for x",
            ),
        );
        assert!(
            pending.to_string().ends_with(":\nwaiting for x"),
            "{pending}"
        );
        assert!(pending.codes().is_empty());

        for (status, reason) in [
            (ConditionStatus::True, "DeletionPending"),
            (ConditionStatus::False, "ApplyFailed"),
        ] {
            let err = not_deleted(
                "ns",
                "mr",
                Duration::from_secs(3),
                &with_applied(status, reason, invalid),
            );
            assert!(
                matches!(err, Error::NotDeleted { message: None, .. }),
                "{err}"
            );
            assert!(err.codes().is_empty());
        }
    }

    #[tokio::test]
    async fn sleeping_never_passes_the_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(50);
        let rounds = tokio::time::timeout(Duration::from_secs(10), async {
            let mut rounds = 0;
            while sleep_before(deadline, Duration::from_secs(3600)).await {
                rounds += 1;
            }
            rounds
        })
        .await
        .expect("a long interval must not sleep past the deadline");
        assert_eq!(rounds, 1);
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn wait_defaults_to_gardeners_interval() {
        let w = Wait::new(Duration::from_secs(60));
        assert_eq!(w.interval, Duration::from_secs(2));
        assert_eq!(
            w.with_interval(Duration::from_millis(100)).interval,
            Duration::from_millis(100)
        );
    }
}
