//! A node whose shims gardener-node-agent delivers (`delivery: osc`): the installer writes
//! nothing on the host and restarts nothing. It labels the node for a handler only once
//! containerd serves it and a canary sandbox of it starts, and withdraws the label when that
//! stops being true; the agent's own pace (it applies a changed OSC with a delay per node)
//! is simply waited for.

use std::collections::{BTreeMap, BTreeSet};

use crate::desired_shims::{
    DesiredShims, Mode, READY_LABEL_PREFIX, READY_LABEL_VALUE, ready_label,
};
use crate::installer::cluster::{Cluster, LabelChanges};
use crate::installer::containerd::ExpectedRuntime;
use crate::installer::error::InstallerError;
use crate::installer::state::Phase;
use crate::installer::status::{NodeStatus, ShimStatus};

use super::handover::HandOver;
use super::selection::select;
use super::{Installer, Outcome};

impl<C: Cluster> Installer<C> {
    /// One run for a set the node agent delivers: verify each selected handler, label the
    /// verified ones, withdraw every other readiness label.
    pub async fn follow(&mut self, desired: &DesiredShims) -> Result<Outcome, InstallerError> {
        // What the installer installed itself (before a switch from `daemonset`) is handed to
        // the agent first, once the agent serves it. A hand-over that cannot go on now (an
        // unreadable configuration, a cluster error) leaves that installation as it is;
        // verifying and labelling go on.
        let handed = match self.hand_over(desired).await {
            Ok(handed) => handed,
            Err(err) => {
                tracing::warn!(error = %err, "cannot hand the installer's own installation to gardener-node-agent now");
                HandOver::Failed(err.to_string())
            }
        };
        let labels = self.cluster.node_labels().await?;
        let selected = select(desired, &labels);
        let served = match self.host.served_handlers() {
            Ok(served) => served,
            // containerd does not answer: no handler on this node works now.
            Err(e) => {
                let changes = label_changes(&labels, &BTreeSet::new());
                if !changes.is_empty() {
                    self.cluster.patch_labels(changes).await?;
                }
                return Err(InstallerError::command("crictl info", e));
            }
        };
        let instance = self.host.containerd_instance();
        let mut shims = Vec::new();
        let mut verified = BTreeSet::new();
        for shim in &selected {
            let present = served.as_ref().is_none_or(|s| s.contains(&shim.handler));
            let now = self.host.now();
            let (phase, verified_at, error) = if !present {
                self.canaries.forget(&shim.handler);
                (Phase::Installing, None, None)
            } else if let Some(at) = self
                .canaries
                .vouching(instance.as_deref(), &shim.handler, now)
            {
                (Phase::Active, Some(at), None)
            } else {
                let expected = ExpectedRuntime::new(&shim.handler, &shim.runtime_type, "");
                match self.host.verify_containerd(&[expected]) {
                    Ok(()) => {
                        self.canaries
                            .started(instance.as_deref(), &shim.handler, now);
                        (Phase::Active, Some(now), None)
                    }
                    Err(e) => {
                        self.canaries.forget(&shim.handler);
                        (Phase::Failed, None, Some(e.to_string()))
                    }
                }
            };
            if phase == Phase::Active {
                verified.insert(ready_label(&shim.handler));
            }
            shims.push(ShimStatus {
                name: shim.name.clone(),
                handler: shim.handler.clone(),
                phase,
                version: Some(shim.version.clone()),
                verified_at,
                error,
            });
        }
        let changes = label_changes(&labels, &verified);
        if !changes.is_empty() {
            self.cluster.patch_labels(changes).await?;
        }
        let waiting: Vec<&str> = shims
            .iter()
            .filter(|s| s.phase == Phase::Installing)
            .map(|s| s.handler.as_str())
            .collect();
        let failed = shims.iter().filter(|s| s.phase == Phase::Failed).count();
        let ready = shims.iter().all(|s| s.phase == Phase::Active);
        let mut message = if ready {
            format!(
                "verified: {} handler(s) delivered by gardener-node-agent",
                shims.len()
            )
        } else if failed > 0 {
            format!("{failed} handler(s) delivered by gardener-node-agent failed verification")
        } else {
            format!(
                "waiting for gardener-node-agent to apply the OperatingSystemConfig: containerd does not serve {} yet",
                waiting.join(", ")
            )
        };
        let (retained_in_use, waiting_for_pods, steps, restarted) = match handed {
            HandOver::Nothing => (Vec::new(), false, Vec::new(), false),
            HandOver::Failed(err) => {
                message.push_str(&format!(
                    "; handing the installer's own installation to gardener-node-agent failed: {err}"
                ));
                (Vec::new(), false, Vec::new(), false)
            }
            HandOver::Waiting(own) => {
                message.push_str(&format!(
                    "; the installer's own installation of {} serves until gardener-node-agent has applied it",
                    own.join(", ")
                ));
                (Vec::new(), false, Vec::new(), false)
            }
            HandOver::Done(outcome) => {
                if outcome.status.waiting_for_pods {
                    message.push_str(&format!(
                        "; handed over to gardener-node-agent, {}",
                        outcome.status.message
                    ));
                }
                (
                    outcome.status.retained_in_use,
                    outcome.status.waiting_for_pods,
                    outcome.steps,
                    outcome.restarted,
                )
            }
        };
        Ok(Outcome {
            status: NodeStatus {
                ready,
                mode: Mode::Install,
                desired_file_sha256: None,
                message,
                shims,
                retained_in_use,
                run_failed: false,
                waiting_for_pods,
                updated_at: self.host.now(),
            },
            steps,
            restarted,
        })
    }
}

/// How long a canary sandbox vouches for its handler while the same containerd process runs.
/// containerd reads its configuration only when it starts, so within one process a handler
/// that started a sandbox keeps the configuration it had; what a canary still catches then is
/// a file removed or broken underneath, and this bounds how late.
pub(super) const CANARY_VALIDITY: jiff::SignedDuration = jiff::SignedDuration::from_secs(600);

/// The handlers whose canary sandbox started under the running containerd process, and when.
/// A follow run wakes on every change in containerd's configuration directory and at least
/// once a minute; without this it would start a sandbox per handler each time.
#[derive(Debug, Default)]
pub(super) struct Canaries {
    instance: Option<String>,
    started: BTreeMap<String, jiff::Timestamp>,
}

impl Canaries {
    /// When `handler`'s canary started, if that vouches for it now: under the same containerd
    /// `instance` (a known one) and within [`CANARY_VALIDITY`].
    fn vouching(
        &mut self,
        instance: Option<&str>,
        handler: &str,
        now: jiff::Timestamp,
    ) -> Option<jiff::Timestamp> {
        if instance.is_none() || self.instance.as_deref() != instance {
            self.instance = None;
            self.started.clear();
            return None;
        }
        self.started
            .get(handler)
            .copied()
            .filter(|at| now.duration_since(*at) < CANARY_VALIDITY)
    }

    fn started(&mut self, instance: Option<&str>, handler: &str, at: jiff::Timestamp) {
        let Some(instance) = instance else {
            return;
        };
        if self.instance.as_deref() != Some(instance) {
            self.instance = Some(instance.to_string());
            self.started.clear();
        }
        self.started.insert(handler.to_string(), at);
    }

    fn forget(&mut self, handler: &str) {
        self.started.remove(handler);
    }
}

/// Set the verified labels, remove every other readiness label the node has.
fn label_changes(
    labels: &std::collections::BTreeMap<String, String>,
    verified: &BTreeSet<String>,
) -> LabelChanges {
    let mut changes = LabelChanges::new();
    for key in verified {
        if labels.get(key).map(String::as_str) != Some(READY_LABEL_VALUE) {
            changes.insert(key.clone(), Some(READY_LABEL_VALUE.to_string()));
        }
    }
    for key in labels.keys() {
        if key.starts_with(READY_LABEL_PREFIX) && !verified.contains(key) {
            changes.insert(key.clone(), None);
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::desired_shims::Delivery;
    use crate::installer::converge::test_support::{Bed, desired, node, shim};

    fn osc(shims: Vec<crate::desired_shims::DesiredShim>) -> DesiredShims {
        DesiredShims {
            delivery: Delivery::Osc,
            ..desired(shims)
        }
    }

    #[test]
    fn only_verified_handlers_are_labelled_and_stale_labels_go() {
        let labels = BTreeMap::from([
            (ready_label("old"), "ready".to_string()),
            (ready_label("crun"), "ready".to_string()),
            ("other".to_string(), "x".to_string()),
        ]);
        let verified = BTreeSet::from([ready_label("crun"), ready_label("spin")]);
        let changes = label_changes(&labels, &verified);
        assert_eq!(
            changes,
            LabelChanges::from([
                (ready_label("old"), None),
                (ready_label("spin"), Some("ready".to_string())),
            ])
        );
    }

    #[test]
    fn a_canary_vouches_for_its_handler_within_one_containerd_process_for_a_while() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let later = |secs: i64| t0 + jiff::SignedDuration::from_secs(secs);
        let mut canaries = Canaries::default();
        assert_eq!(canaries.vouching(Some("a"), "spin", t0), None);
        canaries.started(Some("a"), "spin", t0);
        assert_eq!(canaries.vouching(Some("a"), "spin", later(599)), Some(t0));
        assert_eq!(canaries.vouching(Some("a"), "wasm", later(1)), None);
        // Too old: the next run starts one again.
        assert_eq!(canaries.vouching(Some("a"), "spin", later(600)), None);
        // Another containerd process: nothing vouches, also not after it returns.
        canaries.started(Some("a"), "spin", t0);
        assert_eq!(canaries.vouching(Some("b"), "spin", later(1)), None);
        assert_eq!(canaries.vouching(Some("a"), "spin", later(2)), None);
        // A process the host cannot tell never lets a canary vouch.
        canaries.started(None, "spin", t0);
        assert_eq!(canaries.vouching(None, "spin", later(1)), None);
        // A failed or missing handler is forgotten.
        canaries.started(Some("c"), "spin", t0);
        canaries.forget("spin");
        assert_eq!(canaries.vouching(Some("c"), "spin", later(1)), None);
    }

    #[tokio::test]
    async fn without_containerd_every_label_goes_and_nothing_is_written() {
        let mut bed = Bed::new(node(&[(&ready_label("spin"), "ready")]));
        let before = bed.tree();
        let err = bed
            .installer
            .follow(&osc(vec![shim("spin", "spin")]))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("crictl info"), "{err}");
        assert!(!bed.cluster.labels().contains_key(&ready_label("spin")));
        assert_eq!(bed.tree(), before, "nothing written on the host");
        assert!(bed.host.events().is_empty());
    }
}
