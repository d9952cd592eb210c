//! The plan: what to write, delete and back up, how to validate it, and the new ownership
//! record. Computing it does no I/O besides reading through [`HostFs`]; the installer applies it.
//!
//! Applying a plan:
//!
//! 1. copy each [`Backup`];
//! 2. write [`Plan::writes`] in order (atomically: temp file + rename; create parent
//!    directories), then delete [`Plan::deletes`]. The order matters: a drop-in is written before
//!    the main file that imports it, and an import is removed before its file is deleted, so
//!    containerd never sees an import of a missing file;
//! 3. if [`Plan::validation`] is set, run the dump command and check the output (with the
//!    baseline dump, when the installer took one). containerd reads its config only at start, so
//!    the files written in step 2 are inert until the restart; on failure, restore every file
//!    from its `previous` content (or delete it when there was none) and do not restart;
//! 4. store [`Plan::ownership`] in the state file (always, also when nothing changed);
//! 5. restart containerd only if [`Plan::changed`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::daemon_version::ContainerdVersion;
use super::dump::ExpectedRuntime;
use super::effective::KeptRuntime;
use super::error::ConfigError;
use super::file_editors::{
    FileOutcome, edit_config, generate_drop_in, prefer_original, remember_original, remove_from,
    same_document,
};
use super::host::{HostFs, exists_host, read_host};
use super::locate::{Target, WriteStrategy};
use super::ownership::{FileRole, OwnedFile, Ownership};
use super::runtime::{RuntimeEntry, validate_set};
use super::sources::{
    ensure_cri_enabled, ensure_cri_table_not_imported, ensure_no_foreign_handlers, files_read,
};
use super::validation::Validation;

/// Suffix of the backup taken of a file we edit in place.
pub const BACKUP_SUFFIX: &str = ".containerd-shim.bak";
/// Suffix of the transient file validation dumps (it must sit next to the real config so that
/// relative imports resolve the same; it does not end in `.toml`, so no import glob loads it).
pub const SCRATCH_SUFFIX: &str = ".containerd-shim-candidate";

/// Suffix of the empty file dumped as the baseline where the config does not exist yet
/// (containerd 1.x refuses a missing `--config`); written and removed around that one dump.
pub const BASELINE_SUFFIX: &str = ".containerd-shim-baseline";

/// A file to write with its complete new content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileWrite {
    pub path: PathBuf,
    pub content: String,
    /// The content before, for rollback; `None` when the file is new.
    pub previous: Option<String>,
}

/// A file to delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileDelete {
    pub path: PathBuf,
    /// The content before, for rollback.
    pub previous: String,
}

/// Write `content`, the file `source` as it was before our first edit, to `destination`
/// before writing `source`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    pub source: PathBuf,
    pub destination: PathBuf,
    pub content: String,
}

/// Everything the installer needs to do to converge containerd's config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Where and how (absent for uninstall, which goes by the ownership record alone).
    pub target: Option<Target>,
    pub backups: Vec<Backup>,
    pub writes: Vec<FileWrite>,
    pub deletes: Vec<FileDelete>,
    /// Set whenever `changed` is and there is a config to dump afterwards.
    pub validation: Option<Validation>,
    /// The record to store; replaces the previous one.
    pub ownership: Ownership,
    /// Whether containerd's effective config changes, i.e. whether containerd must restart.
    pub changed: bool,
}

/// Plans installing exactly `runtimes` (an empty list removes all of ours) at `target`, given
/// what we owned before. Fails, planning nothing, on invalid input, unreadable or corrupt files,
/// a disabled CRI plugin, and foreign tables or files in our way.
pub fn plan_install(
    host: &dyn HostFs,
    target: &Target,
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
) -> Result<Plan, ConfigError> {
    plan_install_keeping(host, target, runtimes, previous, None)
}

/// [`plan_install`], also writing out `kept`: the runtimes containerd provides implicitly
/// (from the node's effective configuration, [`super::EffectiveConfig::runtimes_to_keep`]) that
/// an edited file must define to keep them once it defines ours. Only containerd 1.x needs
/// this (2.x merges runtimes into its defaults); `None` leaves what was kept before as it is.
pub fn plan_install_keeping(
    host: &dyn HostFs,
    target: &Target,
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
    kept: Option<&[KeptRuntime]>,
) -> Result<Plan, ConfigError> {
    target.containerd.ensure_supported()?;
    validate_set(runtimes)?;
    let handed_over = if runtimes.is_empty() {
        Vec::new()
    } else {
        ensure_nothing_in_the_way(host, target, runtimes, previous)?
    };
    let mut outcomes = edit_target(host, target, runtimes, previous, kept)?;
    let targeted: BTreeSet<PathBuf> = outcomes.iter().map(|o| o.path.clone()).collect();
    for owned in &previous.files {
        if !targeted.contains(&owned.path) {
            outcomes.push(remove_from(host, owned)?);
        }
    }

    let validation_config = match &target.strategy {
        WriteStrategy::InPlace { file } => file.clone(),
        WriteStrategy::DropIn { main, .. } | WriteStrategy::DropInWithImport { main, .. } => {
            main.clone()
        }
    };

    for outcome in &mut outcomes {
        let before_us = previous.file(&outcome.path);
        remember_original(outcome, before_us);
        // A plan that takes the last of ours out of a file uninstalls that file: the same
        // exact-bytes rule as an uninstall applies.
        if outcome.owned.is_empty()
            && let Some(before_us) = before_us
            && let Some(after) = outcome.after.as_mut()
        {
            *after = prefer_original(before_us, std::mem::take(after));
        }
    }

    let check = DumpCheck {
        containerd: target.containerd,
        config: Some(validation_config),
        present: runtimes.iter().map(ExpectedRuntime::of).collect(),
        absent: previous
            .handlers()
            .filter(|owned| !runtimes.iter().any(|r| r.handler == owned.handler))
            .map(ExpectedRuntime::owned)
            .collect(),
        handed_over,
    };
    Ok(assemble(
        host,
        previous,
        Some(target.clone()),
        outcomes,
        check,
    ))
}

/// Fails when something containerd reads stands in the way of installing `runtimes`; returns
/// the handlers whose table gardener-node-agent delivered for the same shim (taken over).
fn ensure_nothing_in_the_way(
    host: &dyn HostFs,
    target: &Target,
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
) -> Result<Vec<String>, ConfigError> {
    // Everything containerd reads counts: a CRI plugin disabled in a drop-in, or a runtime of
    // one of our handlers in an imported file, is as real as one in the main file.
    let (editable, generated) = match &target.strategy {
        WriteStrategy::InPlace { file } => (Some(file.as_path()), None),
        WriteStrategy::DropIn { file, .. } | WriteStrategy::DropInWithImport { file, .. } => {
            (None, Some(file.as_path()))
        }
    };
    let files = files_read(host, target.containerd, &target.config, generated)?;
    ensure_cri_enabled(&files)?;
    let handed_over = ensure_no_foreign_handlers(&files, runtimes, previous, editable)?;
    if let Some(edited) = editable {
        ensure_cri_table_not_imported(&files, target.containerd, edited)?;
    }
    Ok(handed_over)
}

/// The files the target's write strategy changes, each with its new content.
fn edit_target(
    host: &dyn HostFs,
    target: &Target,
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
    kept: Option<&[KeptRuntime]>,
) -> Result<Vec<FileOutcome>, ConfigError> {
    let drop_in = |file: &Path, main: &Path| {
        generate_drop_in(
            host,
            file,
            main,
            target.version,
            runtimes,
            previous.file(file),
        )
    };
    Ok(match &target.strategy {
        WriteStrategy::InPlace { file } => vec![edit_config(
            host,
            file,
            target.version,
            runtimes,
            None,
            previous.file(file),
            kept,
        )?],
        WriteStrategy::DropIn { file, main } => vec![drop_in(file, main)?],
        WriteStrategy::DropInWithImport { file, main } => {
            let entry = utf8(file)?;
            let drop_in = drop_in(file, main)?;
            // The import goes only where a drop-in will exist to import.
            let import = drop_in.after.as_ref().map(|_| entry);
            let main = edit_config(
                host,
                main,
                target.version,
                &[],
                import,
                previous.file(main),
                None,
            )?;
            vec![drop_in, main]
        }
    })
}

/// Plans removing everything the record says we own. `containerd` is the release on the node,
/// for validation.
pub fn plan_uninstall(
    host: &dyn HostFs,
    containerd: ContainerdVersion,
    previous: &Ownership,
) -> Result<Plan, ConfigError> {
    containerd.ensure_supported()?;
    let outcomes = previous
        .files
        .iter()
        .map(|owned| remove_from(host, owned))
        .collect::<Result<Vec<_>, _>>()?;

    // What to dump afterwards: the main file of a drop-in, else a config we edited in place.
    let by_role = |wanted: fn(&FileRole) -> bool| previous.files.iter().find(|f| wanted(&f.role));
    let base = match by_role(|role| matches!(role, FileRole::DropIn { .. })) {
        Some(OwnedFile {
            role: FileRole::DropIn { main },
            ..
        }) => Some(main.clone()),
        _ => by_role(|role| matches!(role, FileRole::Config)).map(|owned| owned.path.clone()),
    };

    let check = DumpCheck {
        containerd,
        config: base,
        present: Vec::new(),
        absent: previous.handlers().map(ExpectedRuntime::owned).collect(),
        handed_over: Vec::new(),
    };
    Ok(assemble(host, previous, None, outcomes, check))
}

/// What the validation of a plan that changes files checks: `containerd`'s dump of `config`
/// (`None`: there is nothing to dump) shows the `present` runtimes and none of the `absent`.
struct DumpCheck {
    containerd: ContainerdVersion,
    config: Option<PathBuf>,
    present: Vec<ExpectedRuntime>,
    absent: Vec<ExpectedRuntime>,
    /// Handlers whose table before the change is the node agent's delivery of the same shim:
    /// like our recorded ones, not someone else's in the baseline.
    handed_over: Vec<String>,
}

fn assemble(
    host: &dyn HostFs,
    previous: &Ownership,
    target: Option<Target>,
    outcomes: Vec<FileOutcome>,
    check: DumpCheck,
) -> Plan {
    let DumpCheck {
        containerd,
        config,
        present,
        absent,
        handed_over,
    } = check;
    let mut actions = Actions::default();
    // Drop-ins first, then the files that import them (see the module docs).
    let mut ordered: Vec<&FileOutcome> = outcomes.iter().collect();
    ordered.sort_by_key(|o| matches!(o.role, FileRole::Config));
    for outcome in ordered {
        actions.add(host, outcome, previous.file(&outcome.path));
    }
    let Actions {
        backups,
        writes,
        deletes,
        owned_files,
    } = actions;
    let changed = !writes.is_empty() || !deletes.is_empty();
    let exists_after = |path: &Path| {
        outcomes
            .iter()
            .find(|o| o.path == path)
            .is_none_or(|o| o.after.is_some())
    };
    let validation = config
        .filter(|config| changed && exists_after(config))
        .map(|config| Validation {
            containerd,
            config,
            scratch: None,
            present,
            absent,
            recorded: previous
                .handlers()
                .map(|h| h.handler.clone())
                .chain(handed_over)
                .collect(),
            baseline: None,
        });
    Plan {
        target,
        backups,
        writes,
        deletes,
        validation,
        ownership: Ownership::from_files(owned_files),
        changed,
    }
}

/// What a plan does to the files, and the record of what stays ours in them.
#[derive(Default)]
struct Actions {
    backups: Vec<Backup>,
    writes: Vec<FileWrite>,
    deletes: Vec<FileDelete>,
    owned_files: Vec<OwnedFile>,
}

impl Actions {
    /// Adds one file's change; `before_us` is its previous record.
    fn add(&mut self, host: &dyn HostFs, outcome: &FileOutcome, before_us: Option<&OwnedFile>) {
        let mut owned = outcome.owned.clone();
        owned.backup = before_us.is_some_and(|p| p.backup);
        match (&outcome.before, &outcome.after) {
            (before, Some(after)) if before.as_deref() != Some(after.as_str()) => {
                self.back_up_original(host, outcome, &mut owned);
                self.writes.push(FileWrite {
                    path: outcome.path.clone(),
                    content: after.clone(),
                    previous: before.clone(),
                });
            }
            (Some(before), None) => self.deletes.push(FileDelete {
                path: outcome.path.clone(),
                previous: before.clone(),
            }),
            _ => {}
        }
        if owned.is_empty() {
            self.delete_our_backup(host, outcome, &mut owned);
        }
        if outcome.after.is_some() {
            self.owned_files.push(owned);
        }
    }

    /// The backup holds the file as it was before our first edit (the recorded original),
    /// whatever happened since: it is written only where none exists, so drift repair and
    /// later edits never replace it (nor copy our own tables into it), and a backup lost to an
    /// interrupted first edit is written again.
    fn back_up_original(
        &mut self,
        host: &dyn HostFs,
        outcome: &FileOutcome,
        owned: &mut OwnedFile,
    ) {
        let Some(original) = owned
            .original
            .as_ref()
            .filter(|_| outcome.before.is_some() && !owned.created && !owned.is_empty())
        else {
            return;
        };
        let destination = suffixed(&outcome.path, BACKUP_SUFFIX);
        // An unreadable destination counts as present: never overwrite a backup.
        if !exists_host(host, &destination).unwrap_or(true) {
            self.backups.push(Backup {
                source: outcome.path.clone(),
                destination,
                content: original.clone(),
            });
        }
        owned.backup = true;
    }

    /// Nothing of ours is left in the file: its backup goes with us. Without a record of it (a
    /// lost state file), a backup that means what the file means now is ours.
    fn delete_our_backup(
        &mut self,
        host: &dyn HostFs,
        outcome: &FileOutcome,
        owned: &mut OwnedFile,
    ) {
        let backup = suffixed(&outcome.path, BACKUP_SUFFIX);
        if let Ok(Some(content)) = read_host(host, &backup) {
            let ours = owned.backup
                || outcome
                    .after
                    .as_deref()
                    .is_some_and(|after| same_document(&content, after));
            if ours {
                self.deletes.push(FileDelete {
                    path: backup,
                    previous: content,
                });
            }
        }
        owned.backup = false;
    }
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn utf8(path: &Path) -> Result<String, ConfigError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| ConfigError::NonUtf8Path {
            path: path.to_path_buf(),
        })
}
