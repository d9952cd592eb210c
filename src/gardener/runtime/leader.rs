//! Leader election on a `coordination.k8s.io` Lease with kube-lease-manager.
//!
//! kube-lease-manager keeps trying to acquire the Lease and renews it while held, and tells us
//! when the holder changes. Two things it does not do are added here:
//!
//! - **Fail-stop.** Once this replica has led, losing the Lease ends the process (the pod
//!   restarts and competes again), as kube-controller-manager does. Continuing as a stand-by
//!   would need every controller to stop cleanly mid-reconcile and restart its state; an exit
//!   is simpler and certainly correct.
//! - **The renew deadline.** When a renewal fails, kube-lease-manager logs, backs off and
//!   retries, but still reports "leader" — for as long as the API server stays unreachable.
//!   Meanwhile the Lease expires and a stand-by takes over, and when the connection returns
//!   both would reconcile until the old leader's next renewal attempt. So a watchdog reads the
//!   Lease every retry period and gives up leadership when the Lease names another holder, or
//!   when its last renewal is older than the renew deadline (always shorter than the lease
//!   duration, so this replica stops before anyone else may start).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::LeaderMetrics;
use super::options::LeaderElectionTiming;

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

/// kube-lease-manager's parameters for `timing`. The holder renews `grace` before expiry, so
/// `grace = duration - retry period` renews every retry period, like client-go.
fn lease_params(config: &LeaderElectionConfig) -> Result<LeaseParams, String> {
    let duration = config.timing.lease_duration_seconds;
    let retry = config.timing.retry_period_seconds;
    // LeaseParams::new panics on these; the flags are validated already, this keeps a
    // programming error from becoming a panic.
    if retry == 0 || retry >= duration {
        return Err(format!("retry period {retry}s must be in 1..{duration}s"));
    }
    Ok(LeaseParams::new(
        config.identity.clone(),
        duration,
        duration - retry,
    ))
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
    let retry = Duration::from_secs(config.timing.retry_period_seconds);
    let params = match lease_params(&config) {
        Ok(p) => p,
        Err(e) => return LeaderEnd::Failed(e),
    };
    metrics.set(&config.lease_name, false);
    tracing::info!(lease = %config.lease_name, namespace = %config.namespace, identity = %config.identity, "Starting leader election");

    // Creating the manager reads (and creates) the Lease; like client-go, keep trying while the
    // API server is unreachable or the permissions are not there yet.
    let manager = loop {
        let build = LeaseManagerBuilder::new(client.clone(), config.lease_name.clone())
            .with_namespace(config.namespace.clone())
            .with_parameters(params.clone())
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .build();
        tokio::select! {
            _ = stop.cancelled() => return LeaderEnd::Stopped,
            built = build => match built {
                Ok(m) => break m,
                Err(e) => {
                    tracing::error!(error = %e, lease = %config.lease_name, "Failed to access the leader-election Lease; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return LeaderEnd::Stopped,
                        _ = tokio::time::sleep(retry) => {}
                    }
                }
            }
        }
    };
    let (mut holder, mut task) = manager.watch().await;
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut watchdog = tokio::time::interval(retry);
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading_since: Option<jiff::Timestamp> = None;
    let mut last_renewal: Option<jiff::Timestamp> = None;

    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {
                if leading_since.is_some() {
                    // Dropping the receiver makes the manager's task release the Lease, so a
                    // stand-by need not wait for it to expire.
                    drop(holder);
                    // Up to a lease duration: after that the Lease has expired anyway, and a
                    // loaded API server may take more than a retry period to answer.
                    let release_timeout = Duration::from_secs(config.timing.lease_duration_seconds);
                    match tokio::time::timeout(release_timeout, &mut task).await {
                        Ok(Ok(Ok(_))) => tracing::info!(lease = %config.lease_name, "Released the leader-election Lease"),
                        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "Failed to release the leader-election Lease"),
                        Ok(Err(e)) => tracing::warn!(error = %e, "Leader-election task failed"),
                        Err(_) => {
                            task.abort();
                            tracing::warn!("Timed out releasing the leader-election Lease");
                        }
                    }
                } else {
                    task.abort();
                }
                metrics.set(&config.lease_name, false);
                return LeaderEnd::Stopped;
            }
            changed = holder.changed() => {
                if changed.is_err() {
                    // The manager's task only ends when we stop listening; anything else is a
                    // failure of the library.
                    let reason = match (&mut task).await {
                        Ok(Err(e)) => format!("the lease manager stopped: {e}"),
                        Ok(Ok(_)) => "the lease manager stopped".to_string(),
                        Err(e) => format!("the lease manager task failed: {e}"),
                    };
                    return end(leading_since.is_some(), reason, &metrics, &config);
                }
                let is_holder = *holder.borrow_and_update();
                match (leading_since.is_some(), is_holder) {
                    (false, true) => {
                        tracing::info!(lease = %config.lease_name, identity = %config.identity, "Acquired leadership");
                        leading_since = Some(jiff::Timestamp::now());
                        last_renewal = None;
                        metrics.set(&config.lease_name, true);
                        // Nobody listening just means no controller waits for leadership.
                        let _ = leader.send(true);
                        watchdog.reset();
                    }
                    (true, false) => {
                        task.abort();
                        return end(true, "another replica holds the Lease".to_string(), &metrics, &config);
                    }
                    _ => {}
                }
            }
            _ = watchdog.tick(), if leading_since.is_some() => {
                match tokio::time::timeout(retry, leases.get_opt(&config.lease_name)).await {
                    Ok(Ok(Some(lease))) => {
                        let spec = lease.spec.unwrap_or_default();
                        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
                            task.abort();
                            let reason = format!("the Lease is held by {:?}", spec.holder_identity.unwrap_or_default());
                            return end(true, reason, &metrics, &config);
                        }
                        if let Some(renewed) = spec.renew_time {
                            last_renewal = last_renewal.max(Some(renewed.0));
                        }
                    }
                    Ok(Ok(None)) => {
                        task.abort();
                        return end(true, "the Lease was deleted".to_string(), &metrics, &config);
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, lease = %config.lease_name, "Failed to read the leader-election Lease"),
                    Err(_) => tracing::warn!(lease = %config.lease_name, "Timed out reading the leader-election Lease"),
                }
                let reference = last_renewal.or(leading_since).unwrap_or_else(jiff::Timestamp::now);
                let age = Duration::try_from(jiff::Timestamp::now().duration_since(reference)).unwrap_or(Duration::ZERO);
                if age > config.timing.renew_deadline {
                    task.abort();
                    let reason = format!(
                        "the Lease was not renewed for {age:?}, longer than the renew deadline {:?}",
                        config.timing.renew_deadline
                    );
                    return end(true, reason, &metrics, &config);
                }
            }
        }
    }
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

    fn config(duration: u64, retry: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "x".into(),
            namespace: "ns".into(),
            identity: "me".into(),
            timing: LeaderElectionTiming {
                lease_duration_seconds: duration,
                renew_deadline: Duration::from_secs(duration.saturating_sub(1)),
                retry_period_seconds: retry,
            },
        }
    }

    #[test]
    fn invalid_timing_is_an_error_not_a_panic() {
        assert!(lease_params(&config(15, 2)).is_ok());
        assert!(lease_params(&config(2, 2)).is_err());
        assert!(lease_params(&config(15, 0)).is_err());
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
}
