//! The configuration transaction: the preflight that refuses a read-only target before the
//! first write, the journal written before any file changes (what to restore, where the
//! symlinks pointed, both ownership records), the writes themselves, their validation with
//! `containerd config dump`, and restoring the journaled files. Restarting into the change and
//! rolling it back live in `restart`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::installer::cluster::Cluster;
use crate::installer::containerd::{Ownership, Plan};
use crate::installer::error::InstallerError;
use crate::installer::host::Host;
use crate::installer::payload::{self, Layout};
use crate::installer::state::{ConfigTxn, Phase, RollbackFile, State, TxnPhase};

use super::Installer;
use super::facts::Facts;
use super::run_state::{Run, shim_entry};
use super::selection::Selection;

impl<C: Cluster> Installer<C> {
    /// Refuses to start when a directory the run writes into is not writable.
    pub(super) fn preflight(&self, config: &Plan) -> Result<(), InstallerError> {
        for (dir, purpose) in written_dirs(&self.settings.layout, config) {
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

    /// Journals the config change: what to restore, where the symlinks pointed, both records.
    /// A journal left by an interrupted run is extended, never replaced: it holds the bytes
    /// from before that run's first write.
    pub(super) fn begin_config(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        let plan = &facts.config;
        let mut txn = match run.state.config.take() {
            Some(txn) => txn,
            None => new_txn(run.state.ownership.clone(), self.host.now()),
        };
        journal_files(&*self.host, &mut txn, plan)?;
        for (shim, _) in &run.selection.shims {
            if !txn.symlinks.contains_key(&shim.name) {
                let link = self.settings.layout.current(&shim.name);
                let target = self
                    .host
                    .read_link(&link)
                    .map_err(|err| InstallerError::host("read symlink", &link, err))?;
                txn.symlinks.insert(shim.name.clone(), target);
            }
        }
        txn.phase = TxnPhase::Writing;
        txn.ownership_after = plan.ownership.clone();
        txn.validation = plan.validation.clone();
        txn.runtimes = facts.runtimes_expected();
        for name in touched_shims(&run.selection, &run.state, &facts.gone) {
            if !txn.shims.contains(&name) {
                txn.shims.push(name);
            }
        }
        record_change(&mut run.state, &run.selection, &plan.ownership, &facts.gone);
        run.state.config = Some(txn);
        self.store(&run.state)
    }

    /// Applies the engine plan's backups, writes and deletes, in its order.
    pub(super) fn write_config(&mut self, plan: &Plan) -> Result<(), InstallerError> {
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
    pub(super) async fn validate(&mut self, run: &mut Run<'_>) -> Result<(), InstallerError> {
        let Some(txn) = run.state.config.clone() else {
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
                run.state.ownership = txn.ownership_before.clone();
                run.state.config = None;
                run.mark_failed(&txn.shims, &err.to_string(), self.host.now());
                self.store(&run.state)?;
                return Err(err);
            }
        }
        if let Some(txn) = run.state.config.as_mut() {
            txn.phase = TxnPhase::Validated;
        }
        self.store(&run.state)
    }

    /// Puts back the journaled files, directories and symlinks.
    pub(super) fn restore_files(&mut self, txn: &ConfigTxn) -> Result<(), InstallerError> {
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

    /// Removes the directories our config changes created, once nothing of ours is configured
    /// any more (an empty drop-in directory would otherwise outlive the uninstall).
    pub(super) fn remove_created_dirs(&self, state: &mut State) -> Result<(), InstallerError> {
        if state.ownership.is_empty() && state.config.is_none() && !state.created_dirs.is_empty() {
            for dir in state.created_dirs.iter().rev() {
                self.host
                    .remove_empty_dir(dir)
                    .map_err(|err| InstallerError::host("remove", dir, err))?;
            }
            state.created_dirs.clear();
        }
        Ok(())
    }
}

/// Every directory the run may write into, with what it writes there (for the error message).
fn written_dirs(layout: &Layout, config: &Plan) -> Vec<(PathBuf, String)> {
    let mut dirs: Vec<(PathBuf, String)> = vec![(
        layout.state_dir().to_path_buf(),
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
    dirs
}

fn new_txn(ownership_before: Ownership, now: jiff::Timestamp) -> ConfigTxn {
    ConfigTxn {
        phase: TxnPhase::Writing,
        started_at: now,
        rollback: Vec::new(),
        created_dirs: Vec::new(),
        symlinks: BTreeMap::new(),
        ownership_before,
        ownership_after: Ownership::default(),
        validation: None,
        runtimes: Vec::new(),
        shims: Vec::new(),
    }
}

/// Adds to the journal every file the plan touches, with its content now (the first record of
/// a path wins: it is the content before the change began), and the directories its writes
/// will create.
fn journal_files(host: &dyn Host, txn: &mut ConfigTxn, plan: &Plan) -> Result<(), InstallerError> {
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
        for created in missing_ancestors(host, &write.path)? {
            if !txn.created_dirs.contains(&created) {
                txn.created_dirs.push(created);
            }
        }
    }
    for delete in &plan.deletes {
        remember(&delete.path, Some(delete.previous.clone()));
    }
    Ok(())
}

/// The ancestors of `path` that do not exist yet, outermost first.
fn missing_ancestors(host: &dyn Host, path: &Path) -> Result<Vec<PathBuf>, InstallerError> {
    let mut missing = Vec::new();
    let mut dir = path.parent();
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
    missing.reverse();
    Ok(missing)
}

/// The shims a config change affects: selected ones not verified as desired, and gone ones.
/// A failure of the change is recorded against exactly these.
fn touched_shims(selection: &Selection<'_>, state: &State, gone: &[String]) -> Vec<String> {
    selection
        .shims
        .iter()
        .filter(|(shim, hash)| {
            !state
                .shims
                .get(&shim.name)
                .is_some_and(|s| s.verified_for(hash))
        })
        .map(|(shim, _)| shim.name.clone())
        .chain(gone.iter().cloned())
        .collect()
}

/// The record while a change is in flight: we own the union of both records (neither finishing
/// nor rolling back can then leave a key of ours unrecorded), unverified shims are installing,
/// gone ones uninstalling.
fn record_change(state: &mut State, selection: &Selection<'_>, after: &Ownership, gone: &[String]) {
    state.ownership = state.ownership.union(after);
    for (shim, hash) in &selection.shims {
        let entry = shim_entry(state, shim, hash);
        if !entry.verified_for(hash) {
            entry.desired_hash = hash.clone();
            entry.phase = Phase::Installing;
            entry.last_error = None;
        }
    }
    for name in gone {
        if let Some(entry) = state.shims.get_mut(name) {
            entry.phase = Phase::Uninstalling;
        }
    }
}

/// The mode of an existing file (so an edit keeps it), else 0644.
fn mode_of(host: &dyn Host, path: &Path) -> u32 {
    host.info(path)
        .ok()
        .flatten()
        .map_or(0o644, |info| info.mode)
}
