//! Restarting containerd, always while holding a slot of the cluster-wide restart budget: into
//! a validated config change (and back out of it when the new config does not verify), to
//! finish a rollback an earlier run began, or to repair a node whose verification was lost.

use crate::installer::cluster::Cluster;
use crate::installer::containerd::ExpectedRuntime;
use crate::installer::error::InstallerError;
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
        let restarted = self.restart().await;
        self.checkpoint()?;
        let verified = match restarted {
            Ok(()) => self.verify(runtimes).await,
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
            Err(error) => self.roll_back(run, error).await,
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
                let result = self.repair_restart(run, facts, &first).await;
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
        let rollback = match self.restart_into(before).await {
            Ok(()) => String::new(),
            Err(err) => format!(", but containerd did not recover with it either: {err}"),
        };
        let failure = InstallerError::RestartFailed {
            verify: error,
            rollback,
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
        first: &str,
    ) -> Result<(), InstallerError> {
        match self.restart_into(facts.runtimes_expected()).await {
            Ok(()) => {
                let now = self.host.now();
                run.state.last_restart = Some(now);
                run.mark_verified(now);
                self.store(&run.state)
            }
            Err(err) => {
                let failure = InstallerError::RestartFailed {
                    verify: format!("{first}; after a restart: {err}"),
                    rollback: " (the configuration had not changed)".into(),
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
    async fn restart_into(&mut self, runtimes: Vec<ExpectedRuntime>) -> Result<(), String> {
        match self.restart().await {
            Ok(()) => self.verify(runtimes).await,
            Err(err) => Err(err),
        }
    }

    async fn restart(&mut self) -> Result<(), String> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || host.restart_containerd())
            .await
            .map_err(|err| err.to_string())
            .and_then(|result| result)
            .map_err(|err| format!("restarting containerd: {err}"))
    }

    async fn verify(&mut self, runtimes: Vec<ExpectedRuntime>) -> Result<(), String> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || host.verify_containerd(&runtimes))
            .await
            .map_err(|err| err.to_string())
            .and_then(|result| result)
    }
}
