//! The outcome of a run: the readiness labels it patches, the state record it leaves on the
//! host, and the node status it reports (computed from the run alone).

use crate::desired_shims::{Mode, READY_LABEL_PREFIX, ready_label};
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
        self.remove_state_dir(run);
        Ok(())
    }

    /// An uninstall that left nothing (no record, no version a running shim still uses, no pod
    /// waited for) removes the installer's directory too. Only an uninstall: its pod never
    /// installs again (a new desired set comes with a new pod, whose host mount creates the
    /// directory anew), whereas a node merely deselected may be selected again under the same
    /// pod. A directory that stays is not worth failing the uninstall for: it is logged.
    fn remove_state_dir(&self, run: &Run<'_>) {
        let done = self.settings.remove_state_dir
            && run.selection.desired.mode == Mode::Uninstall
            && run.state.is_clean()
            && run.retained.is_empty()
            && run.waiting.is_empty();
        if !done {
            return;
        }
        let dir = self.settings.layout.state_dir();
        if let Err(err) = self.host.remove_state_dir(dir) {
            tracing::warn!(error = %err, dir = %dir.display(), "cannot remove the installer's directory");
        }
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
            waiting_for_pods: !run.waiting.is_empty(),
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        Bed, desired, facts_for, node, owned, recorded, run_of, shim, txn,
    };
    use super::*;
    use crate::desired_shims::{DesiredShims, Rollout};
    use crate::installer::cluster::ClusterEvent;
    use crate::installer::state::{Failure, ShimState};

    const NOW: jiff::Timestamp = jiff::Timestamp::UNIX_EPOCH;

    fn uninstall() -> DesiredShims {
        DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        })
    }

    /// The status of a run of `set` whose record has every selected shim verified.
    fn verified(set: &DesiredShims, labelled: bool) -> Run<'_> {
        let labels: Vec<(String, &str)> = set
            .shims
            .iter()
            .filter(|_| labelled)
            .map(|s| (ready_label(&s.handler), "ready"))
            .collect();
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let mut run = run_of(set, State::new(), &labels);
        run.mark_verified(NOW);
        run
    }

    fn message(run: &Run<'_>) -> (bool, String) {
        let status = outcome(run, vec![], NOW).status;
        (status.ready, status.message)
    }

    #[test]
    fn ready_means_verified_and_labelled() {
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm-handler")]);
        let mut run = verified(&set, true);
        assert_eq!(
            message(&run),
            (true, "2 shim(s) verified: spin, wasm-handler".into())
        );
        run.waiting = vec!["shim old stays while 1 pod(s) of its runtime handler run".into()];
        assert_eq!(
            message(&run).1,
            "2 shim(s) verified: spin, wasm-handler; shim old stays while 1 pod(s) of its runtime handler run"
        );
        assert_eq!(
            message(&verified(&set, false)),
            (false, "shims not verified yet".into())
        );
        let mut unverified = verified(&set, true);
        unverified.state.shims.remove("wasm");
        assert!(!message(&unverified).0);
    }

    #[test]
    fn a_failure_or_a_change_in_flight_is_not_ready() {
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = verified(&set, true);
        run.state.config = Some(txn());
        assert_eq!(
            message(&run),
            (
                false,
                "a containerd configuration change is in flight".into()
            )
        );
        run.state.failure = Some(Failure {
            node_hash: run.selection.node_hash.clone(),
            error: "boom".into(),
            at: NOW,
        });
        assert_eq!(message(&run), (false, "failed: boom".into()));
    }

    #[test]
    fn an_uninstall_is_clean_once_nothing_of_ours_is_configured_labelled_or_running() {
        let set = uninstall();
        let run = run_of(&set, State::new(), &[]);
        assert_eq!(
            message(&run),
            (
                true,
                "clean: nothing of the installer is left on this node".into()
            )
        );
        let mut retained = run_of(&set, State::new(), &[]);
        retained.retained = vec!["/var/lib/x/versions/spin/v1".into()];
        assert_eq!(
            message(&retained),
            (
                true,
                "clean: configuration removed; 1 version(s) kept while running shims use them"
                    .into()
            )
        );
        let mut configured = run_of(&set, State::new(), &[]);
        configured.state.ownership = owned("/etc/containerd/config.toml");
        assert_eq!(
            message(&configured),
            (false, "removing the installer's configuration".into())
        );
        let label = ready_label("spin");
        let labelled = run_of(&set, State::new(), &[(&label, "ready")]);
        assert!(!message(&labelled).0);
        let mut waiting = run_of(&set, State::new(), &[]);
        waiting.waiting = vec!["shim spin stays while 1 pod(s) of its runtime handler run".into()];
        assert_eq!(
            message(&waiting),
            (
                false,
                "removing the installer's configuration; shim spin stays while 1 pod(s) of its runtime handler run"
                    .into()
            )
        );
    }

    #[test]
    fn the_status_lists_selected_shims_then_the_rest_of_the_record() {
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut run = run_of(&set, State::new(), &[]);
        let hash = run.selection.find("spin").unwrap().1.clone();
        run.state.shims.insert(
            "spin".into(),
            ShimState {
                active: Some("v1".into()),
                ..recorded("spin", &hash)
            },
        );
        run.state.shims.insert(
            "wasm".into(),
            ShimState {
                phase: Phase::Failed,
                last_error: Some("boom".into()),
                ..recorded("wasm", "other")
            },
        );
        run.state.shims.insert(
            "old".into(),
            ShimState {
                phase: Phase::Uninstalling,
                ..recorded("old-handler", "h")
            },
        );
        run.retained = vec!["/x".into()];
        run.restarted = true;
        let outcome = outcome(&run, vec![Step::CollectGarbage], NOW);
        let shims: Vec<(&str, &str, Phase, Option<&str>)> = outcome
            .status
            .shims
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.handler.as_str(),
                    s.phase,
                    s.error.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            shims,
            [
                ("spin", "spin", Phase::Active, None),
                ("wasm", "wasm", Phase::Failed, Some("boom")),
                ("old", "old-handler", Phase::Uninstalling, None),
            ]
        );
        assert_eq!(outcome.status.shims[0].version.as_deref(), Some("v1"));
        assert_eq!(outcome.status.retained_in_use, ["/x"]);
        assert_eq!(outcome.status.updated_at, NOW);
        assert_eq!(outcome.steps, [Step::CollectGarbage]);
        assert!(outcome.restarted);
    }

    #[tokio::test]
    async fn labels_are_patched_on_the_node_and_in_the_run() {
        let spin = ready_label("spin");
        let wasm = ready_label("wasm");
        let mut bed = Bed::new(node(&[(&spin, "ready")]));
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut run = run_of(&set, State::new(), &[(&spin, "ready")]);
        bed.installer
            .patch_labels(&mut run, std::slice::from_ref(&wasm), Some("ready"))
            .await
            .unwrap();
        assert_eq!(
            bed.cluster.labels().get(&wasm).map(String::as_str),
            Some("ready")
        );
        assert_eq!(run.labels.get(&wasm).map(String::as_str), Some("ready"));

        let events = bed.cluster.events().len();
        bed.installer
            .withdraw_labels(&mut run, &["absent".into()])
            .await
            .unwrap();
        assert_eq!(bed.cluster.events().len(), events, "nothing to withdraw");
        bed.installer
            .withdraw_labels(&mut run, &["spin".into(), "absent".into()])
            .await
            .unwrap();
        assert_eq!(
            bed.cluster.events().last(),
            Some(&ClusterEvent::Label {
                key: spin.clone(),
                value: None
            })
        );
        assert!(!run.labels.contains_key(&spin));
        assert!(!bed.cluster.labels().contains_key(&spin));
    }

    #[test]
    fn the_record_is_stored_when_changed_and_removed_once_clean() {
        let mut bed = Bed::new(node(&[]));
        let set = uninstall();
        let mut run = run_of(&set, State::new(), &[]);
        let facts = facts_for(&run, "v1", &[]);
        bed.installer.finish_record(&mut run, &facts).unwrap();
        assert_eq!(bed.stored(), None, "a clean node gets no state file");

        run.state.shims.insert("old".into(), recorded("old", "h"));
        bed.installer.finish_record(&mut run, &facts).unwrap();
        assert_eq!(bed.stored(), Some(run.state.clone()));

        let mut next = run_of(&set, run.state.clone(), &[]);
        next.state.shims.clear();
        bed.installer.finish_record(&mut next, &facts).unwrap();
        assert_eq!(bed.stored(), None, "removed once clean");
    }
}
