//! The outcome of a run: the readiness labels it patches, the state record it leaves on the
//! host, and the node status it reports (computed from the run alone).

use crate::desired_shims::{READY_LABEL_PREFIX, ready_label};
use crate::installer::cluster::{Cluster, LabelChanges};
use crate::installer::error::InstallerError;
use crate::installer::plan::{Step, plan};
use crate::installer::state::{Phase, State};
use crate::installer::status::{NodeStatus, ShimStatus};

use super::facts::{Facts, failed_plan_input};
use super::run_state::Run;
use super::{Installer, Outcome};

impl<C: Cluster> Installer<C> {
    /// Sets (`Some`) or removes (`None`) these labels on the node, and in the run's copy.
    pub(super) async fn patch_labels(
        &mut self,
        run: &mut Run<'_>,
        keys: &[String],
        value: Option<&str>,
    ) -> Result<(), InstallerError> {
        let changes: LabelChanges = keys
            .iter()
            .map(|key| (key.clone(), value.map(str::to_string)))
            .collect();
        self.cluster.patch_labels(changes).await?;
        for key in keys {
            match value {
                Some(value) => run.labels.insert(key.clone(), value.to_string()),
                None => run.labels.remove(key),
            };
        }
        self.checkpoint()
    }

    /// Removes the readiness labels of these handlers that the node has.
    pub(super) async fn withdraw_labels(
        &mut self,
        run: &mut Run<'_>,
        handlers: &[String],
    ) -> Result<(), InstallerError> {
        let withdraw: Vec<String> = handlers
            .iter()
            .map(|handler| ready_label(handler))
            .filter(|key| run.labels.contains_key(key))
            .collect();
        if withdraw.is_empty() {
            return Ok(());
        }
        self.patch_labels(run, &withdraw, None).await
    }

    /// The run for a desired set that already failed on this node: it is not retried (until it
    /// changes), only the labels of the shims the failed change touched are withdrawn.
    pub(super) async fn report_failure(
        &mut self,
        mut run: Run<'_>,
    ) -> Result<Outcome, InstallerError> {
        let steps = plan(&failed_plan_input(&run));
        for step in &steps {
            if let Step::RemoveLabels(keys) = step {
                self.patch_labels(&mut run, keys, None).await?;
            }
        }
        Ok(outcome(&run, steps, self.host.now()))
    }

    /// Leaves the record on the host: settled config directories removed, active versions
    /// recorded, then the state file written when it changed, or removed once nothing of the
    /// installer is left.
    pub(super) fn finish_record(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        self.remove_created_dirs(&mut run.state)?;
        self.record_active_versions(run, facts)?;
        let path = self.state_path();
        if run.state.is_clean() {
            if run.loaded != State::new() || self.host.exists(&path).unwrap_or(false) {
                self.host
                    .remove_file(&path)
                    .map_err(|err| InstallerError::host("remove", &path, err))?;
            }
        } else if run.state != run.loaded {
            self.store(&run.state)?;
        }
        Ok(())
    }
}

/// What the run did and where the node stands.
pub(super) fn outcome(run: &Run<'_>, steps: Vec<Step>, now: jiff::Timestamp) -> Outcome {
    let shims = shim_statuses(run);
    let (ready, message) = readiness(run, &shims);
    Outcome {
        status: NodeStatus {
            ready,
            mode: run.selection.desired.mode,
            desired_file_sha256: None,
            message,
            shims,
            retained_in_use: run.retained.clone(),
            run_failed: false,
            updated_at: now,
        },
        steps,
        restarted: run.restarted,
    }
}

/// The selected shims as the record has them, then every other shim the record still holds.
fn shim_statuses(run: &Run<'_>) -> Vec<ShimStatus> {
    let state = &run.state;
    let mut shims = Vec::new();
    for (shim, hash) in &run.selection.shims {
        let entry = state.shims.get(&shim.name);
        let phase = match entry {
            Some(e) if e.verified_for(hash) => Phase::Active,
            Some(e) if e.phase == Phase::Failed => Phase::Failed,
            _ => Phase::Installing,
        };
        shims.push(ShimStatus {
            name: shim.name.clone(),
            handler: shim.handler.clone(),
            phase,
            version: entry.and_then(|e| e.active.clone()),
            verified_at: entry.and_then(|e| e.verified_at),
            error: entry.and_then(|e| e.last_error.clone()),
        });
    }
    for (name, entry) in &state.shims {
        if !run.selection.contains(name) {
            shims.push(ShimStatus {
                name: name.clone(),
                handler: entry.handler.clone(),
                phase: entry.phase,
                version: entry.active.clone(),
                verified_at: None,
                error: entry.last_error.clone(),
            });
        }
    }
    shims
}

/// Whether the node is ready, and the status message saying why (not).
fn readiness(run: &Run<'_>, shims: &[ShimStatus]) -> (bool, String) {
    let state = &run.state;
    let selected = &run.selection.shims;
    if let Some(failure) = &state.failure {
        return (false, format!("failed: {}", failure.error));
    }
    if state.config.is_some() {
        return (
            false,
            "a containerd configuration change is in flight".into(),
        );
    }
    if selected.is_empty() {
        return uninstall_readiness(run);
    }
    // The selected shims decide; one that is gone and waits for its pods to end does not.
    let verified = shims
        .iter()
        .filter(|s| run.selection.contains(&s.name))
        .all(|s| s.phase == Phase::Active);
    let all_labelled = selected
        .iter()
        .all(|(s, _)| run.labels.contains_key(&ready_label(&s.handler)));
    if !(verified && all_labelled) {
        return (false, "shims not verified yet".to_string());
    }
    let mut message = format!(
        "{} shim(s) verified: {}",
        selected.len(),
        selected
            .iter()
            .map(|(s, _)| s.handler.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for note in &run.waiting {
        message.push_str("; ");
        message.push_str(note);
    }
    (true, message)
}

/// Readiness with nothing selected: clean once nothing of ours is configured or labelled.
/// Files a running pod still needs keep an uninstall from being done: containerd needs them
/// to stop and remove that pod.
fn uninstall_readiness(run: &Run<'_>) -> (bool, String) {
    let labelled = run
        .labels
        .keys()
        .any(|key| key.starts_with(READY_LABEL_PREFIX));
    let clean = run.state.ownership.is_empty() && !labelled && run.waiting.is_empty();
    let message = if !run.waiting.is_empty() {
        format!(
            "removing the installer's configuration; {}",
            run.waiting.join("; ")
        )
    } else if clean {
        if run.retained.is_empty() {
            "clean: nothing of the installer is left on this node".to_string()
        } else {
            format!(
                "clean: configuration removed; {} version(s) kept while running shims use them",
                run.retained.len()
            )
        }
    } else {
        "removing the installer's configuration".to_string()
    };
    (clean, message)
}
