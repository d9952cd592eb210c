//! Restarting containerd, always while holding a slot of the cluster-wide restart budget: into
//! a validated config change (and back out of it when the new config does not verify), to
//! finish a rollback an earlier run began, or to repair a node whose verification was lost.
//! And verifying without a restart: a new version swapped in without a config change is
//! swapped back when it does not verify, so that the earlier version serves again.

use crate::installer::cluster::Cluster;
use crate::installer::containerd::ExpectedRuntime;
use crate::installer::error::{InstallerError, RestartError};
use crate::installer::host::HostError;
use crate::installer::payload;
use crate::installer::state::{ConfigTxn, TxnPhase};

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
        if run
            .state
            .config
            .as_ref()
            .is_some_and(ConfigTxn::switches_only)
        {
            return self.swap_back(run, error).await;
        }
        run.restarted = true;
        let slot = self
            .cluster
            .acquire_restart_slot(run.selection.desired.rollout.max_concurrent_restarts)
            .await?;
        let result = self.roll_back(run, error).await;
        self.cluster.release_restart_slot(slot).await?;
        result
    }

    /// Verifies without a restart. Versions swapped in under a journal are kept when that
    /// passes and swapped back when it fails. Otherwise, when it fails (verified state was lost,
    /// or containerd runs an old config) one restart within the budget is the repair.
    pub(super) async fn verify_or_repair(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        match self.verify(facts.runtimes_expected()).await {
            Ok(()) => {
                // The swaps are settled: the journal goes with the verification.
                if let Some(txn) = run.state.config.take() {
                    run.state.ownership = txn.ownership_after;
                }
                run.mark_verified(self.host.now());
                self.store(&run.state)
            }
            Err(first)
                if run
                    .state
                    .config
                    .as_ref()
                    .is_some_and(ConfigTxn::switches_only) =>
            {
                let error = self.describe_swaps(run, &first)?;
                tracing::warn!(%error, "a new shim version failed verification; swapping back");
                self.swap_back(run, error).await
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

    /// The versions the journal's swaps put in place, each with the one it replaced, and why
    /// they fail: what the failure records, so that it names the shim and the version.
    fn describe_swaps(&self, run: &Run<'_>, error: &HostError) -> Result<String, InstallerError> {
        let Some(txn) = run.state.config.as_ref() else {
            return Ok(error.to_string());
        };
        let mut swaps = Vec::new();
        for (shim, before) in &txn.symlinks {
            let now = payload::current_dir(&*self.host, &self.settings.layout, shim)?;
            let before = before
                .as_deref()
                .and_then(|target| target.file_name())
                .map(|name| name.to_string_lossy().into_owned());
            if now != before {
                swaps.push(swap_text(shim, now.as_deref(), before.as_deref()));
            }
        }
        if swaps.is_empty() {
            return Ok(error.to_string());
        }
        Ok(format!("{}: {error}", swaps.join(", ")))
    }

    /// Records in the journal that it is being rolled back (a run killed from here on resumes
    /// the rollback) and restores its files and symlinks; `None` without a journal.
    fn begin_rolling_back(
        &mut self,
        run: &mut Run<'_>,
        error: &str,
    ) -> Result<Option<ConfigTxn>, InstallerError> {
        let Some(mut txn) = run.state.config.clone() else {
            return Ok(None);
        };
        txn.phase = TxnPhase::RollingBack {
            error: error.to_string(),
        };
        run.state.config = Some(txn.clone());
        self.store(&run.state)?;
        self.restore_files(&txn)?;
        Ok(Some(txn))
    }

    /// Points the journaled symlinks back, proves that containerd serves the earlier versions
    /// (as it runs, else after one restart within the budget), and marks the journal's shims
    /// failed for this desired set. Their labels stay: the earlier versions serve, verified.
    /// Returns the error that caused it.
    async fn swap_back(&mut self, run: &mut Run<'_>, error: String) -> Result<(), InstallerError> {
        let Some(txn) = self.begin_rolling_back(run, &error)? else {
            return Ok(());
        };
        for shim in txn.symlinks.keys() {
            let dir = payload::current_dir(&*self.host, &self.settings.layout, shim)?;
            run.record_swap_back(shim, dir);
        }
        run.state.ownership = txn.ownership_before.clone();
        self.store(&run.state)?;
        if let Err(again) = self.verify(txn.runtimes.clone()).await {
            tracing::warn!(error = %again, "the earlier versions do not verify either; restarting containerd");
            run.restarted = true;
            let slot = self
                .cluster
                .acquire_restart_slot(run.selection.desired.rollout.max_concurrent_restarts)
                .await?;
            let restarted = self.restart_into(txn.runtimes.clone()).await;
            self.cluster.release_restart_slot(slot).await?;
            run.state.last_restart = Some(self.host.now());
            if let Err(restart) = restarted {
                run.state.config = None;
                return self
                    .fail_every_shim(
                        run,
                        InstallerError::RepairFailed {
                            verify: Box::new(again),
                            restart: Box::new(restart),
                        },
                    )
                    .await;
            }
        }
        let failure = InstallerError::SwappedBack { error };
        run.state.config = None;
        run.mark_failed(&txn.shims, &failure.to_string(), self.host.now());
        self.store(&run.state)?;
        Err(failure)
    }

    /// Restores the journaled files and symlinks, restarts containerd into them, and marks the
    /// node failed for this desired set. Returns the error that caused it.
    async fn roll_back(&mut self, run: &mut Run<'_>, error: String) -> Result<(), InstallerError> {
        let Some(txn) = self.begin_rolling_back(run, &error)? else {
            return Ok(());
        };
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
        // Withdrawn before the failure is recorded: a recorded failure keeps the labels of
        // shims whose earlier description is verified, and a run killed in between repeats
        // the rollback.
        let handlers: Vec<String> = txn
            .shims
            .iter()
            .filter_map(|name| run.selection.handler_of(name, &run.state))
            .collect();
        self.withdraw_labels(run, &handlers).await?;
        run.state.config = None;
        run.state.last_restart = Some(self.host.now());
        run.mark_failed(&txn.shims, &failure.to_string(), self.host.now());
        self.store(&run.state)?;
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
                run.state.last_restart = Some(self.host.now());
                self.fail_every_shim(
                    run,
                    InstallerError::RepairFailed {
                        verify: Box::new(first),
                        restart: Box::new(restart),
                    },
                )
                .await
            }
        }
    }

    /// containerd serves none of this node's shims: every label goes, then every selected shim
    /// is marked failed (in this order: a recorded failure keeps the labels of shims whose
    /// earlier description is verified). Returns `failure`.
    async fn fail_every_shim(
        &mut self,
        run: &mut Run<'_>,
        failure: InstallerError,
    ) -> Result<(), InstallerError> {
        let handlers: Vec<String> = run
            .selection
            .shims
            .iter()
            .map(|(s, _)| s.handler.clone())
            .collect();
        self.withdraw_labels(run, &handlers).await?;
        let names: Vec<String> = run
            .selection
            .shims
            .iter()
            .map(|(s, _)| s.name.clone())
            .collect();
        run.mark_failed(&names, &failure.to_string(), self.host.now());
        self.store(&run.state)?;
        Err(failure)
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

/// One swap for the failure message: `shim <name> version <new>` (and what it replaced).
fn swap_text(shim: &str, now: Option<&str>, before: Option<&str>) -> String {
    let now = now.unwrap_or("(none)");
    match before {
        Some(before) => format!("shim {shim} version {now} (swapped back to {before})"),
        None => format!("shim {shim} version {now} (removed again)"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        Bed, STATE_DIR, desired, facts_for, node, recorded, run_of, shim, txn,
    };
    use super::*;
    use crate::desired_shims::ready_label;
    use crate::installer::cluster::ClusterEvent;
    use crate::installer::host::{HostEvent, ScriptedOutcome};
    use crate::installer::state::{ConfigTxn, Phase, RollbackFile, ShimState, State};

    /// A config change for spin (a drop-in it creates) journaled and validated.
    fn journaled() -> State {
        let mut state = State::new();
        state
            .shims
            .insert("spin".into(), recorded("spin", "earlier"));
        state.config = Some(ConfigTxn {
            phase: TxnPhase::Validated,
            rollback: vec![RollbackFile {
                path: "/etc/containerd/conf.d/50-containerd-shim.toml".into(),
                content: None,
            }],
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

    /// spin verified at `v1` (its label set), its new description needing `v2`: the journal
    /// of the swap begun and the swap made, as the plan does for a new version whose config is
    /// unchanged.
    async fn swapped_to_v2<'a>(
        bed: &mut Bed,
        set: &'a crate::desired_shims::DesiredShims,
    ) -> (Run<'a>, Facts) {
        let key = ready_label("spin");
        bed.version("spin", "v1");
        bed.version("spin", "v2");
        bed.link("spin", "v1");
        let mut state = State::new();
        state.shims.insert(
            "spin".into(),
            ShimState {
                active: Some("v1".into()),
                ..recorded("spin", "the v1 description")
            },
        );
        let mut run = run_of(set, state, &[(&key, "ready")]);
        let facts = facts_for(&run, "v2", &[]);
        bed.installer.begin_config(&mut run, &facts).unwrap();
        assert!(
            run.state
                .config
                .as_ref()
                .is_some_and(ConfigTxn::switches_only)
        );
        bed.installer.swap(&mut run, "spin", "v2").unwrap();
        (run, facts)
    }

    fn current(bed: &Bed) -> std::path::PathBuf {
        std::fs::read_link(bed.path(&format!("{STATE_DIR}/current/spin"))).unwrap()
    }

    #[tokio::test]
    async fn a_version_that_fails_verification_is_swapped_back_and_keeps_serving() {
        let mut bed = bed();
        let set = desired(vec![shim("spin", "spin")]);
        let (mut run, facts) = swapped_to_v2(&mut bed, &set).await;
        bed.host.script_verifications([
            ScriptedOutcome::Fail("handler spin: pod sandbox failed".into()),
            ScriptedOutcome::Succeed,
        ]);
        let err = bed
            .installer
            .verify_or_repair(&mut run, &facts)
            .await
            .unwrap_err();
        assert!(matches!(err, InstallerError::SwappedBack { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("shim spin version v2 (swapped back to v1)"),
            "{err}"
        );
        assert!(err.contains("pod sandbox failed"), "{err}");

        // The link points at the version that serves, the record says so, and the set is
        // failed on this node, naming the version; the label stays.
        assert_eq!(
            current(&bed),
            std::path::PathBuf::from("../versions/spin/v1")
        );
        let spin = &run.state.shims["spin"];
        assert_eq!(spin.active.as_deref(), Some("v1"));
        assert!(!spin.previous.contains(&"v1".to_string()), "{spin:?}");
        assert_eq!(spin.phase, Phase::Failed);
        assert_eq!(spin.last_error.as_deref(), Some(err.as_str()));
        assert_eq!(spin.verified_hash.as_deref(), Some("the v1 description"));
        assert!(run.state.config.is_none());
        assert!(run.failed_before());
        assert!(bed.cluster.labels().contains_key(&ready_label("spin")));
        assert_eq!(bed.stored(), Some(run.state.clone()));
        // Nothing restarted, no slot taken: the configuration never changed.
        assert_eq!(bed.host.restarts(), 0);
        assert!(!run.restarted);
        assert!(
            bed.cluster.events().is_empty(),
            "{:?}",
            bed.cluster.events()
        );

        // The next run of the same set keeps the label: the earlier version serves.
        let steps = crate::installer::plan::plan(&super::super::facts::failed_plan_input(&run));
        assert!(steps.is_empty(), "{steps:?}");
    }

    #[tokio::test]
    async fn a_swap_that_verifies_settles_its_journal() {
        let mut bed = bed();
        let set = desired(vec![shim("spin", "spin")]);
        let (mut run, facts) = swapped_to_v2(&mut bed, &set).await;
        bed.host.script_verifications([ScriptedOutcome::Succeed]);
        bed.installer
            .verify_or_repair(&mut run, &facts)
            .await
            .unwrap();
        assert_eq!(
            current(&bed),
            std::path::PathBuf::from("../versions/spin/v2")
        );
        assert!(run.state.config.is_none());
        let spin = &run.state.shims["spin"];
        assert_eq!(spin.active.as_deref(), Some("v2"));
        assert_eq!(spin.previous, ["v1"]);
        assert!(spin.verified_for(&run.selection.shims[0].1));
        assert_eq!(bed.stored(), Some(run.state.clone()));
    }

    #[tokio::test]
    async fn earlier_versions_that_serve_neither_as_they_run_nor_after_a_restart_lose_every_label()
    {
        let set = desired(vec![shim("spin", "spin")]);
        let mut bed = bed();
        let (mut run, facts) = swapped_to_v2(&mut bed, &set).await;
        bed.host.script_verifications([
            ScriptedOutcome::Fail("the new version".into()),
            ScriptedOutcome::Fail("not yet".into()),
        ]);
        bed.host
            .script_restarts([ScriptedOutcome::Fail("unit failed".into())]);
        let err = bed
            .installer
            .verify_or_repair(&mut run, &facts)
            .await
            .unwrap_err();
        assert!(
            matches!(err, InstallerError::RepairFailed { .. }),
            "{err:?}"
        );
        assert_eq!(bed.host.restarts(), 1);
        assert!(run.restarted);
        assert!(bed.cluster.holders().is_empty(), "the slot was released");
        assert_eq!(
            current(&bed),
            std::path::PathBuf::from("../versions/spin/v1")
        );
        assert!(run.state.config.is_none());
        assert!(!bed.cluster.labels().contains_key(&ready_label("spin")));
        let steps = crate::installer::plan::plan(&super::super::facts::failed_plan_input(&run));
        assert!(steps.is_empty(), "no label left to withdraw: {steps:?}");
    }

    #[tokio::test]
    async fn an_interrupted_swap_back_is_finished_without_a_restart() {
        let mut bed = bed();
        let set = desired(vec![shim("spin", "spin")]);
        let (mut run, _) = swapped_to_v2(&mut bed, &set).await;
        if let Some(txn) = run.state.config.as_mut() {
            txn.phase = TxnPhase::RollingBack {
                error: "shim spin version v2 (swapped back to v1): it failed".into(),
            };
        }
        bed.host.script_verifications([ScriptedOutcome::Succeed]);
        let err = bed
            .installer
            .finish_rollback(&mut run)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("shim spin version v2"), "{err}");
        assert_eq!(
            current(&bed),
            std::path::PathBuf::from("../versions/spin/v1")
        );
        assert_eq!(bed.host.restarts(), 0);
        assert!(bed.cluster.events().is_empty());
        assert!(bed.cluster.labels().contains_key(&ready_label("spin")));
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
