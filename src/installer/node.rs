//! The Kubernetes side of the installer: its own Node (labels, watched by name), and the
//! cluster-wide restart budget as Lease slots `containerd-shim-restart-<i>` in the installer's
//! namespace.
//!
//! A slot is held by the node name (stable across pod restarts, so a replacement pod on the
//! same node resumes its own slot). It is taken by creating the Lease, or by updating a free
//! one (no holder, or its renewal older than its duration) with the resourceVersion read, so
//! two nodes racing for one slot cannot both win. While held, it is renewed every third of its
//! duration; a holder that dies stops renewing and loses the slot after the duration. The RBAC
//! of the bundle allows exactly this: create Leases, and get/update/patch the slot names.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::desired_shims::{FAILURES_ANNOTATION, restart_lease};

use super::cluster::{Cluster, LabelChanges, own_labels_only};
use super::error::InstallerError;

/// Lease timing of the restart budget.
#[derive(Clone, Copy, Debug)]
pub struct BudgetTiming {
    /// `leaseDurationSeconds`: how long a silent holder keeps its slot.
    pub lease_duration: Duration,
    /// How often a waiting node looks for a free slot.
    pub retry_period: Duration,
}

impl Default for BudgetTiming {
    fn default() -> Self {
        BudgetTiming {
            lease_duration: Duration::from_secs(60),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The real cluster: this node's Node object and the Leases of the installer's namespace.
#[derive(Clone)]
pub struct KubeCluster {
    nodes: Api<Node>,
    leases: Api<Lease>,
    node: String,
    timing: BudgetTiming,
}

/// A held restart slot; dropping it stops the renewal without releasing (as a crash would).
pub struct KubeSlot {
    pub name: String,
    renewer: tokio::task::JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

impl KubeSlot {
    /// Whether another holder took the slot while we held it (our renewals failed too long).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for KubeSlot {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

fn kube_error(what: &str, err: kube::Error) -> InstallerError {
    InstallerError::Kube {
        action: what.to_string(),
        source: Box::new(err),
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

impl KubeCluster {
    pub fn new(client: Client, namespace: &str, node: &str, timing: BudgetTiming) -> Self {
        KubeCluster {
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, namespace),
            node: node.to_string(),
            timing,
        }
    }

    pub fn node_name(&self) -> &str {
        &self.node
    }

    pub fn nodes(&self) -> &Api<Node> {
        &self.nodes
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.timing.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One pass over the slots; `Some` when one was taken.
    async fn try_acquire(&self, slots: u32) -> Result<Option<(String, Lease)>, InstallerError> {
        for slot in 0..slots.max(1) {
            let name = restart_lease(slot);
            let now = MicroTime(jiff::Timestamp::now());
            let existing = self
                .leases
                .get_opt(&name)
                .await
                .map_err(|err| kube_error(&format!("get Lease {name}"), err))?;
            let Some(mut lease) = existing else {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.node.clone()),
                        lease_duration_seconds: Some(self.duration_seconds()),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                match self.leases.create(&PostParams::default(), &lease).await {
                    Ok(created) => return Ok(Some((name, created))),
                    Err(err) if is_status(&err, 409) => continue,
                    Err(err) => return Err(kube_error(&format!("create Lease {name}"), err)),
                }
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
            let mine = holder.as_deref() == Some(self.node.as_str());
            if holder.is_some() && !mine && !expired(&spec) {
                continue;
            }
            let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(self.node.clone()),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: if mine {
                    spec.acquire_time
                } else {
                    Some(now.clone())
                },
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            });
            // The resourceVersion read above makes this a compare-and-swap.
            match self
                .leases
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(updated) => return Ok(Some((name, updated))),
                Err(err) if is_status(&err, 409) => continue,
                Err(err) => return Err(kube_error(&format!("update Lease {name}"), err)),
            }
        }
        Ok(None)
    }
}

/// Whether a holder stopped renewing for longer than its lease duration.
fn expired(spec: &LeaseSpec) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    let deadline = renewed
        .0
        .checked_add(jiff::SignedDuration::from_secs(duration))
        .unwrap_or(renewed.0);
    deadline < jiff::Timestamp::now()
}

/// Renews the slot until aborted; marks it lost when someone else holds it.
async fn renew(
    leases: Api<Lease>,
    name: String,
    node: String,
    every: Duration,
    lost: Arc<AtomicBool>,
) {
    loop {
        tokio::time::sleep(every).await;
        let Ok(Some(mut lease)) = leases.get_opt(&name).await else {
            continue;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(node.as_str()) {
            tracing::error!(lease = %name, holder = ?spec.holder_identity, "restart slot lost");
            lost.store(true, Ordering::SeqCst);
            return;
        }
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        lease.spec = Some(spec);
        if let Err(err) = leases.replace(&name, &PostParams::default(), &lease).await {
            tracing::warn!(lease = %name, error = %err, "renewing the restart slot failed");
        }
    }
}

impl Cluster for KubeCluster {
    type Slot = KubeSlot;

    async fn node_labels(&self) -> Result<BTreeMap<String, String>, InstallerError> {
        let node = self
            .nodes
            .get(&self.node)
            .await
            .map_err(|err| kube_error(&format!("get Node {}", self.node), err))?;
        Ok(node.metadata.labels.unwrap_or_default())
    }

    async fn patch_labels(&self, changes: LabelChanges) -> Result<(), InstallerError> {
        let changes = own_labels_only(changes);
        if changes.is_empty() {
            return Ok(());
        }
        // A merge patch of only our keys: other labels are untouched; `null` removes.
        let patch = serde_json::json!({ "metadata": { "labels": changes } });
        self.nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|err| kube_error(&format!("patch labels of Node {}", self.node), err))?;
        tracing::info!(node = %self.node, ?changes, "node labels changed");
        Ok(())
    }

    async fn publish_failures(&self, failures: Option<String>) -> Result<(), InstallerError> {
        let patch = serde_json::json!({
            "metadata": { "annotations": { FAILURES_ANNOTATION: failures } }
        });
        self.nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|err| kube_error(&format!("annotate Node {}", self.node), err))?;
        Ok(())
    }

    async fn acquire_restart_slot(&self, slots: u32) -> Result<KubeSlot, InstallerError> {
        let mut waited = false;
        loop {
            if let Some((name, _)) = self.try_acquire(slots).await? {
                tracing::info!(lease = %name, "holding a containerd restart slot");
                let lost = Arc::new(AtomicBool::new(false));
                let renewer = tokio::spawn(renew(
                    self.leases.clone(),
                    name.clone(),
                    self.node.clone(),
                    self.timing.lease_duration / 3,
                    lost.clone(),
                ));
                return Ok(KubeSlot {
                    name,
                    renewer,
                    lost,
                });
            }
            if !waited {
                tracing::info!(slots, "all containerd restart slots are taken; waiting");
                waited = true;
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    async fn release_restart_slot(&self, slot: KubeSlot) -> Result<(), InstallerError> {
        slot.renewer.abort();
        let name = slot.name.clone();
        for _ in 0..5 {
            let Some(mut lease) = self
                .leases
                .get_opt(&name)
                .await
                .map_err(|err| kube_error(&format!("get Lease {name}"), err))?
            else {
                return Ok(());
            };
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.node.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
            lease.spec = Some(spec);
            match self
                .leases
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::info!(lease = %name, "released the containerd restart slot");
                    return Ok(());
                }
                Err(err) if is_status(&err, 409) => continue,
                Err(err) => return Err(kube_error(&format!("release Lease {name}"), err)),
            }
        }
        Err(InstallerError::Cluster(format!(
            "could not release Lease {name}: it kept changing"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_follows_renewal_and_duration() {
        let now = jiff::Timestamp::now();
        let spec = |renewed_secs_ago: i64, duration: i32| LeaseSpec {
            renew_time: Some(MicroTime(
                now.checked_sub(jiff::SignedDuration::from_secs(renewed_secs_ago))
                    .unwrap(),
            )),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec(5, 60)));
        assert!(expired(&spec(61, 60)));
        assert!(expired(&LeaseSpec::default()));
    }
}
