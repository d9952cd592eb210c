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
use crate::installer::host::{Host, HostError};
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
                .map_err(|err| {
                    InstallerError::command("containerd config dump", HostError::Aborted(err))
                })?;
            if let Some(scratch) = &validation.scratch {
                host.remove_file(&scratch.path)
                    .map_err(|err| InstallerError::host("remove", &scratch.path, err))?;
            }
            let checked = output
                .map_err(|err| {
                    InstallerError::command(
                        format!(
                            "containerd --config {} config dump",
                            validation.config.display()
                        ),
                        err,
                    )
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::test_support::{
        Bed, STATE_DIR, desired, facts_for, node, owned, recorded, run_of, shim,
    };
    use super::*;
    use crate::desired_shims::DesiredShims;
    use crate::installer::containerd::{
        Backup, ContainerdVersion, FileDelete, FileWrite, ScratchFile, Validation,
    };
    use crate::installer::state::ShimState;

    const CONFIG: &str = "/etc/containerd/config.toml";
    const DROP_IN: &str = "/etc/containerd/conf.d/50-containerd-shim.toml";
    const OLD: &str = "/etc/containerd/old.toml";

    /// Edits the config, creates a drop-in in a new directory, deletes a file, backs up the
    /// config.
    fn change() -> Plan {
        Plan {
            target: None,
            backups: vec![Backup {
                source: CONFIG.into(),
                destination: format!("{CONFIG}.bak").into(),
                content: "original".into(),
            }],
            writes: vec![
                FileWrite {
                    path: CONFIG.into(),
                    content: "edited".into(),
                    previous: Some("original".into()),
                },
                FileWrite {
                    path: DROP_IN.into(),
                    content: "ours".into(),
                    previous: None,
                },
            ],
            deletes: vec![FileDelete {
                path: OLD.into(),
                previous: "old".into(),
            }],
            validation: None,
            ownership: owned(DROP_IN),
            changed: true,
        }
    }

    /// Begins [`change`] for `set`, all its shims moving to version `v2`, on a node that has
    /// the file the change deletes and spin's version `v1`.
    fn begin_change<'a>(bed: &mut Bed, set: &'a DesiredShims) -> (Run<'a>, Facts) {
        bed.write(OLD, "old");
        bed.link("spin", "v1");
        let mut run = run_of(set, State::new(), &[]);
        let mut facts = facts_for(&run, "v2", &[]);
        facts.config = change();
        bed.installer.begin_config(&mut run, &facts).unwrap();
        (run, facts)
    }

    #[test]
    fn the_preflight_names_every_directory_written_and_why() {
        let mut plan = change();
        plan.validation = Some(Validation {
            containerd: ContainerdVersion::new(2, 1, 0),
            config: "/tmp/scratch.toml".into(),
            scratch: Some(ScratchFile {
                path: "/tmp/scratch.toml".into(),
                content: String::new(),
            }),
            present: vec![],
            absent: vec![],
            recorded: vec![],
            baseline: None,
        });
        let dirs: Vec<(String, String)> = written_dirs(&Layout::new(STATE_DIR), &plan)
            .into_iter()
            .map(|(dir, why)| (dir.display().to_string(), why))
            .collect();
        let expect = [
            (
                STATE_DIR,
                "its state file and the shim binaries".to_string(),
            ),
            ("/etc/containerd", format!("containerd config {CONFIG}")),
            (
                "/etc/containerd/conf.d",
                format!("containerd config {DROP_IN}"),
            ),
            ("/etc/containerd", format!("(remove) {OLD}")),
            ("/etc/containerd", format!("the backup {CONFIG}.bak")),
            ("/tmp", "the validation file /tmp/scratch.toml".to_string()),
        ]
        .map(|(dir, why)| (dir.to_string(), why));
        assert_eq!(dirs, expect);

        let bed = Bed::new(node(&[]));
        bed.installer.preflight(&plan).unwrap();
        bed.host.set_read_only("/etc/containerd");
        let err = bed.installer.preflight(&plan).unwrap_err().to_string();
        assert!(err.contains(CONFIG), "{err}");
    }

    #[test]
    fn a_change_touches_unverified_and_gone_shims_and_is_recorded_as_in_flight() {
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut run = run_of(&set, State::new(), &[]);
        let hash = run.selection.find("spin").unwrap().1.clone();
        run.state
            .shims
            .insert("spin".into(), recorded("spin", &hash));
        run.state.shims.insert("gone".into(), recorded("gone", "g"));
        run.state.ownership = owned(CONFIG);
        let gone = ["gone".to_string()];
        assert_eq!(
            touched_shims(&run.selection, &run.state, &gone),
            ["wasm", "gone"]
        );

        record_change(&mut run.state, &run.selection, &owned(DROP_IN), &gone);
        assert_eq!(run.state.ownership, owned(CONFIG).union(&owned(DROP_IN)));
        assert_eq!(run.state.shims["spin"].phase, Phase::Active, "verified");
        assert_eq!(run.state.shims["wasm"].phase, Phase::Installing);
        assert_eq!(run.state.shims["gone"].phase, Phase::Uninstalling);
    }

    #[test]
    fn the_journal_holds_the_content_before_the_first_write_of_the_change() {
        let mut bed = Bed::new(node(&[]));
        bed.write(CONFIG, "original");
        bed.write(&format!("{CONFIG}.bak"), "an older backup");
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let (mut run, mut facts) = begin_change(&mut bed, &set);

        let txn = run.state.config.clone().unwrap();
        let rollback: Vec<(String, Option<&str>)> = txn
            .rollback
            .iter()
            .map(|r| (r.path.display().to_string(), r.content.as_deref()))
            .collect();
        assert_eq!(
            rollback,
            [
                (format!("{CONFIG}.bak"), Some("an older backup")),
                (CONFIG.to_string(), Some("original")),
                (DROP_IN.to_string(), None),
                (OLD.to_string(), Some("old")),
            ]
        );
        assert_eq!(txn.created_dirs, [PathBuf::from("/etc/containerd/conf.d")]);
        assert_eq!(
            txn.symlinks,
            BTreeMap::from([
                (
                    "spin".to_string(),
                    Some(PathBuf::from("../versions/spin/v1"))
                ),
                ("wasm".to_string(), None),
            ])
        );
        assert_eq!(txn.shims, ["spin", "wasm"]);
        assert_eq!(txn.ownership_after, owned(DROP_IN));
        assert_eq!(bed.stored(), Some(run.state.clone()));

        // Resumed after a crash with part of the change written: the journal keeps the bytes
        // from before the change began.
        std::fs::write(bed.path(CONFIG), "edited").unwrap();
        facts.config.writes[0].previous = Some("edited".into());
        bed.installer.begin_config(&mut run, &facts).unwrap();
        let again = run.state.config.clone().unwrap();
        assert_eq!(again.rollback, txn.rollback);
        assert_eq!(again.started_at, txn.started_at);
    }

    #[test]
    fn restoring_puts_back_files_directories_and_symlinks() {
        let mut bed = Bed::new(node(&[]));
        bed.write(CONFIG, "original");
        std::fs::set_permissions(bed.path(CONFIG), std::fs::Permissions::from_mode(0o600)).unwrap();
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let (run, facts) = begin_change(&mut bed, &set);
        let before = bed.tree();

        bed.installer.write_config(&facts.config).unwrap();
        assert_eq!(bed.read(CONFIG).as_deref(), Some("edited"));
        assert_eq!(bed.read(DROP_IN).as_deref(), Some("ours"));
        assert_eq!(
            bed.read(&format!("{CONFIG}.bak")).as_deref(),
            Some("original")
        );
        assert_eq!(bed.read(OLD), None);
        let host = bed.host.clone();
        let mode = move |path: &str| {
            std::fs::metadata(host.path(path))
                .unwrap()
                .permissions()
                .mode()
        };
        assert_eq!(mode(CONFIG) & 0o777, 0o600, "an edit keeps the mode");
        crate::installer::payload::swap(&*bed.host, &bed.installer.settings.layout, "spin", "v2")
            .unwrap();
        crate::installer::payload::swap(&*bed.host, &bed.installer.settings.layout, "wasm", "v2")
            .unwrap();

        bed.installer
            .restore_files(run.state.config.as_ref().unwrap())
            .unwrap();
        assert_eq!(bed.tree(), before);
        assert_eq!(bed.read(CONFIG).as_deref(), Some("original"));
        assert_eq!(mode(CONFIG) & 0o777, 0o600);
        assert_eq!(bed.read(OLD).as_deref(), Some("old"));
        assert_eq!(
            std::fs::read_link(bed.path(&format!("{STATE_DIR}/current/spin"))).unwrap(),
            PathBuf::from("../versions/spin/v1")
        );
    }

    #[tokio::test]
    async fn a_config_that_fails_validation_is_restored_and_the_set_marked_failed() {
        let mut bed = Bed::new(node(&[]));
        bed.write(CONFIG, "original");
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        let mut facts = facts_for(&run, "v1", &[]);
        facts.config = change();
        facts.config.validation = Some(Validation {
            containerd: ContainerdVersion::new(2, 1, 0),
            config: CONFIG.into(),
            scratch: None,
            present: vec![],
            absent: vec![],
            recorded: vec![],
            baseline: None,
        });
        bed.installer.begin_config(&mut run, &facts).unwrap();
        bed.installer.write_config(&facts.config).unwrap();

        // The host's containerd binary does not exist, so the dump fails.
        let err = bed
            .installer
            .validate(&mut run)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("config dump"), "{err}");
        assert_eq!(bed.read(CONFIG).as_deref(), Some("original"));
        assert_eq!(bed.read(DROP_IN), None);
        assert!(run.state.config.is_none());
        assert!(run.state.ownership.is_empty());
        assert!(run.failed_before());
        let spin: &ShimState = &run.state.shims["spin"];
        assert_eq!(spin.phase, Phase::Failed);
        assert_eq!(bed.stored(), Some(run.state.clone()));
    }

    #[tokio::test]
    async fn a_change_without_validation_is_validated_as_is() {
        let mut bed = Bed::new(node(&[]));
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        bed.installer.validate(&mut run).await.unwrap();
        assert!(
            run.state.config.is_none(),
            "nothing journaled, nothing to do"
        );

        let facts = facts_for(&run, "v1", &[]);
        bed.installer.begin_config(&mut run, &facts).unwrap();
        bed.installer.validate(&mut run).await.unwrap();
        assert_eq!(
            run.state.config.as_ref().map(|t| &t.phase),
            Some(&TxnPhase::Validated)
        );
    }

    #[test]
    fn created_directories_go_once_nothing_of_ours_is_configured() {
        let bed = Bed::new(node(&[]));
        std::fs::create_dir_all(bed.path("/etc/containerd/conf.d")).unwrap();
        let mut state = State::new();
        state.created_dirs = vec!["/etc/containerd/conf.d".into()];
        state.ownership = owned(DROP_IN);
        bed.installer.remove_created_dirs(&mut state).unwrap();
        assert!(bed.path("/etc/containerd/conf.d").exists(), "still ours");

        state.ownership = Ownership::default();
        bed.installer.remove_created_dirs(&mut state).unwrap();
        assert!(!bed.path("/etc/containerd/conf.d").exists());
        assert!(state.created_dirs.is_empty());
    }
}
