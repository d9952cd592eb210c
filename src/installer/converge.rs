//! One converge run: read the state file and the facts, plan, and execute the plan's steps
//! against the host and the cluster, journaling before every change so that a run killed at any
//! point leaves a node the next run completes or repairs.
//!
//! A run that stops on an error before its first change (corrupt config, unknown config
//! version, unsupported containerd, read-only target, checksum mismatch, missing artifact) has
//! changed nothing: every such check happens before the first write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::desired_shims::{
    Arch, DesiredShim, DesiredShims, Mode, READY_LABEL_PREFIX, ready_label,
};

use super::cluster::{Cluster, LabelChanges};
use super::containerd::{
    BASELINE_SUFFIX, ContainerdVersion, EffectiveConfig, ExpectedRuntime, Ownership, Plan,
    RuntimeEntry, locate, plan_install, plan_install_keeping, plan_uninstall,
};
use super::error::InstallerError;
use super::host::Host;
use super::payload::{
    self, DigestCache, Downloader, Fetched, Installed, Layout, PayloadSpec, inspect,
};
use super::plan::{GoneFacts, PlanInput, ShimFacts, Step, mutates, plan};
use super::state::{ConfigTxn, Failure, Phase, RollbackFile, ShimState, State, TxnPhase};
use super::status::{NodeStatus, ShimStatus};

/// The label Gardener puts on every node with its worker pool's name.
pub const WORKER_POOL_LABEL: &str = "worker.gardener.cloud/pool";
/// The label with the node's CPU architecture.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";

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
}

impl Settings {
    pub fn new(state_dir: impl Into<PathBuf>, staging_dir: impl Into<PathBuf>) -> Self {
        Settings {
            layout: Layout::new(state_dir),
            staging_dir: staging_dir.into(),
            config_override: None,
            rollback_window: 2,
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

/// Whether a shim applies to a node with these labels.
pub fn selects(shim: &DesiredShim, labels: &BTreeMap<String, String>) -> bool {
    let selector = shim
        .node_selector
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    let pool = shim.worker_pools.is_empty()
        || labels
            .get(WORKER_POOL_LABEL)
            .is_some_and(|pool| shim.worker_pools.contains(pool));
    selector && pool
}

/// The shims this node must have.
pub fn select<'a>(
    desired: &'a DesiredShims,
    labels: &BTreeMap<String, String>,
) -> Vec<&'a DesiredShim> {
    if desired.mode == Mode::Uninstall {
        return Vec::new();
    }
    desired
        .shims
        .iter()
        .filter(|shim| selects(shim, labels))
        .collect()
}

/// The node's architecture: its label, else the one this binary runs on.
pub fn node_arch(labels: &BTreeMap<String, String>) -> Result<Arch, InstallerError> {
    if let Some(value) = labels.get(ARCH_LABEL) {
        return Arch::from_label(value).ok_or_else(|| {
            InstallerError::Cluster(format!("node label {ARCH_LABEL}={value} is not supported"))
        });
    }
    match std::env::consts::ARCH {
        "x86_64" => Ok(Arch::Amd64),
        "aarch64" => Ok(Arch::Arm64),
        other => Err(InstallerError::Cluster(format!(
            "the node has no {ARCH_LABEL} label and {other} is not a supported architecture"
        ))),
    }
}

fn shim_hash(shim: &DesiredShim, arch: Arch) -> String {
    let json = serde_json::to_string(shim).unwrap_or_default();
    super::digest::sha256_hex(format!("{}\n{json}", arch.as_str()).as_bytes())
}

/// The node's desired state in one hash (mode, architecture, selected shims).
fn node_hash(mode: Mode, selected: &[(&DesiredShim, String)], arch: Arch) -> String {
    let mut text = format!("{mode:?}\n{}\n", arch.as_str());
    for (shim, hash) in selected {
        text.push_str(&format!("{}={hash}\n", shim.name));
    }
    super::digest::sha256_hex(text.as_bytes())
}

/// The installer for one node.
pub struct Installer<C: Cluster> {
    host: Arc<dyn Host>,
    cluster: C,
    settings: Settings,
    downloader: Option<Downloader>,
    digests: DigestCache,
    kill_at: Option<usize>,
    checkpoints: usize,
}

/// Everything a run decided before executing.
struct Facts<'a> {
    desired: &'a DesiredShims,
    selected: Vec<(&'a DesiredShim, String)>,
    specs: Vec<PayloadSpec>,
    runtimes: Vec<RuntimeEntry>,
    config: Plan,
    node_hash: String,
    gone: Vec<String>,
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
            kill_at: None,
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
    pub fn kill_at(&mut self, checkpoint: Option<usize>) {
        self.kill_at = checkpoint;
    }

    /// Marks a point between two changes of the node.
    fn checkpoint(&mut self) -> Result<(), InstallerError> {
        let current = self.checkpoints;
        self.checkpoints += 1;
        if self.kill_at == Some(current) {
            return Err(InstallerError::Interrupted(current));
        }
        Ok(())
    }

    fn state_path(&self) -> PathBuf {
        self.settings.layout.state_file()
    }

    fn store(&mut self, state: &State) -> Result<(), InstallerError> {
        state.store(&*self.host, &self.state_path())?;
        self.checkpoint()
    }

    /// Converges the node to `desired`.
    pub async fn run(&mut self, desired: &DesiredShims) -> Result<Outcome, InstallerError> {
        self.checkpoints = 0;
        let host = self.host.clone();
        let loaded = State::load(&*host, &self.state_path())?;
        let mut state = loaded.clone();
        let mut labels = self.cluster.node_labels().await?;
        let arch = node_arch(&labels)?;
        let selected: Vec<(&DesiredShim, String)> = select(desired, &labels)
            .into_iter()
            .map(|shim| (shim, shim_hash(shim, arch)))
            .collect();
        let node_hash = node_hash(desired.mode, &selected, arch);

        let failed = state
            .failure
            .as_ref()
            .is_some_and(|failure| failure.node_hash == node_hash);
        if failed {
            // Only labels are decided here: which shims still run verified (the ones the
            // failed change did not touch).
            let shims = selected
                .iter()
                .map(|(shim, hash)| ShimFacts {
                    name: shim.name.clone(),
                    handler: shim.handler.clone(),
                    dir: String::new(),
                    staged: false,
                    current: None,
                    verified: state
                        .shims
                        .get(&shim.name)
                        .is_some_and(|s| s.verified_for(hash)),
                    verified_before: false,
                })
                .collect();
            let input = PlanInput {
                shims,
                labels: labels.clone(),
                failed: true,
                ..PlanInput::default()
            };
            let steps = plan(&input);
            for step in &steps {
                if let Step::RemoveLabels(keys) = step {
                    self.patch_labels(keys, None, &mut labels).await?;
                }
            }
            return Ok(self.outcome(desired, &selected, &state, &labels, steps, false, &[], &[]));
        }

        let facts = self.gather(desired, selected, node_hash, arch, &state)?;
        let input = self.plan_input(&facts, &state, &labels)?;
        let waiting: Vec<String> = input
            .gone
            .iter()
            .filter(|gone| gone.linked && gone.in_use > 0)
            .map(|gone| {
                format!(
                    "shim {} stays while {} pod(s) of its runtime handler run",
                    gone.name, gone.in_use
                )
            })
            .collect();
        let steps = plan(&input);
        if steps.iter().any(mutates) {
            self.preflight(&facts.config)?;
        }
        let mut fetched = if steps.iter().any(|s| matches!(s, Step::Stage(_))) {
            let inspected: Vec<(PayloadSpec, Installed)> = facts
                .specs
                .iter()
                .map(|spec| Ok((spec.clone(), inspect(&*host, &self.settings.layout, spec)?)))
                .collect::<Result<_, InstallerError>>()?;
            Some(
                payload::fetch_all(
                    &*host,
                    &self.settings.layout,
                    self.downloader.as_ref(),
                    &inspected,
                )
                .await?,
            )
        } else {
            None
        };

        if state.failure.is_some() {
            // A new desired set: the earlier failure no longer applies.
            state.failure = None;
        }
        if !facts.config.changed && state.config.is_none() {
            // The engine's record is stored on every run, also when nothing changed: after a
            // lost state file it is how adopted tables become ours again.
            state.ownership = facts.config.ownership.clone();
        }
        let mut restarted = false;
        let mut retained = Vec::new();
        for step in &steps {
            let result = self
                .execute(
                    step,
                    &facts,
                    &mut state,
                    &mut labels,
                    &mut fetched,
                    &mut restarted,
                    &mut retained,
                )
                .await;
            if let Err(err) = result {
                if let Some(fetched) = fetched.take() {
                    fetched.discard(&*host);
                }
                return Err(err);
            }
        }
        if state.ownership.is_empty() && state.config.is_none() && !state.created_dirs.is_empty() {
            for dir in state.created_dirs.iter().rev() {
                host.remove_empty_dir(dir)
                    .map_err(|err| InstallerError::host("remove", dir, err))?;
            }
            state.created_dirs.clear();
        }
        for ((shim, hash), spec) in facts.selected.iter().zip(&facts.specs) {
            if payload::current_dir(&*host, &self.settings.layout, &shim.name)?.as_deref()
                == Some(spec.dir.as_str())
            {
                let entry = shim_entry(&mut state, shim, hash);
                if entry.active.as_deref() != Some(spec.dir.as_str()) {
                    entry.active = Some(spec.dir.clone());
                }
            }
        }
        if state.is_clean() {
            if loaded != State::new() || host.exists(&self.state_path()).unwrap_or(false) {
                host.remove_file(&self.state_path())
                    .map_err(|err| InstallerError::host("remove", self.state_path(), err))?;
            }
        } else if state != loaded {
            self.store(&state)?;
        }
        Ok(self.outcome(
            desired,
            &facts.selected,
            &state,
            &labels,
            steps,
            restarted,
            &retained,
            &waiting,
        ))
    }

    /// Reads everything the plan depends on; changes nothing.
    fn gather<'a>(
        &self,
        desired: &'a DesiredShims,
        selected: Vec<(&'a DesiredShim, String)>,
        node_hash: String,
        arch: Arch,
        state: &State,
    ) -> Result<Facts<'a>, InstallerError> {
        let host = &*self.host;
        let layout = &self.settings.layout;
        let version_text =
            host.containerd_version()
                .map_err(|message| InstallerError::Command {
                    command: "containerd --version".into(),
                    message,
                })?;
        let containerd = ContainerdVersion::parse(&version_text)?;
        containerd.ensure_supported()?;

        let mut specs = Vec::new();
        let mut runtimes = Vec::new();
        for (shim, _) in &selected {
            let spec = payload::resolve(
                shim,
                arch,
                &self.settings.staging_dir,
                layout,
                &self.digests,
            )?;
            let first = shim
                .binaries
                .first()
                .map(|b| b.name.clone())
                .unwrap_or_default();
            runtimes.push(
                RuntimeEntry::from_desired(
                    shim,
                    &layout.runtime_path(&shim.name, &first),
                    &layout.config_dir(&shim.name),
                    &layout.bin_dir(&shim.name),
                )?
                .for_containerd(containerd),
            );
            specs.push(spec);
        }
        let mut config = if runtimes.is_empty() {
            plan_uninstall(host, containerd, &state.ownership)?
        } else {
            let target = locate(host, containerd, self.settings.config_override.as_deref())?;
            let plan = plan_install(host, &target, &runtimes, &state.ownership)?;
            if plan.changed && containerd.major < 2 {
                // containerd 1.x drops runtimes it provides implicitly once a file defines
                // one: the plan keeps them, from the effective configuration as it is now.
                let baseline = self.baseline(&plan)?;
                let mut ours: BTreeSet<String> =
                    runtimes.iter().map(|r| r.handler.clone()).collect();
                ours.extend(state.ownership.handlers().map(|h| h.handler.clone()));
                let kept = match &baseline {
                    Some((config, dump)) => {
                        EffectiveConfig::parse(config, containerd, dump)?.runtimes_to_keep(&ours)
                    }
                    None => Vec::new(),
                };
                plan_install_keeping(host, &target, &runtimes, &state.ownership, Some(&kept))?
            } else {
                plan
            }
        };
        if config.changed
            && config
                .validation
                .as_ref()
                .is_some_and(|v| v.baseline.is_none())
        {
            let baseline = self.baseline(&config)?;
            if let (Some(validation), Some((_, dump))) = (config.validation.as_mut(), baseline) {
                validation.baseline = Some(dump);
            }
        }

        let names: BTreeSet<&str> = selected.iter().map(|(s, _)| s.name.as_str()).collect();
        let mut gone: BTreeSet<String> = state
            .shims
            .keys()
            .filter(|name| !names.contains(name.as_str()))
            .cloned()
            .collect();
        let current_root = layout.current_root();
        for entry in host
            .list_dir(&current_root)
            .map_err(|err| InstallerError::host("list", &current_root, err))?
        {
            if !entry.ends_with(".new") && !names.contains(entry.as_str()) {
                gone.insert(entry);
            }
        }
        Ok(Facts {
            desired,
            selected,
            specs,
            runtimes,
            config,
            node_hash,
            gone: gone.into_iter().collect(),
        })
    }

    /// `containerd config dump` of the configuration the plan's validation will dump, as it is
    /// now, before anything is written: what the candidate is compared with. A config file
    /// that does not exist yet means containerd's defaults (dumped from an empty file, because
    /// containerd 1.x refuses a missing `--config`). `None` for a plan whose validation dumps a
    /// rendered template (the distribution renders it; nothing here is its baseline).
    fn baseline(&self, plan: &Plan) -> Result<Option<(PathBuf, String)>, InstallerError> {
        let Some(validation) = plan.validation.as_ref().filter(|v| v.scratch.is_none()) else {
            return Ok(None);
        };
        let host = &*self.host;
        let config = validation.config.clone();
        let exists = host
            .exists(&config)
            .map_err(|err| InstallerError::host("inspect", &config, err))?;
        let dumped = if exists {
            config.clone()
        } else {
            let mut name = config.clone().into_os_string();
            name.push(BASELINE_SUFFIX);
            let empty = PathBuf::from(name);
            if let Some(parent) = empty.parent() {
                host.create_dir_all(parent)
                    .map_err(|err| InstallerError::host("create directory", parent, err))?;
            }
            host.write_file(&empty, b"", 0o600)
                .map_err(|err| InstallerError::host("write", &empty, err))?;
            empty
        };
        let output = host.config_dump(&dumped);
        if !exists {
            host.remove_file(&dumped)
                .map_err(|err| InstallerError::host("remove", &dumped, err))?;
        }
        let command = format!("containerd --config {} config dump", dumped.display());
        let output = output.map_err(|message| InstallerError::Command {
            command: command.clone(),
            message,
        })?;
        if output.exit_code != Some(0) {
            return Err(InstallerError::Command {
                command,
                message: format!(
                    "the configuration as it is now does not load (exit code {:?}): {}",
                    output.exit_code,
                    output.stderr.trim()
                ),
            });
        }
        Ok(Some((config, output.stdout)))
    }

    fn plan_input(
        &self,
        facts: &Facts<'_>,
        state: &State,
        labels: &BTreeMap<String, String>,
    ) -> Result<PlanInput, InstallerError> {
        let host = &*self.host;
        let layout = &self.settings.layout;
        let mut shims = Vec::new();
        for ((shim, hash), spec) in facts.selected.iter().zip(&facts.specs) {
            let recorded = state.shims.get(&shim.name);
            shims.push(ShimFacts {
                name: shim.name.clone(),
                handler: shim.handler.clone(),
                dir: spec.dir.clone(),
                staged: inspect(host, layout, spec)? == Installed::Complete,
                current: payload::current_dir(host, layout, &shim.name)?,
                verified: recorded.is_some_and(|s| s.verified_for(hash)),
                verified_before: recorded.is_some_and(|s| {
                    s.verified_hash.is_some()
                        && s.phase != Phase::Failed
                        && s.handler == shim.handler
                }),
            });
        }
        let mut gone = Vec::new();
        for name in &facts.gone {
            let link = layout.current(name);
            let linked = host
                .info(&link)
                .map_err(|err| InstallerError::host("inspect", &link, err))?
                .is_some();
            let in_use = match facts.handler_of(name, state) {
                Some(handler) if linked => host
                    .sandboxes_with_handler(&handler)
                    .map_err(|message| InstallerError::Command {
                        command: "crictl pods".into(),
                        message,
                    })?
                    .unwrap_or(0),
                _ => 0,
            };
            gone.push(GoneFacts {
                name: name.clone(),
                linked,
                in_use,
            });
        }
        let txn = state.config.as_ref();
        Ok(PlanInput {
            shims,
            gone,
            labels: labels.clone(),
            config_changed: facts.config.changed,
            txn_pending: txn.is_some(),
            txn_validated: txn
                .is_some_and(|t| matches!(t.phase, TxnPhase::Validated | TxnPhase::Restarting)),
            txn_rolling_back: txn.is_some_and(|t| matches!(t.phase, TxnPhase::RollingBack { .. })),
            failed: false,
        })
    }

    /// Refuses to start when a directory the run writes into is not writable.
    fn preflight(&self, config: &Plan) -> Result<(), InstallerError> {
        let mut dirs: Vec<(PathBuf, String)> = vec![(
            self.settings.layout.state_dir().to_path_buf(),
            "its state file and the shim binaries".into(),
        )];
        let mut add = |path: &Path, what: String| {
            if let Some(parent) = path.parent() {
                dirs.push((parent.to_path_buf(), what));
            }
        };
        for write in &config.writes {
            add(
                &write.path,
                format!("containerd config {}", write.path.display()),
            );
        }
        for delete in &config.deletes {
            add(&delete.path, format!("(remove) {}", delete.path.display()));
        }
        for backup in &config.backups {
            add(
                &backup.destination,
                format!("the backup {}", backup.destination.display()),
            );
        }
        if let Some(scratch) = config.validation.as_ref().and_then(|v| v.scratch.as_ref()) {
            add(
                &scratch.path,
                format!("the validation file {}", scratch.path.display()),
            );
        }
        for (dir, purpose) in dirs {
            if let Err(err) = self.host.check_writable(&dir) {
                return Err(InstallerError::ReadOnly {
                    path: dir,
                    purpose,
                    reason: err.to_string(),
                });
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &mut self,
        step: &Step,
        facts: &Facts<'_>,
        state: &mut State,
        labels: &mut BTreeMap<String, String>,
        fetched: &mut Option<Fetched>,
        restarted: &mut bool,
        retained: &mut Vec<String>,
    ) -> Result<(), InstallerError> {
        let host = self.host.clone();
        let layout = self.settings.layout.clone();
        match step {
            Step::RemoveLabels(keys) => self.patch_labels(keys, None, labels).await,
            Step::SetLabels(keys) => {
                self.patch_labels(keys, Some(crate::desired_shims::READY_LABEL_VALUE), labels)
                    .await
            }
            Step::Stage(_) => {
                if let Some(fetched) = fetched.take() {
                    fetched.commit(&*host)?;
                }
                self.checkpoint()
            }
            Step::BeginConfig => self.begin_config(facts, state),
            Step::Swap { shim, dir } => {
                payload::swap(&*host, &layout, shim, dir)?;
                let (desired, hash) = facts
                    .selected
                    .iter()
                    .find(|(s, _)| &s.name == shim)
                    .ok_or_else(|| InstallerError::InvalidShim {
                        shim: shim.clone(),
                        message: "swapped but not selected".into(),
                    })?;
                let window = self.settings.rollback_window;
                let entry = shim_entry(state, desired, hash);
                if let Some(old) = entry.active.replace(dir.clone())
                    && &old != dir
                {
                    entry.previous.retain(|p| p != &old && p != dir);
                    entry.previous.insert(0, old);
                    entry.previous.truncate(window);
                }
                self.store(state)
            }
            Step::WriteConfig => self.write_config(&facts.config),
            Step::ValidateConfig => self.validate(facts, state).await,
            Step::RestartAndVerify => {
                *restarted = true;
                self.restart_and_verify(facts, state, labels).await
            }
            Step::FinishRollback => {
                *restarted = true;
                let error = match state.config.as_ref().map(|t| &t.phase) {
                    Some(TxnPhase::RollingBack { error }) => error.clone(),
                    _ => "an earlier run's verification failed".to_string(),
                };
                let slot = self
                    .cluster
                    .acquire_restart_slot(facts.desired.rollout.max_concurrent_restarts)
                    .await?;
                let result = self.roll_back(facts, state, labels, error).await;
                self.cluster.release_restart_slot(slot).await?;
                result
            }
            Step::Verify(_) => {
                let verify = self.verify(facts.runtimes_expected()).await;
                match verify {
                    Ok(()) => {
                        mark_verified(state, facts, host.now());
                        self.store(state)
                    }
                    Err(first) => {
                        // Verified state was lost or containerd runs an old config: one restart
                        // (within the budget) is the repair.
                        *restarted = true;
                        tracing::warn!(error = %first, "verification failed; restarting containerd");
                        let slot = self
                            .cluster
                            .acquire_restart_slot(facts.desired.rollout.max_concurrent_restarts)
                            .await?;
                        let result = self.repair_restart(facts, state, labels, &first).await;
                        self.cluster.release_restart_slot(slot).await?;
                        result
                    }
                }
            }
            Step::Unlink(shim) => {
                let link = layout.current(shim);
                host.remove_file(&link)
                    .map_err(|err| InstallerError::host("remove symlink", &link, err))?;
                self.checkpoint()
            }
            Step::CollectGarbage => {
                let found = self.collect_garbage(facts, state)?;
                *retained = found;
                Ok(())
            }
        }
    }

    async fn patch_labels(
        &mut self,
        keys: &[String],
        value: Option<&str>,
        labels: &mut BTreeMap<String, String>,
    ) -> Result<(), InstallerError> {
        let changes: LabelChanges = keys
            .iter()
            .map(|key| (key.clone(), value.map(str::to_string)))
            .collect();
        self.cluster.patch_labels(changes).await?;
        for key in keys {
            match value {
                Some(value) => labels.insert(key.clone(), value.to_string()),
                None => labels.remove(key),
            };
        }
        self.checkpoint()
    }

    /// Journals the config change: what to restore, where the symlinks pointed, both records.
    fn begin_config(&mut self, facts: &Facts<'_>, state: &mut State) -> Result<(), InstallerError> {
        let host = self.host.clone();
        let plan = &facts.config;
        let mut txn = state.config.take().unwrap_or_else(|| ConfigTxn {
            phase: TxnPhase::Writing,
            started_at: host.now(),
            rollback: Vec::new(),
            created_dirs: Vec::new(),
            symlinks: BTreeMap::new(),
            ownership_before: state.ownership.clone(),
            ownership_after: Ownership::default(),
            validation: None,
            runtimes: Vec::new(),
            shims: Vec::new(),
        });
        let mut remember = |path: &Path, content: Option<String>| {
            if !txn.rollback.iter().any(|r| r.path == path) {
                txn.rollback.push(RollbackFile {
                    path: path.to_path_buf(),
                    content,
                });
            }
        };
        for backup in &plan.backups {
            let current = host
                .read(&backup.destination)
                .map_err(|err| InstallerError::host("read", &backup.destination, err))?;
            remember(&backup.destination, current);
        }
        for write in &plan.writes {
            remember(&write.path, write.previous.clone());
        }
        for write in &plan.writes {
            let mut missing = Vec::new();
            let mut dir = write.path.parent();
            while let Some(candidate) = dir {
                if host
                    .info(candidate)
                    .map_err(|err| InstallerError::host("inspect", candidate, err))?
                    .is_some()
                {
                    break;
                }
                missing.push(candidate.to_path_buf());
                dir = candidate.parent();
            }
            for created in missing.into_iter().rev() {
                if !txn.created_dirs.contains(&created) {
                    txn.created_dirs.push(created);
                }
            }
        }
        for delete in &plan.deletes {
            remember(&delete.path, Some(delete.previous.clone()));
        }
        for (shim, _) in &facts.selected {
            if !txn.symlinks.contains_key(&shim.name) {
                let link = self.settings.layout.current(&shim.name);
                let target = host
                    .read_link(&link)
                    .map_err(|err| InstallerError::host("read symlink", &link, err))?;
                txn.symlinks.insert(shim.name.clone(), target);
            }
        }
        txn.phase = TxnPhase::Writing;
        txn.ownership_after = plan.ownership.clone();
        txn.validation = plan.validation.clone();
        txn.runtimes = facts.runtimes_expected();
        for name in facts
            .selected
            .iter()
            .filter(|(shim, hash)| {
                !state
                    .shims
                    .get(&shim.name)
                    .is_some_and(|s| s.verified_for(hash))
            })
            .map(|(shim, _)| shim.name.clone())
            .chain(facts.gone.iter().cloned())
        {
            if !txn.shims.contains(&name) {
                txn.shims.push(name);
            }
        }
        state.ownership = state.ownership.union(&plan.ownership);
        for (shim, hash) in &facts.selected {
            let entry = shim_entry(state, shim, hash);
            if !entry.verified_for(hash) {
                entry.desired_hash = hash.clone();
                entry.phase = Phase::Installing;
                entry.last_error = None;
            }
        }
        for name in &facts.gone {
            if let Some(entry) = state.shims.get_mut(name) {
                entry.phase = Phase::Uninstalling;
            }
        }
        state.config = Some(txn);
        self.store(state)
    }

    /// Applies the engine plan's backups, writes and deletes, in its order.
    fn write_config(&mut self, plan: &Plan) -> Result<(), InstallerError> {
        let host = self.host.clone();
        for backup in &plan.backups {
            let mode = mode_of(&*host, &backup.source);
            host.write_file(&backup.destination, backup.content.as_bytes(), mode)
                .map_err(|err| InstallerError::host("write backup", &backup.destination, err))?;
            self.checkpoint()?;
        }
        for write in &plan.writes {
            if let Some(parent) = write.path.parent() {
                host.create_dir_all(parent)
                    .map_err(|err| InstallerError::host("create directory", parent, err))?;
            }
            let mode = mode_of(&*host, &write.path);
            host.write_file(&write.path, write.content.as_bytes(), mode)
                .map_err(|err| InstallerError::host("write", &write.path, err))?;
            self.checkpoint()?;
        }
        for delete in &plan.deletes {
            host.remove_file(&delete.path)
                .map_err(|err| InstallerError::host("remove", &delete.path, err))?;
            self.checkpoint()?;
        }
        Ok(())
    }

    /// `containerd config dump` of the journaled change; on failure the change is rolled back
    /// (no restart happened, containerd never read the files) and the desired set is marked
    /// failed on this node.
    async fn validate(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
    ) -> Result<(), InstallerError> {
        let Some(txn) = state.config.clone() else {
            return Ok(());
        };
        if let Some(validation) = &txn.validation {
            let host = self.host.clone();
            if let Some(scratch) = &validation.scratch {
                host.write_file(&scratch.path, scratch.content.as_bytes(), 0o600)
                    .map_err(|err| InstallerError::host("write", &scratch.path, err))?;
            }
            let config = validation.config.clone();
            let dump_host = host.clone();
            let output = tokio::task::spawn_blocking(move || dump_host.config_dump(&config))
                .await
                .map_err(|err| InstallerError::Command {
                    command: "containerd config dump".into(),
                    message: err.to_string(),
                })?;
            if let Some(scratch) = &validation.scratch {
                host.remove_file(&scratch.path)
                    .map_err(|err| InstallerError::host("remove", &scratch.path, err))?;
            }
            let checked = output
                .map_err(|message| InstallerError::Command {
                    command: format!(
                        "containerd --config {} config dump",
                        validation.config.display()
                    ),
                    message,
                })
                .and_then(|output| validation.check(&output).map_err(InstallerError::from));
            if let Err(err) = checked {
                self.restore_files(&txn)?;
                state.ownership = txn.ownership_before.clone();
                state.config = None;
                self.mark_failed(state, facts, &txn.shims, &err.to_string());
                self.store(state)?;
                return Err(err);
            }
        }
        if let Some(txn) = state.config.as_mut() {
            txn.phase = TxnPhase::Validated;
        }
        self.store(state)
    }

    async fn restart_and_verify(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
        labels: &mut BTreeMap<String, String>,
    ) -> Result<(), InstallerError> {
        let slot = self
            .cluster
            .acquire_restart_slot(facts.desired.rollout.max_concurrent_restarts)
            .await?;
        let result = self.restart_holding_slot(facts, state, labels).await;
        match result {
            // A crash keeps the slot until its lease expires; only a finished run releases it.
            Err(InstallerError::Interrupted(at)) => Err(InstallerError::Interrupted(at)),
            other => {
                self.cluster.release_restart_slot(slot).await?;
                other
            }
        }
    }

    async fn restart_holding_slot(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
        labels: &mut BTreeMap<String, String>,
    ) -> Result<(), InstallerError> {
        let Some(txn) = state.config.as_mut() else {
            return Ok(());
        };
        txn.phase = TxnPhase::Restarting;
        let runtimes = txn.runtimes.clone();
        self.store(state)?;
        let restarted = self.restart().await;
        self.checkpoint()?;
        let verified = match restarted {
            Ok(()) => self.verify(runtimes).await,
            Err(err) => Err(err),
        };
        match verified {
            Ok(()) => {
                let host = self.host.clone();
                if let Some(txn) = state.config.take() {
                    state.ownership = txn.ownership_after;
                    for dir in txn.created_dirs {
                        if !state.created_dirs.contains(&dir) {
                            state.created_dirs.push(dir);
                        }
                    }
                }
                state.last_restart = Some(host.now());
                mark_verified(state, facts, host.now());
                self.store(state)
            }
            Err(error) => self.roll_back(facts, state, labels, error).await,
        }
    }

    /// Restores the journaled files and symlinks, restarts containerd into them, and marks the
    /// node failed for this desired set. Returns the error that caused it.
    async fn roll_back(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
        labels: &mut BTreeMap<String, String>,
        error: String,
    ) -> Result<(), InstallerError> {
        let Some(mut txn) = state.config.clone() else {
            return Ok(());
        };
        txn.phase = TxnPhase::RollingBack {
            error: error.clone(),
        };
        state.config = Some(txn.clone());
        self.store(state)?;
        self.restore_files(&txn)?;
        state.ownership = txn.ownership_before.clone();
        self.store(state)?;
        let before: Vec<ExpectedRuntime> = txn
            .ownership_before
            .handlers()
            .map(ExpectedRuntime::owned)
            .collect();
        let rollback = match self.restart().await {
            Ok(()) => self.verify(before).await,
            Err(err) => Err(err),
        };
        let rollback = match rollback {
            Ok(()) => String::new(),
            Err(err) => format!(", but containerd did not recover with it either: {err}"),
        };
        let failure = InstallerError::RestartFailed {
            verify: error,
            rollback,
        };
        state.config = None;
        state.last_restart = Some(self.host.now());
        self.mark_failed(state, facts, &txn.shims, &failure.to_string());
        self.store(state)?;
        let withdraw: Vec<String> = txn
            .shims
            .iter()
            .filter_map(|name| facts.handler_of(name, state))
            .map(|handler| ready_label(&handler))
            .filter(|key| labels.contains_key(key))
            .collect();
        if !withdraw.is_empty() {
            self.patch_labels(&withdraw, None, labels).await?;
        }
        Err(failure)
    }

    /// A restart without a config change (lost verification); on failure the node is marked
    /// failed (there is no earlier config to return to).
    async fn repair_restart(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
        labels: &mut BTreeMap<String, String>,
        first: &str,
    ) -> Result<(), InstallerError> {
        let result = match self.restart().await {
            Ok(()) => self.verify(facts.runtimes_expected()).await,
            Err(err) => Err(err),
        };
        match result {
            Ok(()) => {
                let now = self.host.now();
                state.last_restart = Some(now);
                mark_verified(state, facts, now);
                self.store(state)
            }
            Err(err) => {
                let failure = InstallerError::RestartFailed {
                    verify: format!("{first}; after a restart: {err}"),
                    rollback: " (the configuration had not changed)".into(),
                };
                let names: Vec<String> =
                    facts.selected.iter().map(|(s, _)| s.name.clone()).collect();
                state.last_restart = Some(self.host.now());
                self.mark_failed(state, facts, &names, &failure.to_string());
                self.store(state)?;
                let withdraw: Vec<String> = facts
                    .selected
                    .iter()
                    .map(|(s, _)| ready_label(&s.handler))
                    .filter(|key| labels.contains_key(key))
                    .collect();
                if !withdraw.is_empty() {
                    self.patch_labels(&withdraw, None, labels).await?;
                }
                Err(failure)
            }
        }
    }

    fn restore_files(&mut self, txn: &ConfigTxn) -> Result<(), InstallerError> {
        let host = self.host.clone();
        // Reverse order: an import is restored before the file it names disappears.
        for file in txn.rollback.iter().rev() {
            match &file.content {
                Some(content) => {
                    let mode = mode_of(&*host, &file.path);
                    host.write_file(&file.path, content.as_bytes(), mode)
                        .map_err(|err| InstallerError::host("restore", &file.path, err))?;
                }
                None => host
                    .remove_file(&file.path)
                    .map_err(|err| InstallerError::host("remove", &file.path, err))?,
            }
        }
        for dir in txn.created_dirs.iter().rev() {
            host.remove_empty_dir(dir)
                .map_err(|err| InstallerError::host("remove", dir, err))?;
        }
        for (shim, target) in &txn.symlinks {
            let link = self.settings.layout.current(shim);
            payload::restore_link(&*host, &link, target.as_deref())?;
        }
        self.checkpoint()
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

    fn mark_failed(&self, state: &mut State, facts: &Facts<'_>, shims: &[String], error: &str) {
        let now = self.host.now();
        state.failure = Some(Failure {
            node_hash: facts.node_hash.clone(),
            error: error.to_string(),
            at: now,
        });
        for name in shims {
            if let Some(entry) = state.shims.get_mut(name) {
                entry.phase = Phase::Failed;
                entry.last_error = Some(error.to_string());
                if let Some((_, hash)) = facts.selected.iter().find(|(s, _)| &s.name == name) {
                    entry.desired_hash = hash.clone();
                }
            }
        }
    }

    /// Removes versions nobody needs; forgets shims that left nothing behind.
    fn collect_garbage(
        &mut self,
        facts: &Facts<'_>,
        state: &mut State,
    ) -> Result<Vec<String>, InstallerError> {
        let host = self.host.clone();
        let layout = self.settings.layout.clone();
        let mut keep: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for ((shim, _), spec) in facts.selected.iter().zip(&facts.specs) {
            let kept = keep.entry(shim.name.clone()).or_default();
            kept.insert(spec.dir.clone());
            if let Some(entry) = state.shims.get(&shim.name) {
                kept.extend(entry.active.iter().cloned());
                kept.extend(
                    entry
                        .previous
                        .iter()
                        .take(self.settings.rollback_window)
                        .cloned(),
                );
            }
        }
        // A shim that is gone but still linked keeps the version its link points at: pods of its
        // handler still run, and containerd needs its files to stop them.
        for name in &facts.gone {
            if let Some(dir) = payload::current_dir(&*host, &layout, name)? {
                keep.entry(name.clone()).or_default().insert(dir);
            }
        }
        let running = host
            .running_executables()
            .map_err(|err| InstallerError::host("list processes", "/proc", err))?;
        let kill_at = self.kill_at;
        let mut counter = self.checkpoints;
        let mut before_remove = || {
            let current = counter;
            counter += 1;
            if kill_at == Some(current) {
                return Err(InstallerError::Interrupted(current));
            }
            Ok(())
        };
        let report =
            payload::collect_garbage(&*host, &layout, &keep, &running, &mut before_remove)?;
        self.checkpoints = counter;
        if !report.removed.is_empty() {
            tracing::info!(removed = ?report.removed, "removed unused shim versions");
        }
        // Forget what is gone for good; keep remembering shims with versions still in use.
        let selected: BTreeSet<&str> = facts
            .selected
            .iter()
            .map(|(s, _)| s.name.as_str())
            .collect();
        let names: Vec<String> = state.shims.keys().cloned().collect();
        for name in names {
            if selected.contains(name.as_str()) {
                if let Some(entry) = state.shims.get_mut(&name) {
                    let versions = host.list_dir(&layout.versions(&name)).unwrap_or_default();
                    entry.previous.retain(|dir| versions.contains(dir));
                }
                continue;
            }
            let left = host.list_dir(&layout.versions(&name)).unwrap_or_default();
            let linked = host.info(&layout.current(&name)).ok().flatten().is_some();
            let owned = state.ownership.handlers().any(|h| {
                state
                    .shims
                    .get(&name)
                    .is_some_and(|s| s.handler == h.handler)
            });
            if left.is_empty() && !linked && !owned {
                state.shims.remove(&name);
            } else if let Some(entry) = state.shims.get_mut(&name) {
                entry.phase = Phase::Uninstalling;
                entry.active = None;
                entry.previous = left;
            }
        }
        Ok(report
            .in_use
            .iter()
            .map(|p| p.display().to_string())
            .collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn outcome(
        &self,
        desired: &DesiredShims,
        selected: &[(&DesiredShim, String)],
        state: &State,
        labels: &BTreeMap<String, String>,
        steps: Vec<Step>,
        restarted: bool,
        retained: &[String],
        waiting: &[String],
    ) -> Outcome {
        let mut shims = Vec::new();
        for (shim, hash) in selected {
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
            if !selected.iter().any(|(s, _)| &s.name == name) {
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
        let our_labels: Vec<&String> = labels
            .keys()
            .filter(|key| key.starts_with(READY_LABEL_PREFIX))
            .collect();
        let all_labelled = selected
            .iter()
            .all(|(s, _)| labels.contains_key(&ready_label(&s.handler)));
        let (ready, message) = if let Some(failure) = &state.failure {
            (false, format!("failed: {}", failure.error))
        } else if state.config.is_some() {
            (
                false,
                "a containerd configuration change is in flight".into(),
            )
        } else if selected.is_empty() {
            // Files a running pod still needs keep an uninstall from being done: containerd
            // needs them to stop and remove that pod.
            let clean = state.ownership.is_empty() && our_labels.is_empty() && waiting.is_empty();
            let message = if !waiting.is_empty() {
                format!(
                    "removing the installer's configuration; {}",
                    waiting.join("; ")
                )
            } else if clean {
                if retained.is_empty() {
                    "clean: nothing of the installer is left on this node".to_string()
                } else {
                    format!(
                        "clean: configuration removed; {} version(s) kept while running shims use them",
                        retained.len()
                    )
                }
            } else {
                "removing the installer's configuration".to_string()
            };
            (clean, message)
        } else {
            // The selected shims decide; one that is gone and waits for its pods to end does not.
            let verified = shims
                .iter()
                .filter(|s| selected.iter().any(|(shim, _)| shim.name == s.name))
                .all(|s| s.phase == Phase::Active);
            let ready = verified && all_labelled;
            let message = if ready {
                let mut message = format!(
                    "{} shim(s) verified: {}",
                    selected.len(),
                    selected
                        .iter()
                        .map(|(s, _)| s.handler.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                for note in waiting {
                    message.push_str("; ");
                    message.push_str(note);
                }
                message
            } else {
                "shims not verified yet".to_string()
            };
            (ready, message)
        };
        Outcome {
            status: NodeStatus {
                ready,
                mode: desired.mode,
                desired_file_sha256: None,
                message,
                shims,
                retained_in_use: retained.to_vec(),
                run_failed: false,
                updated_at: self.host.now(),
            },
            steps,
            restarted,
        }
    }
}

impl Facts<'_> {
    fn runtimes_expected(&self) -> Vec<ExpectedRuntime> {
        self.runtimes.iter().map(ExpectedRuntime::of).collect()
    }

    fn handler_of(&self, name: &str, state: &State) -> Option<String> {
        self.selected
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(s, _)| s.handler.clone())
            .or_else(|| state.shims.get(name).map(|s| s.handler.clone()))
    }
}

fn shim_entry<'s>(state: &'s mut State, shim: &DesiredShim, hash: &str) -> &'s mut ShimState {
    state
        .shims
        .entry(shim.name.clone())
        .or_insert_with(|| ShimState {
            handler: shim.handler.clone(),
            desired_hash: hash.to_string(),
            phase: Phase::Installing,
            active: None,
            previous: Vec::new(),
            verified_hash: None,
            verified_at: None,
            last_error: None,
        })
}

fn mark_verified(state: &mut State, facts: &Facts<'_>, now: jiff::Timestamp) {
    for (shim, hash) in &facts.selected {
        let entry = shim_entry(state, shim, hash);
        entry.handler = shim.handler.clone();
        entry.desired_hash = hash.clone();
        entry.phase = Phase::Active;
        entry.verified_hash = Some(hash.clone());
        entry.verified_at = Some(now);
        entry.last_error = None;
    }
}

/// The mode of an existing file (so an edit keeps it), else 0644.
fn mode_of(host: &dyn Host, path: &Path) -> u32 {
    host.info(path)
        .ok()
        .flatten()
        .map_or(0o644, |info| info.mode)
}
