//! Gardener's extension heartbeat: the leader renews `Lease gardener-extension-heartbeat` in
//! the extension's namespace every interval. gardenlet treats the extension's health
//! conditions as outdated (shoot condition `Unknown`) when this Lease is older than its
//! staleness threshold or missing, so without it every shoot using the extension eventually
//! reports an unknown health status.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::context::ControllerContext;
use super::metrics::ReconcileResult;

/// The name gardenlet looks for.
pub const HEARTBEAT_LEASE_NAME: &str = "gardener-extension-heartbeat";

/// The controller's name, for `--controllers`/`--disable-controllers`.
pub const HEARTBEAT_CONTROLLER: &str = "heartbeat";

/// The first retry after a failed renewal; doubled per failure up to the interval.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Where and how the heartbeat is written.
#[derive(Clone, Debug)]
pub struct HeartbeatConfig {
    pub namespace: String,
    /// `holderIdentity`: the extension's name.
    pub holder: String,
    pub interval: Duration,
}

/// Renews the heartbeat every interval while this replica leads, until shutdown.
pub(crate) async fn run(ctx: ControllerContext, config: HeartbeatConfig) {
    if ctx.wait_until_leader().await.is_err() {
        return;
    }
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &config.namespace);
    let mut retry = FIRST_RETRY;
    loop {
        let started = Instant::now();
        let next = match renew(&leases, &config).await {
            Ok(()) => {
                ctx.metrics.observe_reconcile(
                    HEARTBEAT_CONTROLLER,
                    ReconcileResult::RequeueAfter,
                    started.elapsed(),
                );
                tracing::debug!(namespace = %config.namespace, name = HEARTBEAT_LEASE_NAME, "Renewed heartbeat");
                retry = FIRST_RETRY;
                config.interval
            }
            Err(e) => {
                ctx.metrics.observe_reconcile(
                    HEARTBEAT_CONTROLLER,
                    ReconcileResult::Error,
                    started.elapsed(),
                );
                tracing::error!(error = %e, namespace = %config.namespace, name = HEARTBEAT_LEASE_NAME, "Failed to renew heartbeat");
                let wait = retry.min(config.interval);
                retry = (retry * 2).min(config.interval);
                wait
            }
        };
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = tokio::time::sleep(next) => {}
        }
    }
}

/// Writes the heartbeat: a merge patch of the three fields, or a create when the Lease does
/// not exist yet. (Gardener's Go controller creates first and patches on AlreadyExists; the
/// Lease exists on every beat but the first, so patching first saves a request per beat and
/// writes the same object.)
pub async fn renew(leases: &Api<Lease>, config: &HeartbeatConfig) -> Result<(), kube::Error> {
    let now = MicroTime(jiff::Timestamp::now());
    let duration = i32::try_from(config.interval.as_secs()).unwrap_or(i32::MAX);
    let params = PatchParams {
        field_manager: Some(field_manager(&config.holder)),
        ..PatchParams::default()
    };
    let patch = json!({
        "spec": {
            "holderIdentity": config.holder,
            "leaseDurationSeconds": duration,
            "renewTime": now,
        }
    });
    match leases
        .patch(HEARTBEAT_LEASE_NAME, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(e),
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(HEARTBEAT_LEASE_NAME.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(config.holder.clone()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }),
    };
    let post = PostParams {
        field_manager: Some(field_manager(&config.holder)),
        ..PostParams::default()
    };
    match leases.create(&post, &lease).await {
        Ok(_) => Ok(()),
        // Another writer created it between our patch and create; patch it now.
        Err(kube::Error::Api(status)) if status.code == 409 => leases
            .patch(HEARTBEAT_LEASE_NAME, &params, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    }
}

fn field_manager(extension: &str) -> String {
    format!("gardener-extension-{extension}")
}
