//! Leader election on a `coordination.k8s.io` Lease, with client-go's rules and one request per
//! renewal.
//!
//! - **Acquiring.** A stand-by reads the Lease every retry period. It takes the Lease when it
//!   is missing (create), released (no holder), or expired: its record has not changed for a
//!   lease duration as measured by this process's own clock since it last saw the record
//!   change (client-go's rule; no comparison of clocks across machines).
//! - **Renewing.** The leader renews every retry period with one merge patch of `renewTime`
//!   that carries the resourceVersion of its own last write, so the API server refuses it
//!   (409) if anybody else wrote the Lease since. Only then is the Lease read: held by another
//!   replica means leadership is lost, still ours (someone changed a label) means renew again
//!   with the new version. A deleted Lease (404) is lost leadership as well.
//! - **The renew deadline.** A leader that has not renewed successfully within the renew
//!   deadline (shorter than the lease duration, so before any stand-by may take over) gives
//!   up.
//! - **Fail-stop.** Once this replica has led, losing the Lease ends the process (the pod
//!   restarts and competes again), as kube-controller-manager does. Continuing as a stand-by
//!   would need every controller to stop cleanly mid-reconcile and restart its state; an exit
//!   is simpler and certainly correct.
//! - **Release.** On a graceful stop the leader clears the holder, so a stand-by takes over at
//!   once instead of waiting for the Lease to expire.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::LeaderMetrics;
use super::options::LeaderElectionTiming;

/// Field manager of every write to the Lease.
const FIELD_MANAGER: &str = "leader-election";

/// What the election needs to know.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub timing: LeaderElectionTiming,
}

/// How the election ended.
#[derive(Debug)]
pub(crate) enum LeaderEnd {
    /// Stopped on request; the Lease was released if this replica held it.
    Stopped,
    /// This replica led and lost the Lease (or could not renew it in time).
    Lost(String),
    /// The election stopped working before this replica led.
    Failed(String),
}

/// A unique identity for this process: the pod name (`POD_NAME`, else the hostname, which is
/// the pod name in a pod) plus a random suffix, so that a restarted container never mistakes
/// its predecessor's Lease for its own.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    format!("{}_{}", base.trim(), random_suffix())
}

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS's randomness per process; mixing in the time and the
    // process id keeps two hashers within one process apart as well.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

/// Checks what the Lease arithmetic needs; the flags are validated already, this keeps a
/// programming error from becoming a misbehaving election.
fn check_timing(timing: &LeaderElectionTiming) -> Result<(), String> {
    let duration = timing.lease_duration_seconds;
    let retry = timing.retry_period_seconds;
    if retry == 0 || retry >= duration || i32::try_from(duration).is_err() {
        return Err(format!(
            "retry period {retry}s must be in 1..{duration}s, and the lease duration fit a Lease"
        ));
    }
    Ok(())
}

/// The Lease as this replica last saw it, and when (on its own clock) its record last changed.
#[derive(Debug)]
struct Observed {
    spec: LeaseSpec,
    changed_at: Instant,
}

impl Observed {
    /// Whether the holder's time is up: its record has not changed for its lease duration.
    fn expired(&self, now: Instant, default_duration: Duration) -> bool {
        let duration = self
            .spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(default_duration, Duration::from_secs);
        // A duration too large to add (a hand-written Lease) never expires.
        self.changed_at
            .checked_add(duration)
            .is_some_and(|end| now >= end)
    }
}

/// The holder named by a Lease, if any (an empty name is no holder, as in client-go).
fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// Whether two records are the same for expiry purposes (client-go compares the whole record).
fn same_record(a: &LeaseSpec, b: &LeaseSpec) -> bool {
    a.holder_identity == b.holder_identity
        && a.renew_time == b.renew_time
        && a.acquire_time == b.acquire_time
        && a.lease_duration_seconds == b.lease_duration_seconds
        && a.lease_transitions == b.lease_transitions
}

/// What one acquisition attempt decided.
#[derive(Debug, PartialEq, Eq)]
enum Acquire {
    /// Create the Lease: it does not exist.
    Create,
    /// Take it over with this many transitions.
    TakeOver { transitions: i32 },
    /// Another replica holds it and its time is not up.
    Wait,
}

/// The acquisition decision for a Lease read at `now` (pure).
fn decide_acquire(
    observed: Option<&Observed>,
    identity: &str,
    now: Instant,
    default_duration: Duration,
) -> Acquire {
    let Some(observed) = observed else {
        return Acquire::Create;
    };
    let transitions = observed.spec.lease_transitions.unwrap_or(0);
    match holder(&observed.spec) {
        Some(h) if h == identity => Acquire::TakeOver { transitions },
        Some(_) if !observed.expired(now, default_duration) => Acquire::Wait,
        Some(_) => Acquire::TakeOver {
            transitions: transitions.saturating_add(1),
        },
        None => Acquire::TakeOver {
            transitions: transitions.saturating_add(1),
        },
    }
}

/// The Lease API of one election.
struct Elector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<Observed>,
}

/// Why a renewal did not succeed.
enum RenewFailure {
    /// Leadership is gone for good.
    Lost(String),
    /// Worth another try within the renew deadline.
    Retry(String),
}

impl Elector {
    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.timing.lease_duration_seconds).unwrap_or(i32::MAX)
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        }
    }

    /// Remembers the record of `lease`, noting the time when it changed.
    fn observe(&mut self, lease: Option<&Lease>) {
        let Some(lease) = lease else {
            self.observed = None;
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let unchanged = self
            .observed
            .as_ref()
            .is_some_and(|o| same_record(&o.spec, &spec));
        if !unchanged {
            self.observed = Some(Observed {
                spec,
                changed_at: Instant::now(),
            });
        }
    }

    /// One acquisition attempt: read, then create or take over if allowed. Returns the
    /// resourceVersion of the Lease this replica now holds.
    async fn try_acquire(&mut self) -> Result<Option<String>, kube::Error> {
        let current = self.api.get_opt(&self.config.lease_name).await?;
        self.observe(current.as_ref());
        let default_duration = Duration::from_secs(self.config.timing.lease_duration_seconds);
        let decision = decide_acquire(
            self.observed.as_ref(),
            &self.config.identity,
            Instant::now(),
            default_duration,
        );
        let now = MicroTime(jiff::Timestamp::now());
        let written = match decision {
            Acquire::Wait => return Ok(None),
            Acquire::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config.identity.clone()),
                        lease_duration_seconds: Some(self.duration_seconds()),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PostParams::default()
                };
                self.api.create(&params, &lease).await
            }
            Acquire::TakeOver { transitions } => {
                let version = current.as_ref().and_then(|l| l.resource_version());
                let patch = json!({
                    "metadata": {"resourceVersion": version},
                    "spec": {
                        "holderIdentity": self.config.identity,
                        "leaseDurationSeconds": self.duration_seconds(),
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": transitions,
                    },
                });
                self.api
                    .patch(
                        &self.config.lease_name,
                        &Self::params(),
                        &Patch::Merge(&patch),
                    )
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observe(Some(&lease));
                Ok(lease.resource_version())
            }
            // Somebody else was faster (created it, or wrote it since our read).
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One renewal: a merge patch carrying `version`; after a conflict, one read decides
    /// whether the Lease is still ours (then the patch is sent again with the new version).
    async fn renew(&mut self, version: &str) -> Result<String, RenewFailure> {
        let mut version = version.to_string();
        // A conflict caused by another writer that leaves us the holder (a label change) is
        // retried; a second conflict in a row is retried at the next period.
        for _ in 0..2 {
            let patch = json!({
                "metadata": {"resourceVersion": version},
                "spec": {
                    "holderIdentity": self.config.identity,
                    "leaseDurationSeconds": self.duration_seconds(),
                    "renewTime": MicroTime(jiff::Timestamp::now()),
                },
            });
            let result = self
                .api
                .patch(
                    &self.config.lease_name,
                    &Self::params(),
                    &Patch::Merge(&patch),
                )
                .await;
            match result {
                Ok(lease) => {
                    self.observe(Some(&lease));
                    return lease.resource_version().ok_or_else(|| {
                        RenewFailure::Retry("the Lease has no resourceVersion".into())
                    });
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    return Err(RenewFailure::Lost("the Lease was deleted".to_string()));
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let current = self
                        .api
                        .get_opt(&self.config.lease_name)
                        .await
                        .map_err(|e| RenewFailure::Retry(format!("cannot read the Lease: {e}")))?;
                    let Some(current) = current else {
                        return Err(RenewFailure::Lost("the Lease was deleted".to_string()));
                    };
                    let spec = current.spec.clone().unwrap_or_default();
                    if holder(&spec) != Some(self.config.identity.as_str()) {
                        return Err(RenewFailure::Lost(format!(
                            "the Lease is held by {:?}",
                            holder(&spec).unwrap_or_default()
                        )));
                    }
                    self.observe(Some(&current));
                    version = current.resource_version().unwrap_or_default();
                }
                Err(e) => return Err(RenewFailure::Retry(e.to_string())),
            }
        }
        Err(RenewFailure::Retry(
            "the Lease kept changing under the renewal".to_string(),
        ))
    }

    /// Clears the holder so a stand-by takes over at once; only if the Lease is still ours.
    async fn release(&mut self, version: &str) -> Result<(), kube::Error> {
        let patch = json!({
            "metadata": {"resourceVersion": version},
            "spec": {
                "holderIdentity": null,
                "leaseDurationSeconds": 1,
                "renewTime": MicroTime(jiff::Timestamp::now()),
            },
        });
        match self
            .api
            .patch(
                &self.config.lease_name,
                &Self::params(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Changed or gone since our last renewal: not ours to release any more.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Runs the election until `stop` is cancelled or leadership is lost, publishing whether this
/// replica leads on `leader`.
pub(crate) async fn run(
    client: Client,
    config: LeaderElectionConfig,
    leader: watch::Sender<bool>,
    stop: CancellationToken,
    metrics: LeaderMetrics,
) -> LeaderEnd {
    if let Err(e) = check_timing(&config.timing) {
        return LeaderEnd::Failed(e);
    }
    let retry = Duration::from_secs(config.timing.retry_period_seconds);
    let renew_deadline = config.timing.renew_deadline;
    metrics.set(&config.lease_name, false);
    tracing::info!(lease = %config.lease_name, namespace = %config.namespace, identity = %config.identity, "Starting leader election");
    let mut elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config: config.clone(),
        observed: None,
    };

    let Some(mut version) = acquire(&mut elector, retry, &stop).await else {
        return LeaderEnd::Stopped;
    };
    tracing::info!(lease = %config.lease_name, identity = %config.identity, "Acquired leadership");
    metrics.set(&config.lease_name, true);
    // Nobody listening just means no controller waits for leadership.
    let _ = leader.send(true);
    let acquired = Instant::now();
    let mut last_renewal = acquired;
    let mut state = RenewalState::Renewed { sent: acquired };
    loop {
        match watchdog(state, last_renewal, Instant::now(), retry, renew_deadline) {
            Watchdog::Sleep {
                last_renewal: since,
                next_attempt,
            } => {
                last_renewal = since;
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return stop_leading(&mut elector, &version, &metrics).await,
                    _ = tokio::time::sleep_until(next_attempt) => {}
                }
                state = RenewalState::Due;
            }
            Watchdog::Renew { within } => {
                let sent = Instant::now();
                let outcome = tokio::select! {
                    biased;
                    _ = stop.cancelled() => return stop_leading(&mut elector, &version, &metrics).await,
                    outcome = tokio::time::timeout(within, elector.renew(&version)) => outcome,
                };
                state = match outcome {
                    Ok(Ok(new_version)) => {
                        version = new_version;
                        RenewalState::Renewed { sent }
                    }
                    Ok(Err(RenewFailure::Lost(reason))) => RenewalState::Lost(reason),
                    Ok(Err(RenewFailure::Retry(reason))) => {
                        tracing::warn!(error = %reason, lease = %config.lease_name, "Failed to renew the leader-election Lease");
                        RenewalState::Failed
                    }
                    Err(_elapsed) => RenewalState::TimedOut,
                };
            }
            Watchdog::GiveUp(reason) => return end(true, reason, &metrics, &config),
        }
    }
}

/// Tries to take the Lease every retry period until it is ours (its resourceVersion) or the
/// process stops (`None`).
async fn acquire(
    elector: &mut Elector,
    retry: Duration,
    stop: &CancellationToken,
) -> Option<String> {
    // Like client-go, keep trying while the API server is unreachable or the
    // permissions are not there yet.
    loop {
        let attempt = tokio::select! {
            _ = stop.cancelled() => return None,
            attempt = elector.try_acquire() => attempt,
        };
        match attempt {
            Ok(Some(version)) => return Some(version),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, lease = %elector.config.lease_name, "Failed to access the leader-election Lease; retrying")
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// A graceful stop of the leader: releases the Lease so a stand-by takes over at once.
async fn stop_leading(elector: &mut Elector, version: &str, metrics: &LeaderMetrics) -> LeaderEnd {
    let config = &elector.config;
    let lease = config.lease_name.clone();
    // Up to a lease duration: after that the Lease has expired anyway, and a loaded API server
    // may take more than a retry period to answer.
    let release_timeout = Duration::from_secs(config.timing.lease_duration_seconds);
    match tokio::time::timeout(release_timeout, elector.release(version)).await {
        Ok(Ok(())) => tracing::info!(lease = %lease, "Released the leader-election Lease"),
        Ok(Err(e)) => tracing::warn!(error = %e, "Failed to release the leader-election Lease"),
        Err(_) => tracing::warn!("Timed out releasing the leader-election Lease"),
    }
    metrics.set(&lease, false);
    LeaderEnd::Stopped
}

/// What the renewal loop has just seen of the Lease.
#[derive(Debug)]
enum RenewalState {
    /// The retry period is over; nothing was sent yet.
    Due,
    /// The renewal sent at `sent` succeeded.
    Renewed { sent: Instant },
    /// Leadership is gone for good.
    Lost(String),
    /// The renewal failed in a way worth another try.
    Failed,
    /// The renewal did not answer within what was left of the renew deadline.
    TimedOut,
}

/// What the leader does next.
#[derive(Debug, PartialEq, Eq)]
enum Watchdog {
    /// Send a renewal now and give it at most `within`.
    Renew { within: Duration },
    /// Keep leading: wait until `next_attempt`; `last_renewal` is when the holder's time (as
    /// the stand-bys count it) last started.
    Sleep {
        last_renewal: Instant,
        next_attempt: Instant,
    },
    /// Stop leading, for this reason.
    GiveUp(String),
}

/// The renew-deadline watchdog (pure): a leader that has not renewed within `renew_deadline`
/// of `last_renewal` gives up before any stand-by may take the Lease over.
fn watchdog(
    state: RenewalState,
    last_renewal: Instant,
    now: Instant,
    retry: Duration,
    renew_deadline: Duration,
) -> Watchdog {
    let age = now.saturating_duration_since(last_renewal);
    let remaining = renew_deadline.saturating_sub(age);
    match state {
        RenewalState::Due if remaining.is_zero() => {
            Watchdog::GiveUp(not_renewed(age, renew_deadline))
        }
        RenewalState::Due => Watchdog::Renew { within: remaining },
        // Measured from before the request: the holder's time as the others count it starts
        // no earlier than that.
        RenewalState::Renewed { sent } => Watchdog::Sleep {
            last_renewal: sent,
            next_attempt: sent + retry,
        },
        RenewalState::Lost(reason) => Watchdog::GiveUp(reason),
        RenewalState::Failed => Watchdog::Sleep {
            last_renewal,
            next_attempt: now + retry.min(remaining),
        },
        RenewalState::TimedOut => Watchdog::GiveUp(not_renewed(age, renew_deadline)),
    }
}

fn not_renewed(age: Duration, deadline: Duration) -> String {
    format!("the Lease was not renewed for {age:?}, longer than the renew deadline {deadline:?}")
}

fn end(
    was_leader: bool,
    reason: String,
    metrics: &LeaderMetrics,
    config: &LeaderElectionConfig,
) -> LeaderEnd {
    metrics.set(&config.lease_name, false);
    if was_leader {
        LeaderEnd::Lost(reason)
    } else {
        LeaderEnd::Failed(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(duration: u64, retry: u64) -> LeaderElectionTiming {
        LeaderElectionTiming {
            lease_duration_seconds: duration,
            renew_deadline: Duration::from_secs(duration.saturating_sub(1)),
            retry_period_seconds: retry,
        }
    }

    #[test]
    fn invalid_timing_is_an_error_not_a_panic() {
        assert!(check_timing(&timing(15, 2)).is_ok());
        assert!(check_timing(&timing(2, 2)).is_err());
        assert!(check_timing(&timing(15, 0)).is_err());
        assert!(check_timing(&timing(u64::MAX, 2)).is_err());
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let (base, suffix) = a.rsplit_once('_').expect("suffix");
        assert!(!base.is_empty());
        assert_eq!(suffix.len(), 10);
    }

    fn observed(holder: Option<&str>, transitions: i32, changed_at: Instant) -> Observed {
        Observed {
            spec: LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(15),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            },
            changed_at,
        }
    }

    #[test]
    fn a_stand_by_waits_for_the_record_to_stay_unchanged_for_a_lease_duration() {
        let seen = Instant::now();
        let default = Duration::from_secs(15);
        assert_eq!(decide_acquire(None, "me", seen, default), Acquire::Create);
        let other = observed(Some("other"), 3, seen);
        assert_eq!(
            decide_acquire(Some(&other), "me", seen + Duration::from_secs(14), default),
            Acquire::Wait
        );
        assert_eq!(
            decide_acquire(Some(&other), "me", seen + Duration::from_secs(15), default),
            Acquire::TakeOver { transitions: 4 }
        );
        let released = observed(None, 3, seen);
        assert_eq!(
            decide_acquire(Some(&released), "me", seen, default),
            Acquire::TakeOver { transitions: 4 }
        );
        let empty_name = observed(Some(""), 3, seen);
        assert_eq!(
            decide_acquire(Some(&empty_name), "me", seen, default),
            Acquire::TakeOver { transitions: 4 }
        );
        let mine = observed(Some("me"), 3, seen);
        assert_eq!(
            decide_acquire(Some(&mine), "me", seen, default),
            Acquire::TakeOver { transitions: 3 }
        );
    }

    #[test]
    fn a_record_counts_as_changed_only_when_a_field_changes() {
        let a = observed(Some("x"), 1, Instant::now()).spec;
        let mut b = a.clone();
        assert!(same_record(&a, &b));
        b.renew_time = Some(MicroTime(jiff::Timestamp::UNIX_EPOCH));
        assert!(!same_record(&a, &b));
    }

    const RETRY: Duration = Duration::from_secs(2);
    const DEADLINE: Duration = Duration::from_secs(10);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_watchdog_renews_within_what_is_left_of_the_deadline() {
        let renewed = Instant::now();
        let decision = watchdog(
            RenewalState::Due,
            renewed,
            renewed + secs(3),
            RETRY,
            DEADLINE,
        );
        assert_eq!(decision, Watchdog::Renew { within: secs(7) });
    }

    #[test]
    fn the_watchdog_gives_up_when_a_renewal_comes_due_past_the_deadline() {
        let renewed = Instant::now();
        for late in [DEADLINE, DEADLINE + secs(60)] {
            let decision = watchdog(RenewalState::Due, renewed, renewed + late, RETRY, DEADLINE);
            let Watchdog::GiveUp(reason) = decision else {
                panic!("{late:?} after the last renewal: {decision:?}");
            };
            assert!(reason.contains("renew deadline"), "{reason}");
        }
    }

    #[test]
    fn a_renewal_restarts_the_clock_from_when_it_was_sent() {
        let renewed = Instant::now();
        let sent = renewed + secs(2);
        let decision = watchdog(
            RenewalState::Renewed { sent },
            renewed,
            sent + secs(1),
            RETRY,
            DEADLINE,
        );
        assert_eq!(
            decision,
            Watchdog::Sleep {
                last_renewal: sent,
                next_attempt: sent + RETRY,
            }
        );
    }

    #[test]
    fn a_lost_lease_gives_up_with_its_reason() {
        let renewed = Instant::now();
        let decision = watchdog(
            RenewalState::Lost("the Lease was deleted".into()),
            renewed,
            renewed + secs(1),
            RETRY,
            DEADLINE,
        );
        assert_eq!(decision, Watchdog::GiveUp("the Lease was deleted".into()));
    }

    #[test]
    fn a_failed_renewal_retries_no_later_than_the_deadline() {
        let renewed = Instant::now();
        // Plenty of time left: the next try is a retry period away.
        let now = renewed + secs(3);
        assert_eq!(
            watchdog(RenewalState::Failed, renewed, now, RETRY, DEADLINE),
            Watchdog::Sleep {
                last_renewal: renewed,
                next_attempt: now + RETRY,
            }
        );
        // Less than a retry period left: the last try comes at the deadline.
        let now = renewed + secs(9);
        assert_eq!(
            watchdog(RenewalState::Failed, renewed, now, RETRY, DEADLINE),
            Watchdog::Sleep {
                last_renewal: renewed,
                next_attempt: renewed + DEADLINE,
            }
        );
    }

    #[test]
    fn a_renewal_that_times_out_gives_up() {
        let renewed = Instant::now();
        let decision = watchdog(
            RenewalState::TimedOut,
            renewed,
            renewed + DEADLINE,
            RETRY,
            DEADLINE,
        );
        let Watchdog::GiveUp(reason) = decision else {
            panic!("{decision:?}");
        };
        assert!(reason.contains("not renewed for 10s"), "{reason}");
    }
}
