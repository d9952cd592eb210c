//! One converge run: read the state file and the facts, plan, and execute the plan's steps
//! against the host and the cluster, journaling before every change so that a run killed at any
//! point leaves a node the next run completes or repairs.
//!
//! A run that stops on an error before its first change (corrupt config, unknown config
//! version, unsupported containerd, read-only target, checksum mismatch, missing artifact) has
//! changed nothing: every such check happens before the first write.
//!
//! A run goes through its phases in this order, each in its own module:
//!
//! - `selection`: which shims this node must have, from its labels (pure);
//! - `facts`: the containerd release, payloads, the engine's config plan and the shims that
//!   are gone, read before anything changes, and the plan's input built from them;
//! - `payloads`: fetching, staging and swapping versioned directories, garbage collection;
//! - `transaction`: the journaled config change (preflight, journal, write, validate,
//!   restore) and `restart`: restarting into it within the budget, rolling it back;
//! - `outcome`: labels, the state record left on the host, and the node status.
//!
//! What the phases change as they go is carried in one `run_state::Run`, so each phase takes
//! the run rather than a list of out-parameters; what gathering read is in `facts::Facts` and
//! is never changed.

mod facts;
mod follow;
mod handover;
mod outcome;
mod payloads;
mod restart;
mod run_state;
mod selection;
mod transaction;

#[cfg(test)]
mod test_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::desired_shims::{DesiredShims, READY_LABEL_VALUE};

use super::cluster::Cluster;
use super::containerd::{BACKUP_SUFFIX, BASELINE_SUFFIX, SCRATCH_SUFFIX};
use super::error::InstallerError;
use super::host::{Host, is_temp_sibling};
use super::payload::{DigestCache, Downloader, Layout};
use super::plan::{Step, mutates, plan};
use super::state::State;
use super::status::NodeStatus;

use facts::{Facts, waiting_notes};
use run_state::Run;
use selection::Selection;

pub use selection::{ARCH_LABEL, WORKER_POOL_LABEL, node_arch, select, selects};

/// Where things are and how much to keep.
#[derive(Clone, Debug)]
pub struct Settings {
    pub layout: Layout,
    /// The pod directory init containers staged image binaries into.
    pub staging_dir: PathBuf,
    /// containerd's config file, when the operator names it (no distribution detection).
    pub config_override: Option<PathBuf>,
    /// Earlier versions kept for a quick rollback, besides the active one.
    pub rollback_window: usize,
    /// An uninstall that leaves nothing removes the state directory itself. Only for the
    /// daemon of an uninstall pod, which never installs again; not for a one-off uninstall
    /// beside a running daemon, which would go on writing into the removed directory.
    pub remove_state_dir: bool,
}

impl Settings {
    pub fn new(state_dir: impl Into<PathBuf>, staging_dir: impl Into<PathBuf>) -> Self {
        Settings {
            layout: Layout::new(state_dir),
            staging_dir: staging_dir.into(),
            config_override: None,
            rollback_window: 2,
            remove_state_dir: true,
        }
    }
}

/// What a run did and where the node stands.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: NodeStatus,
    pub steps: Vec<Step>,
    pub restarted: bool,
}

/// The installer for one node.
pub struct Installer<C: Cluster> {
    host: Arc<dyn Host>,
    cluster: C,
    settings: Settings,
    downloader: Option<Downloader>,
    digests: DigestCache,
    /// Follow runs: canaries that still vouch for their handlers.
    canaries: follow::Canaries,
    /// Fault injection for crash tests ([`Installer::kill_at`]).
    #[cfg(any(test, feature = "test-util"))]
    kill_at: Option<usize>,
    #[cfg(any(test, feature = "test-util"))]
    checkpoints: usize,
}

impl<C: Cluster> Installer<C> {
    pub fn new(
        host: Arc<dyn Host>,
        cluster: C,
        settings: Settings,
        downloader: Option<Downloader>,
    ) -> Self {
        Installer {
            host,
            cluster,
            settings,
            downloader,
            digests: DigestCache::default(),
            canaries: follow::Canaries::default(),
            #[cfg(any(test, feature = "test-util"))]
            kill_at: None,
            #[cfg(any(test, feature = "test-util"))]
            checkpoints: 0,
        }
    }

    pub fn cluster(&self) -> &C {
        &self.cluster
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Fault injection for crash tests: the next run stops with [`InstallerError::Interrupted`]
    /// at its `n`-th checkpoint (0-based), as if the process had been killed there.
    #[cfg(any(test, feature = "test-util"))]
    pub fn kill_at(&mut self, checkpoint: Option<usize>) {
        self.kill_at = checkpoint;
    }

    /// Marks a point between two changes of the node: where a crash test may stop the run.
    fn checkpoint(&mut self) -> Result<(), InstallerError> {
        #[cfg(any(test, feature = "test-util"))]
        {
            let current = self.checkpoints;
            self.checkpoints += 1;
            if self.kill_at == Some(current) {
                return Err(InstallerError::Interrupted(current));
            }
        }
        Ok(())
    }

    fn state_path(&self) -> PathBuf {
        self.settings.layout.state_file()
    }

    /// Temporary files of writes a killed run never renamed: of the state file, and of every
    /// containerd file the installer owns or has journaled a change of (and of their backups and
    /// validation files, written beside them). Nothing reads them, but they would keep the
    /// state directory from going away with the last shim, and leave the installer's paths in
    /// `/etc/containerd` after an uninstall.
    fn remove_stale_writes(&self, state: &State) -> Result<(), InstallerError> {
        let mut touched: BTreeSet<PathBuf> = state
            .ownership
            .files
            .iter()
            .map(|file| file.path.clone())
            .collect();
        if let Some(txn) = &state.config {
            touched.extend(txn.rollback.iter().map(|file| file.path.clone()));
            touched.extend(
                txn.ownership_after
                    .files
                    .iter()
                    .map(|file| file.path.clone()),
            );
        }
        let mut names_by_dir: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
        let state_path = self.state_path();
        for (path, suffixes) in
            std::iter::once((&state_path, &[""][..])).chain(touched.iter().map(|path| {
                (
                    path,
                    &["", BACKUP_SUFFIX, SCRATCH_SUFFIX, BASELINE_SUFFIX][..],
                )
            }))
        {
            let (Some(dir), Some(name)) =
                (path.parent(), path.file_name().and_then(|n| n.to_str()))
            else {
                continue;
            };
            let names = names_by_dir.entry(dir.to_path_buf()).or_default();
            names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
        }
        for (dir, names) in names_by_dir {
            let entries = match self.host.list_dir(&dir) {
                Ok(entries) => entries,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(InstallerError::host("list", &dir, err)),
            };
            for entry in entries
                .iter()
                .filter(|e| names.iter().any(|name| is_temp_sibling(e, name)))
            {
                let stale = dir.join(entry);
                tracing::info!(file = %stale.display(), "removing what a killed write left behind");
                self.host
                    .remove_file(&stale)
                    .map_err(|err| InstallerError::host("remove", &stale, err))?;
            }
        }
        Ok(())
    }

    fn store(&mut self, state: &State) -> Result<(), InstallerError> {
        state.store(&*self.host, &self.state_path())?;
        self.checkpoint()
    }

    /// [`Installer::run`], leaving the readiness labels `others` alone: someone else (the node
    /// agent, after a hand-over) serves their handlers, so this run neither sets nor removes
    /// them.
    async fn run_leaving(
        &mut self,
        desired: &DesiredShims,
        others: &BTreeSet<String>,
    ) -> Result<Outcome, InstallerError> {
        #[cfg(any(test, feature = "test-util"))]
        {
            self.checkpoints = 0;
        }
        let loaded = State::load(&*self.host, &self.state_path())?;
        let mut labels = self.cluster.node_labels().await?;
        let selection = Selection::new(desired, &labels)?;
        labels.retain(|key, _| !others.contains(key));
        let mut run = Run::new(selection, loaded, labels);
        if run.failed_before() {
            return self.report_failure(run).await;
        }
        self.remove_stale_writes(&run.state)?;

        let facts = self.gather(&run)?;
        let input = self.plan_input(&run, &facts)?;
        run.waiting = waiting_notes(&input.gone);
        let steps = plan(&input);
        if steps.iter().any(mutates) {
            self.preflight(&facts.config)?;
        }
        self.fetch_payloads(&mut run, &facts, &steps).await?;

        run.start(&facts.config);
        for step in &steps {
            if let Err(err) = self.execute(step, &mut run, &facts).await {
                if let Some(fetched) = run.fetched.take() {
                    fetched.discard(&*self.host);
                }
                return Err(err);
            }
        }
        self.finish_record(&mut run, &facts)?;
        Ok(outcome::outcome(&run, steps, self.host.now()))
    }

    async fn execute(
        &mut self,
        step: &Step,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        match step {
            Step::RemoveLabels(keys) => self.patch_labels(run, keys, None).await,
            Step::SetLabels(keys) => self.patch_labels(run, keys, Some(READY_LABEL_VALUE)).await,
            Step::Stage(_) => self.commit_staged(run),
            // Without a config change the journal holds only where the symlinks point.
            Step::BeginConfig | Step::BeginSwaps => self.begin_config(run, facts),
            Step::Swap { shim, dir } => self.swap(run, shim, dir),
            Step::WriteConfig => self.write_config(&facts.config),
            Step::ValidateConfig => self.validate(run).await,
            Step::RestartAndVerify => {
                run.restarted = true;
                self.restart_and_verify(run).await
            }
            Step::FinishRollback => self.finish_rollback(run).await,
            Step::Verify(_) => self.verify_or_repair(run, facts).await,
            Step::Unlink(shim) => self.unlink(shim),
            Step::CollectGarbage => {
                run.retained = self.collect_garbage(run, facts)?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{self, Bed, desired, node, recorded, shim};
    use super::*;
    use crate::desired_shims::{Rollout, ready_label};
    use crate::installer::state::{Failure, Phase, STATE_FILE, ShimState};
    use std::path::Path;

    #[tokio::test]
    async fn an_uninstall_on_a_clean_node_changes_nothing_and_is_clean() {
        let mut bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v2.1.0");
        let before = bed.tree();
        let outcome = bed
            .installer
            .run(&DesiredShims::uninstall(Rollout {
                max_concurrent_restarts: 1,
            }))
            .await
            .unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
        assert_eq!(
            outcome.status.message,
            "clean: nothing of the installer is left on this node"
        );
        assert_eq!(outcome.steps, [Step::CollectGarbage]);
        assert!(!outcome.restarted);
        // Nothing changed but the installer's own empty directory, which goes too.
        let state_dir = test_support::STATE_DIR.trim_start_matches('/');
        let without_it: Vec<String> = before.into_iter().filter(|p| p != state_dir).collect();
        assert_eq!(bed.tree(), without_it);
        assert!(bed.host.events().is_empty());
    }

    #[tokio::test]
    async fn an_uninstall_keeps_the_directory_while_something_is_in_it_and_an_install_never_removes_it()
     {
        let mut bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v2.1.0");
        let state_dir = test_support::STATE_DIR.trim_start_matches('/');
        let foreign = format!("{}/left-by-hand", test_support::STATE_DIR);
        bed.host
            .write_file(Path::new(&foreign), b"x", 0o644)
            .unwrap();
        let uninstall = DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        });
        bed.installer.run(&uninstall).await.unwrap();
        assert!(
            bed.tree().contains(&state_dir.to_string()),
            "{:?}",
            bed.tree()
        );

        bed.host.remove_file(Path::new(&foreign)).unwrap();
        // Nothing selected for this node, but not an uninstall: the pod may install here later.
        bed.installer.run(&desired(vec![])).await.unwrap();
        assert!(
            bed.tree().contains(&state_dir.to_string()),
            "{:?}",
            bed.tree()
        );
        bed.installer.run(&uninstall).await.unwrap();
        assert!(
            !bed.tree().contains(&state_dir.to_string()),
            "{:?}",
            bed.tree()
        );
    }

    #[tokio::test]
    async fn a_set_that_failed_here_is_not_retried_only_its_labels_go() {
        let spin = ready_label("spin");
        let wasm = ready_label("wasm");
        let mut bed = Bed::new(node(&[(&spin, "ready"), (&wasm, "ready")]));
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let selection = Selection::new(&set, &bed.cluster.labels()).unwrap();
        let mut state = State::new();
        state.failure = Some(Failure {
            node_hash: selection.node_hash.clone(),
            error: "boom".into(),
            at: jiff::Timestamp::UNIX_EPOCH,
        });
        let spin_hash = &selection.find("spin").unwrap().1;
        state
            .shims
            .insert("spin".into(), recorded("spin", spin_hash));
        state.shims.insert(
            "wasm".into(),
            // Failed before it was ever verified here: nothing serves it.
            ShimState {
                phase: Phase::Failed,
                verified_hash: None,
                ..recorded("wasm", "earlier")
            },
        );
        let path = bed.installer.settings().layout.state_dir().join(STATE_FILE);
        state.store(&*bed.host, &path).unwrap();

        // The host's containerd is never asked: gathering would fail on its missing binary.
        let outcome = bed.installer.run(&set).await.unwrap();
        assert_eq!(outcome.steps, [Step::RemoveLabels(vec![wasm.clone()])]);
        assert!(!outcome.status.ready);
        assert_eq!(outcome.status.message, "failed: boom");
        let labels = bed.cluster.labels();
        assert!(labels.contains_key(&spin) && !labels.contains_key(&wasm));
        assert!(bed.host.events().is_empty());
        assert_eq!(bed.stored(), Some(state));
    }

    #[tokio::test]
    async fn what_a_killed_write_left_beside_the_installers_files_goes() {
        let mut bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v2.1.0");
        let drop_in = "/etc/containerd/conf.d/50-containerd-shim.toml";
        let mut state = State::new();
        state.ownership = test_support::owned(drop_in);
        let mut journaled = test_support::txn();
        journaled.rollback = vec![crate::installer::state::RollbackFile {
            path: "/etc/containerd/config.toml".into(),
            content: Some("version = 2\n".into()),
        }];
        state.config = Some(journaled);
        let path = bed.installer.settings().layout.state_dir().join(STATE_FILE);
        state.store(&*bed.host, &path).unwrap();
        let stale = [
            "/etc/containerd/.config.toml.tmp-343-4".to_string(),
            "/etc/containerd/.config.toml.containerd-shim.bak.tmp-343-2".to_string(),
            "/etc/containerd/.config.toml.containerd-shim-candidate.tmp-343-3".to_string(),
            "/etc/containerd/conf.d/.50-containerd-shim.toml.tmp-12-1".to_string(),
            format!("{}/.{STATE_FILE}.tmp-12-2", test_support::STATE_DIR),
        ];
        let foreign = [
            "/etc/containerd/.other.toml.tmp-1-1",
            "/etc/containerd/conf.d/.config.toml.tmp-1-1",
            "/etc/containerd/config.toml.tmp-1-1",
        ];
        for file in stale.iter().map(String::as_str).chain(foreign) {
            bed.write(file, "x");
        }
        // Whatever the run makes of the journal, the leftovers go before it starts.
        let _ = bed
            .installer
            .run(&DesiredShims::uninstall(Rollout {
                max_concurrent_restarts: 1,
            }))
            .await;
        for file in &stale {
            assert!(bed.read(file).is_none(), "{file} is left");
        }
        for file in foreign {
            assert_eq!(bed.read(file).as_deref(), Some("x"), "{file} was removed");
        }
    }

    #[tokio::test]
    async fn a_kill_at_a_checkpoint_stops_the_run_there() {
        let wasm = ready_label("wasm");
        let mut bed = Bed::new(node(&[(&wasm, "ready")]));
        bed.host.set_version_output("containerd v2.1.0");
        bed.installer.kill_at(Some(0));
        let uninstall = DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        });
        let err = bed.installer.run(&uninstall).await.unwrap_err();
        assert!(matches!(err, InstallerError::Interrupted(0)), "{err}");
        assert!(
            !bed.cluster.labels().contains_key(&wasm),
            "the patch came first"
        );
        bed.installer.kill_at(None);
        let outcome = bed.installer.run(&uninstall).await.unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
    }
}
