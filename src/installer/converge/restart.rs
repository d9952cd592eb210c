//! Restarting containerd, always while holding a slot of the cluster-wide restart budget: into
//! a validated config change (and back out of it when the new config does not verify), to
//! finish a rollback an earlier run began, or to repair a node whose verification was lost.

use crate::installer::cluster::Cluster;
use crate::installer::containerd::ExpectedRuntime;
use crate::installer::error::{InstallerError, RestartError};
use crate::installer::host::HostError;
use crate::installer::state::TxnPhase;

use super::Installer;
use super::facts::Facts;
use super::run_state::Run;

impl<C: Cluster> Installer<C> {
    /// Restarts containerd into the journaled change and verifies it; rolls back on failure.
    pub(super) async fn restart_and_verify(
        &mut self,
        run: &mut Run<'_>,
    ) -> Result<(), InstallerError> {
        let slot = self
            .cluster
            .acquire_restart_slot(run.selection.desired.rollout.max_concurrent_restarts)
            .await?;
        let result = self.restart_holding_slot(run).await;
        match result {
            // A crash keeps the slot until its lease expires; only a finished run releases it.
            #[cfg(any(test, feature = "test-util"))]
            Err(InstallerError::Interrupted(at)) => Err(InstallerError::Interrupted(at)),
            other => {
                self.cluster.release_restart_slot(slot).await?;
                other
            }
        }
    }

    async fn restart_holding_slot(&mut self, run: &mut Run<'_>) -> Result<(), InstallerError> {
        let Some(txn) = run.state.config.as_mut() else {
            return Ok(());
        };
        txn.phase = TxnPhase::Restarting;
        let runtimes = txn.runtimes.clone();
        self.store(&run.state)?;
        let restarted = self.restart().await.map_err(RestartError::Restart);
        self.checkpoint()?;
        let verified = match restarted {
            Ok(()) => self.verify(runtimes).await.map_err(RestartError::Verify),
            Err(err) => Err(err),
        };
        match verified {
            Ok(()) => {
                let state = &mut run.state;
                if let Some(txn) = state.config.take() {
                    state.ownership = txn.ownership_after;
                    for dir in txn.created_dirs {
                        if !state.created_dirs.contains(&dir) {
                            state.created_dirs.push(dir);
                        }
                    }
                }
                state.last_restart = Some(self.host.now());
                run.mark_verified(self.host.now());
                self.store(&run.state)
            }
            Err(error) => self.roll_back(run, error.to_string()).await,
        }
    }

    /// Finishes the rollback an earlier run began (its verification failed, then it died).
    pub(super) async fn finish_rollback(
        &mut self,
        run: &mut Run<'_>,
    ) -> Result<(), InstallerError> {
        let error = match run.state.config.as_ref().map(|t| &t.phase) {
            Some(TxnPhase::RollingBack { error }) => error.clone(),
            _ => "an earlier run's verification failed".to_string(),
        };
        let slot = self
            .cluster
            .acquire_restart_slot(run.selection.desired.rollout.max_concurrent_restarts)
            .await?;
        let result = self.roll_back(run, error).await;
        self.cluster.release_restart_slot(slot).await?;
        result
    }

    /// Verifies without a restart; when that fails (verified state was lost, or containerd
    /// runs an old config) one restart within the budget is the repair.
    pub(super) async fn verify_or_repair(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        match self.verify(facts.runtimes_expected()).await {
            Ok(()) => {
                run.mark_verified(self.host.now());
                self.store(&run.state)
            }
            Err(first) => {
                run.restarted = true;
                tracing::warn!(error = %first, "verification failed; restarting containerd");
                let slot = self
                    .cluster
                    .acquire_restart_slot(run.selection.desired.rollout.max_concurrent_restarts)
                    .await?;
                let result = self.repair_restart(run, facts, first).await;
                self.cluster.release_restart_slot(slot).await?;
                result
            }
        }
    }

    /// Restores the journaled files and symlinks, restarts containerd into them, and marks the
    /// node failed for this desired set. Returns the error that caused it.
    async fn roll_back(&mut self, run: &mut Run<'_>, error: String) -> Result<(), InstallerError> {
        let Some(mut txn) = run.state.config.clone() else {
            return Ok(());
        };
        txn.phase = TxnPhase::RollingBack {
            error: error.clone(),
        };
        run.state.config = Some(txn.clone());
        self.store(&run.state)?;
        self.restore_files(&txn)?;
        run.state.ownership = txn.ownership_before.clone();
        self.store(&run.state)?;
        let before: Vec<ExpectedRuntime> = txn
            .ownership_before
            .handlers()
            .map(ExpectedRuntime::owned)
            .collect();
        let failure = InstallerError::RestartFailed {
            verify: error,
            rollback: self.restart_into(before).await.err().map(Box::new),
        };
        run.state.config = None;
        run.state.last_restart = Some(self.host.now());
        run.mark_failed(&txn.shims, &failure.to_string(), self.host.now());
        self.store(&run.state)?;
        let handlers: Vec<String> = txn
            .shims
            .iter()
            .filter_map(|name| run.selection.handler_of(name, &run.state))
            .collect();
        self.withdraw_labels(run, &handlers).await?;
        Err(failure)
    }

    /// A restart without a config change (lost verification); on failure the node is marked
    /// failed (there is no earlier config to return to).
    async fn repair_restart(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
        first: HostError,
    ) -> Result<(), InstallerError> {
        match self.restart_into(facts.runtimes_expected()).await {
            Ok(()) => {
                let now = self.host.now();
                run.state.last_restart = Some(now);
                run.mark_verified(now);
                self.store(&run.state)
            }
            Err(restart) => {
                let failure = InstallerError::RepairFailed {
                    verify: Box::new(first),
                    restart: Box::new(restart),
                };
                let names: Vec<String> = run
                    .selection
                    .shims
                    .iter()
                    .map(|(s, _)| s.name.clone())
                    .collect();
                run.state.last_restart = Some(self.host.now());
                run.mark_failed(&names, &failure.to_string(), self.host.now());
                self.store(&run.state)?;
                let handlers: Vec<String> = run
                    .selection
                    .shims
                    .iter()
                    .map(|(s, _)| s.handler.clone())
                    .collect();
                self.withdraw_labels(run, &handlers).await?;
                Err(failure)
            }
        }
    }

    /// Restarts containerd and, when it came back, verifies it serves exactly `runtimes`.
    async fn restart_into(&mut self, runtimes: Vec<ExpectedRuntime>) -> Result<(), RestartError> {
        self.restart().await.map_err(RestartError::Restart)?;
        self.verify(runtimes).await.map_err(RestartError::Verify)
    }

    async fn restart(&mut self) -> Result<(), HostError> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || host.restart_containerd())
            .await
            .map_err(HostError::Aborted)
            .and_then(|result| result)
    }

    async fn verify(&mut self, runtimes: Vec<ExpectedRuntime>) -> Result<(), HostError> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || host.verify_containerd(&runtimes))
            .await
            .map_err(HostError::Aborted)
            .and_then(|result| result)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Bed, desired, facts_for, node, recorded, run_of, shim, txn};
    use super::*;
    use crate::desired_shims::ready_label;
    use crate::installer::cluster::ClusterEvent;
    use crate::installer::host::{HostEvent, ScriptedOutcome};
    use crate::installer::state::{ConfigTxn, Phase, State};

    /// A change for spin journaled and validated.
    fn journaled() -> State {
        let mut state = State::new();
        state
            .shims
            .insert("spin".into(), recorded("spin", "earlier"));
        state.config = Some(ConfigTxn {
            phase: TxnPhase::Validated,
            shims: vec!["spin".into()],
            ..txn()
        });
        state
    }

    /// A node whose spin label says ready.
    fn bed() -> Bed {
        Bed::new(node(&[(&ready_label("spin"), "ready")]))
    }

    #[tokio::test]
    async fn a_restart_that_fails_twice_is_rolled_back_marked_failed_and_unlabelled() {
        let mut bed = bed();
        // Into the change, then back into the old config: both fail.
        bed.host.script_restarts([
            ScriptedOutcome::Fail("unit failed".into()),
            ScriptedOutcome::Fail("still failed".into()),
        ]);
        let set = desired(vec![shim("spin", "spin")]);
        let key = ready_label("spin");
        let mut run = run_of(&set, journaled(), &[(&key, "ready")]);
        let err = bed
            .installer
            .restart_and_verify(&mut run)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, InstallerError::RestartFailed { rollback: Some(rollback), .. }
                if matches!(**rollback, RestartError::Restart(HostError::Scripted(_)))),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(err.contains("unit failed"), "{err}");
        assert!(err.contains("did not recover with it either"), "{err}");
        assert!(err.contains("still failed"), "{err}");
        assert!(run.state.config.is_none());
        assert!(run.failed_before());
        assert_eq!(run.state.shims["spin"].phase, Phase::Failed);
        assert!(run.state.last_restart.is_some());
        assert!(!run.labels.contains_key(&key));
        assert!(!bed.cluster.labels().contains_key(&key));
        assert_eq!(bed.stored(), Some(run.state.clone()));
        assert!(bed.cluster.holders().is_empty(), "the slot was released");
        assert_eq!(bed.host.restarts(), 2);
    }

    #[tokio::test]
    async fn an_interrupted_restart_keeps_its_slot() {
        let mut bed = bed();
        bed.installer.kill_at(Some(0));
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, journaled(), &[]);
        let err = bed
            .installer
            .restart_and_verify(&mut run)
            .await
            .unwrap_err();
        assert!(matches!(err, InstallerError::Interrupted(0)), "{err}");
        assert_eq!(bed.cluster.holders().len(), 1);
        assert_eq!(
            bed.stored().and_then(|s| s.config).map(|t| t.phase),
            Some(TxnPhase::Restarting)
        );
    }

    #[tokio::test]
    async fn an_unfinished_rollback_is_finished_with_its_recorded_error() {
        let mut bed = bed();
        bed.host
            .script_restarts([ScriptedOutcome::Fail("no luck".into())]);
        let set = desired(vec![shim("spin", "spin")]);
        let mut state = journaled();
        if let Some(txn) = state.config.as_mut() {
            txn.phase = TxnPhase::RollingBack {
                error: "verification failed earlier".into(),
            };
        }
        let mut run = run_of(&set, state, &[]);
        let err = bed
            .installer
            .finish_rollback(&mut run)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("verification failed earlier"), "{err}");
        assert!(run.state.config.is_none());
        assert!(bed.cluster.holders().is_empty());
    }

    #[tokio::test]
    async fn a_verified_node_needs_no_restart() {
        let mut bed = bed();
        bed.host.script_verifications([ScriptedOutcome::Succeed]);
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        let facts = facts_for(&run, "v1", &[]);
        bed.installer
            .verify_or_repair(&mut run, &facts)
            .await
            .unwrap();
        let hash = &run.selection.shims[0].1;
        assert!(run.state.shims["spin"].verified_for(hash));
        assert!(!run.restarted);
        assert_eq!(bed.host.restarts(), 0);
        assert_eq!(bed.stored(), Some(run.state.clone()));
        assert!(bed.cluster.events().is_empty(), "no slot taken");
    }

    #[tokio::test]
    async fn a_failed_repair_marks_every_selected_shim_failed() {
        let mut bed = bed();
        bed.host
            .script_verifications([ScriptedOutcome::Fail("runtime spin missing".into())]);
        bed.host
            .script_restarts([ScriptedOutcome::Fail("unit failed".into())]);
        let set = desired(vec![shim("spin", "spin")]);
        let key = ready_label("spin");
        let mut run = run_of(&set, State::new(), &[(&key, "ready")]);
        let facts = facts_for(&run, "v1", &[]);
        let err = bed
            .installer
            .verify_or_repair(&mut run, &facts)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, InstallerError::RepairFailed { restart, .. }
                if matches!(**restart, RestartError::Restart(_))),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(
            err.contains("runtime spin missing; after a restart"),
            "{err}"
        );
        assert!(err.contains("the configuration had not changed"), "{err}");
        assert!(run.restarted);
        assert!(run.failed_before());
        assert!(!bed.cluster.labels().contains_key(&key));
        let events = bed.cluster.events();
        assert!(
            matches!(events.first(), Some(ClusterEvent::Acquired(0))),
            "{events:?}"
        );
        assert!(bed.cluster.holders().is_empty());
        let host_events = bed.host.events();
        assert!(
            matches!(
                host_events.as_slice(),
                [
                    HostEvent::Verify { ok: false, .. },
                    HostEvent::Restart { ok: false, .. }
                ]
            ),
            "{host_events:?}"
        );
    }
}
