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
//! 3. if [`Plan::validation`] is set, write its scratch file (if any), run the dump command and
//!    check the output, remove the scratch file. containerd reads its config only at start, so
//!    the files written in step 2 are inert until the restart; on failure, restore every file
//!    from its `previous` content (or delete it when there was none) and do not restart;
//! 4. store [`Plan::ownership`] in the state file (always, also when nothing changed);
//! 5. restart containerd only if [`Plan::changed`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml_edit::DocumentMut;

use super::config_version::{ConfigVersion, parse_toml};
use super::daemon_version::ContainerdVersion;
use super::dump::ExpectedRuntime;
use super::edit::{RuntimeEdit, reconcile_runtimes, remove_owned, table_at};
use super::effective::KeptRuntime;
use super::error::ConfigError;
use super::host::{HostFs, read_host};
use super::imports::{covered_drop_in, ensure_import, imports_exactly, imports_of};
use super::locate::{Target, WriteStrategy};
use super::ownership::{FileRole, OwnedFile, Ownership};
use super::runtime::{RuntimeEntry, validate_set};
use super::style::RuntimeStyle;
use super::text::{BASE_TEMPLATE_HEADER, render_like, split_template};

/// Suffix of the backup taken of a file we edit in place.
pub const BACKUP_SUFFIX: &str = ".containerd-shim.bak";
/// Suffix of the transient file validation dumps (it must sit next to the real config so that
/// relative imports resolve the same; it does not end in `.toml`, so no import glob loads it).
pub const SCRATCH_SUFFIX: &str = ".containerd-shim-candidate";

/// Suffix of the empty file dumped as the baseline where the config does not exist yet
/// (containerd 1.x refuses a missing `--config`); written and removed around that one dump.
pub const BASELINE_SUFFIX: &str = ".containerd-shim-baseline";

/// The header of drop-ins we generate. Informational only: ownership lives in the state file.
const DROP_IN_HEADER: &str = "# Runtime handlers of the gardener-extension-containerd-shim node installer.\n\
# The installer owns this file: it rewrites it on every change and deletes it on uninstall.\n";

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

/// A transient file validation needs (a predicted template render, or a main file that imports
/// a drop-in the distribution would merge itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScratchFile {
    pub path: PathBuf,
    pub content: String,
}

/// How to prove with the node's containerd that the planned config works.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// The containerd the dump must come from (decides where the merged config shows runtimes).
    pub containerd: ContainerdVersion,
    /// The file to pass to `containerd --config`, after the plan's writes.
    pub config: PathBuf,
    /// Written before the dump and removed after it, when set; then `config` is its path.
    pub scratch: Option<ScratchFile>,
    /// Runtimes the merged config must contain, exactly like this.
    pub present: Vec<ExpectedRuntime>,
    /// Runtimes of ours that must be gone.
    pub absent: Vec<ExpectedRuntime>,
    /// `containerd config dump` of the configuration as it was before the change, when taken:
    /// the candidate must not differ from it in anything that is not ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
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
    /// Whether containerd's effective config changes, i.e. whether containerd must restart. For
    /// templates this is also true when the template already holds our tables but the rendered
    /// config does not yet (a restart that applies it is still due).
    pub changed: bool,
}

/// The result of planning one file.
struct FileOutcome {
    path: PathBuf,
    role: FileRole,
    before: Option<String>,
    /// `None`: the file must not exist afterwards.
    after: Option<String>,
    owned: OwnedFile,
}

/// Plans installing exactly `runtimes` (an empty list removes all of ours) at `target`, given
/// what we owned before. Fails, planning nothing, on invalid input, unreadable or corrupt files,
/// foreign tables or files in our way, and templates that cannot be edited safely.
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
    if !runtimes.is_empty() {
        ensure_cri_enabled(host, &target.config)?;
    }
    let mut outcomes = match &target.strategy {
        WriteStrategy::InPlace { file } => vec![edit_config(
            host,
            file,
            target.version,
            runtimes,
            None,
            previous.file(file),
            kept,
        )?],
        WriteStrategy::DropIn { file, main } => vec![generate_drop_in(
            host,
            file,
            main,
            target.version,
            runtimes,
            previous.file(file),
        )?],
        WriteStrategy::DropInWithImport { file, main } => {
            let entry = utf8(file)?;
            let drop_in = generate_drop_in(
                host,
                file,
                main,
                target.version,
                runtimes,
                previous.file(file),
            )?;
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
        WriteStrategy::Template { template, rendered } => vec![edit_template(
            host,
            template,
            rendered,
            target.version,
            runtimes,
            previous.file(template),
        )?],
    };
    let targeted: BTreeSet<PathBuf> = outcomes.iter().map(|o| o.path.clone()).collect();
    for owned in &previous.files {
        if !targeted.contains(&owned.path) {
            outcomes.push(remove_from(host, owned)?);
        }
    }

    let mut template_pending = false;
    let validation_base = match &target.strategy {
        WriteStrategy::InPlace { file } => Base::Dump(file.clone()),
        WriteStrategy::DropInWithImport { main, .. } => Base::Dump(main.clone()),
        WriteStrategy::DropIn { file, main } => drop_in_base(host, &outcomes, file, main)?,
        WriteStrategy::Template { template, rendered } => {
            let predicted = predict_render(
                host,
                rendered,
                RenderEdit::Install {
                    version: target.version,
                    runtimes,
                    previous: previous.file(template),
                },
            )?;
            if let Some((_, dirty)) = &predicted {
                template_pending = *dirty;
            }
            match predicted {
                Some((content, _)) => Base::Scratch(ScratchFile {
                    path: scratch_path(rendered),
                    content,
                }),
                None => Base::Nothing,
            }
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

    let present = runtimes.iter().map(ExpectedRuntime::of).collect();
    let absent = previous
        .handlers()
        .filter(|owned| !runtimes.iter().any(|r| r.handler == owned.handler))
        .map(ExpectedRuntime::owned)
        .collect();
    Ok(assemble(
        host,
        previous,
        Some(target.clone()),
        target.containerd,
        outcomes,
        validation_base,
        template_pending,
        present,
        absent,
    ))
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

    // What to dump afterwards: the rendered config a template feeds, else the main file of a
    // drop-in, else a config we edited in place.
    let mut base = Base::Nothing;
    let mut template_pending = false;
    let by_role = |wanted: fn(&FileRole) -> bool| previous.files.iter().find(|f| wanted(&f.role));
    if let Some(owned) = by_role(|role| matches!(role, FileRole::Template { .. })) {
        if let FileRole::Template { rendered } = &owned.role
            && let Some((content, dirty)) =
                predict_render(host, rendered, RenderEdit::Remove(owned))?
        {
            template_pending = dirty;
            base = Base::Scratch(ScratchFile {
                path: scratch_path(rendered),
                content,
            });
        }
    } else if let Some(owned) = by_role(|role| matches!(role, FileRole::DropIn { .. })) {
        if let FileRole::DropIn { main } = &owned.role {
            base = Base::Dump(main.clone());
        }
    } else if let Some(owned) = by_role(|role| matches!(role, FileRole::Config)) {
        base = Base::Dump(owned.path.clone());
    }

    let absent = previous.handlers().map(ExpectedRuntime::owned).collect();
    Ok(assemble(
        host,
        previous,
        None,
        containerd,
        outcomes,
        base,
        template_pending,
        Vec::new(),
        absent,
    ))
}

enum Base {
    /// Dump this file as it is after the plan is applied.
    Dump(PathBuf),
    /// Dump a transient file.
    Scratch(ScratchFile),
    Nothing,
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    host: &dyn HostFs,
    previous: &Ownership,
    target: Option<Target>,
    containerd: ContainerdVersion,
    outcomes: Vec<FileOutcome>,
    base: Base,
    template_pending: bool,
    present: Vec<ExpectedRuntime>,
    absent: Vec<ExpectedRuntime>,
) -> Plan {
    let mut backups = Vec::new();
    let mut writes = Vec::new();
    let mut deletes = Vec::new();
    let mut owned_files = Vec::new();
    // Drop-ins and templates first, then the files that import them (see the module docs).
    let mut ordered: Vec<&FileOutcome> = outcomes.iter().collect();
    ordered.sort_by_key(|o| matches!(o.role, FileRole::Config));
    for outcome in ordered {
        let before_us = previous.file(&outcome.path);
        let mut owned = outcome.owned.clone();
        owned.backup = before_us.is_some_and(|p| p.backup);
        match (&outcome.before, &outcome.after) {
            (before, Some(after)) if before.as_deref() != Some(after.as_str()) => {
                // The backup holds the file as it was before our first edit (the recorded
                // original), whatever happened since: later edits never copy our own tables
                // into it, and a backup lost to an interrupted first edit is written again.
                if let Some(original) = owned
                    .original
                    .as_ref()
                    .filter(|_| before.is_some() && !owned.created && !owned.is_empty())
                {
                    let destination = suffixed(&outcome.path, BACKUP_SUFFIX);
                    if read_host(host, &destination).ok().flatten().as_ref() != Some(original) {
                        backups.push(Backup {
                            source: outcome.path.clone(),
                            destination,
                            content: original.clone(),
                        });
                    }
                    owned.backup = true;
                }
                writes.push(FileWrite {
                    path: outcome.path.clone(),
                    content: after.clone(),
                    previous: before.clone(),
                });
            }
            (Some(before), None) => deletes.push(FileDelete {
                path: outcome.path.clone(),
                previous: before.clone(),
            }),
            _ => {}
        }
        if owned.is_empty() {
            // Nothing of ours is left in the file: its backup goes with us. Without a record
            // of it (a lost state file), a backup that means what the file means now is ours.
            let backup = suffixed(&outcome.path, BACKUP_SUFFIX);
            if let Ok(Some(content)) = read_host(host, &backup) {
                let ours = owned.backup
                    || outcome.after.as_deref().is_some_and(|after| {
                        same_document(&outcome.role, &outcome.path, &content, after)
                    });
                if ours {
                    deletes.push(FileDelete {
                        path: backup,
                        previous: content,
                    });
                }
            }
            owned.backup = false;
        }
        if outcome.after.is_some() {
            owned_files.push(owned);
        }
    }
    let changed = !writes.is_empty() || !deletes.is_empty() || template_pending;
    let exists_after = |path: &Path| {
        outcomes
            .iter()
            .find(|o| o.path == path)
            .is_none_or(|o| o.after.is_some())
    };
    let validation = match base {
        _ if !changed => None,
        Base::Dump(config) if exists_after(&config) => Some(Validation {
            containerd,
            config,
            scratch: None,
            present,
            absent,
            baseline: None,
        }),
        Base::Scratch(scratch) => Some(Validation {
            containerd,
            config: scratch.path.clone(),
            scratch: Some(scratch),
            present,
            absent,
            baseline: None,
        }),
        _ => None,
    };
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

/// The names containerd accepts in `disabled_plugins` for its CRI plugin: the short name of
/// containerd 1.x and the ids of the plugins that serve runtimes in 1.x and 2.x.
const CRI_PLUGIN_NAMES: &[&str] = &[
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// A node whose containerd has no CRI plugin cannot serve a runtime handler to the kubelet:
/// refused before anything is planned, naming the file and the entry.
fn ensure_cri_enabled(host: &dyn HostFs, config: &Path) -> Result<(), ConfigError> {
    let Some(text) = read_host(host, config)? else {
        return Ok(());
    };
    let doc = parse_toml(config, &text)?;
    let disabled = doc
        .get("disabled_plugins")
        .and_then(toml_edit::Item::as_array)
        .into_iter()
        .flat_map(|array| array.iter())
        .filter_map(toml_edit::Value::as_str)
        .find(|name| CRI_PLUGIN_NAMES.contains(name));
    match disabled {
        Some(plugin) => Err(ConfigError::CriDisabled {
            path: config.to_path_buf(),
            plugin: plugin.to_string(),
        }),
        None => Ok(()),
    }
}

/// A config file edited in place: our runtime tables and, optionally, one `imports` entry.
fn edit_config(
    host: &dyn HostFs,
    path: &Path,
    new_file_version: ConfigVersion,
    runtimes: &[RuntimeEntry],
    import: Option<String>,
    previous: Option<&OwnedFile>,
    kept: Option<&[KeptRuntime]>,
) -> Result<FileOutcome, ConfigError> {
    let before = read_host(host, path)?;
    let (mut doc, version, created) = match &before {
        Some(text) => {
            let doc = parse_toml(path, text)?;
            let version = ConfigVersion::detect(path, &doc)?;
            (doc, version, previous.is_some_and(|p| p.created))
        }
        None => {
            if runtimes.is_empty() && import.is_none() {
                return Ok(unchanged(path, FileRole::Config, None));
            }
            let mut doc = DocumentMut::new();
            doc.insert("version", toml_edit::value(new_file_version.number()));
            (doc, new_file_version, true)
        }
    };
    let outcome = reconcile_runtimes(
        &mut doc,
        &RuntimeEdit {
            path,
            version,
            desired: runtimes,
            previous,
            style: (before.is_none()).then(RuntimeStyle::generated),
            kept,
        },
    )?;
    let mut owned = OwnedFile::new(path, FileRole::Config);
    owned.created = created;
    owned.handlers = outcome.handlers;
    owned.kept = outcome.kept;
    owned.created_tables = outcome.created_tables;
    let mut dirty = outcome.dirty || before.is_none();
    if let Some(entry) = import {
        dirty |= ensure_import(path, &mut doc, &entry, previous, &mut owned)?;
    } else if let Some(previous) = previous {
        dirty |= super::imports::remove_imports(&mut doc, previous);
    }
    if created && only_version_left(&doc) && owned.handlers.is_empty() && owned.imports.is_empty() {
        // A file we created that holds nothing of anyone's anymore: back to no file.
        return Ok(FileOutcome {
            path: path.to_path_buf(),
            role: FileRole::Config,
            before,
            after: None,
            owned,
        });
    }
    let after = match (&before, dirty) {
        (Some(text), false) => text.clone(),
        (original, _) => render_like(&doc, original.as_deref().unwrap_or_default()),
    };
    Ok(FileOutcome {
        path: path.to_path_buf(),
        role: FileRole::Config,
        before,
        after: Some(after),
        owned,
    })
}

/// Our own drop-in: generated as a whole, so any drift (including edits by others) is undone.
fn generate_drop_in(
    host: &dyn HostFs,
    path: &Path,
    main: &Path,
    version: ConfigVersion,
    runtimes: &[RuntimeEntry],
    previous: Option<&OwnedFile>,
) -> Result<FileOutcome, ConfigError> {
    let role = FileRole::DropIn {
        main: main.to_path_buf(),
    };
    let before = read_host(host, path)?;
    if let (Some(text), None) = (&before, previous) {
        ensure_adoptable_file(path, text, version, runtimes)?;
    }
    if runtimes.is_empty() {
        let mut outcome = unchanged(path, role, before);
        outcome.after = None;
        return Ok(outcome);
    }
    let mut doc = DocumentMut::new();
    // Always declared, and equal to the main file's: containerd migrates each file by its own
    // version, so a drop-in without one would be read as v1.
    doc.insert("version", toml_edit::value(version.number()));
    let outcome = reconcile_runtimes(
        &mut doc,
        &RuntimeEdit {
            path,
            version,
            desired: runtimes,
            previous: None,
            style: Some(RuntimeStyle::generated()),
            kept: None,
        },
    )?;
    let mut owned = OwnedFile::new(path, role.clone());
    owned.created = true;
    owned.handlers = outcome.handlers;
    owned.created_tables = outcome.created_tables;
    Ok(FileOutcome {
        path: path.to_path_buf(),
        role,
        before,
        after: Some(format!("{DROP_IN_HEADER}{doc}")),
        owned,
    })
}

/// A file at our drop-in path that we have no record of is ours only if every runtime in it
/// points at one of our managed shim paths (a state file lost after an earlier install).
fn ensure_adoptable_file(
    path: &Path,
    text: &str,
    version: ConfigVersion,
    runtimes: &[RuntimeEntry],
) -> Result<(), ConfigError> {
    let foreign = |what: String| ConfigError::ForeignFile {
        path: path.to_path_buf(),
        what,
    };
    let doc = parse_toml(path, text).map_err(|_| foreign("text that is not valid TOML".into()))?;
    let runtimes_path = version.runtimes_table();
    let Some(table) = super::edit::table_at(doc.as_table(), &runtimes_path) else {
        return Err(foreign(format!("no `{runtimes_path}` table")));
    };
    for (handler, item) in table.iter() {
        let ours = runtimes.iter().any(|r| {
            r.handler == handler
                && item
                    .as_table_like()
                    .and_then(|table| r.managed_key.value_in(table))
                    == Some(r.runtime_path.as_str())
        });
        if !ours {
            return Err(foreign(format!("runtime `{handler}`, which is not ours")));
        }
    }
    Ok(())
}

/// A k3s/rke2 template: the TOML body below the Go-template header lines is edited like a config
/// file; the header stays verbatim.
fn edit_template(
    host: &dyn HostFs,
    path: &Path,
    rendered: &Path,
    version: ConfigVersion,
    runtimes: &[RuntimeEntry],
    previous: Option<&OwnedFile>,
) -> Result<FileOutcome, ConfigError> {
    let role = FileRole::Template {
        rendered: rendered.to_path_buf(),
    };
    for runtime in runtimes {
        // Keys are written into the template too (found by the fuzz target `containerd_config`:
        // an option key with `{{` made a template k3s would execute and we would refuse next).
        if let Some(key) = runtime.options.keys().find(|k| k.contains("{{")) {
            return Err(ConfigError::UnsafeTemplateKey {
                path: path.to_path_buf(),
                handler: runtime.handler.clone(),
                key: key.clone(),
            });
        }
        for (key, value) in runtime.strings() {
            if value.contains("{{") {
                return Err(ConfigError::UnsafeTemplateValue {
                    path: path.to_path_buf(),
                    key: version.runtime_table(&runtime.handler).join(key),
                    value: value.to_string(),
                });
            }
        }
    }
    let before = read_host(host, path)?;
    let (header, body, created) = match &before {
        Some(text) => {
            let parts = split_template(path, text)?;
            (
                parts.header.to_string(),
                parts.body.to_string(),
                previous.is_some_and(|p| p.created),
            )
        }
        None if runtimes.is_empty() => return Ok(unchanged(path, role, None)),
        None => (BASE_TEMPLATE_HEADER.to_string(), String::new(), true),
    };
    let mut doc = parse_toml(path, &body)?;
    let outcome = reconcile_runtimes(
        &mut doc,
        &RuntimeEdit {
            path,
            version,
            desired: runtimes,
            previous,
            style: (before.is_none()).then(RuntimeStyle::generated),
            kept: None,
        },
    )?;
    let mut owned = OwnedFile::new(path, role.clone());
    owned.created = created;
    owned.handlers = outcome.handlers;
    owned.created_tables = outcome.created_tables;
    if created && owned.handlers.is_empty() {
        return Ok(FileOutcome {
            path: path.to_path_buf(),
            role,
            before,
            after: None,
            owned,
        });
    }
    let after = match (&before, outcome.dirty) {
        (Some(text), false) => text.clone(),
        _ => format!("{header}{}", render_like(&doc, &body)),
    };
    Ok(FileOutcome {
        path: path.to_path_buf(),
        role,
        before,
        after: Some(after),
        owned,
    })
}

/// Removes everything a record claims from its file. Files we created as a whole (drop-ins,
/// templates) are deleted; a config file we created is deleted once nothing but its `version`
/// is left in it.
/// Records on an edited file what it was before we first changed it: carried over from the
/// previous record, or taken now when we own nothing in the file yet and it holds none of our
/// handler tables (after a lost state file, adopted tables mean nobody knows its pre-us bytes).
fn remember_original(outcome: &mut FileOutcome, previous: Option<&OwnedFile>) {
    if outcome.owned.created {
        return;
    }
    outcome.owned.original = match previous {
        Some(p) if !p.is_empty() => p.original.clone(),
        _ => outcome
            .before
            .clone()
            .filter(|text| !holds_any_handler(text, &outcome.owned)),
    };
}

/// The bytes uninstall writes: the recorded original when it means exactly what removing our
/// keys produced (nobody else changed the file's content since), else the structured result.
fn prefer_original(owned: &OwnedFile, removed: String) -> String {
    match &owned.original {
        Some(original) if same_document(&owned.role, &owned.path, original, &removed) => {
            original.clone()
        }
        _ => removed,
    }
}

/// Whether two versions of a file mean the same: equal TOML values (formatting, comments and
/// key spelling aside) and, for templates, equal template headers.
fn same_document(role: &FileRole, path: &Path, a: &str, b: &str) -> bool {
    let (a, b) = match role {
        FileRole::Template { .. } => match (split_template(path, a), split_template(path, b)) {
            (Ok(a), Ok(b)) if a.header == b.header => (a.body.to_string(), b.body.to_string()),
            _ => return false,
        },
        _ => (a.to_string(), b.to_string()),
    };
    match (
        a.parse::<toml_edit::DocumentMut>(),
        b.parse::<toml_edit::DocumentMut>(),
    ) {
        (Ok(a), Ok(b)) => super::toml_value::same_table(a.as_table(), b.as_table()),
        _ => false,
    }
}

/// Whether `text` (a TOML document, possibly a template body) contains one of the handler tables
/// of `owned`. Unparsable text counts as holding them: then no original is recorded.
fn holds_any_handler(text: &str, owned: &OwnedFile) -> bool {
    let body = match &owned.role {
        FileRole::Template { .. } => match split_template(&owned.path, text) {
            Ok(parts) => parts.body.to_string(),
            Err(_) => return true,
        },
        _ => text.to_string(),
    };
    let Ok(doc) = body.parse::<toml_edit::DocumentMut>() else {
        return true;
    };
    owned
        .handlers
        .iter()
        .any(|h| table_at(doc.as_table(), &h.table).is_some())
}

fn remove_from(host: &dyn HostFs, owned: &OwnedFile) -> Result<FileOutcome, ConfigError> {
    let path = owned.path.as_path();
    let before = read_host(host, path)?;
    let Some(text) = before.clone() else {
        return Ok(unchanged(path, owned.role.clone(), None));
    };

    let gone = |before| FileOutcome {
        path: path.to_path_buf(),
        role: owned.role.clone(),
        before,
        after: None,
        owned: OwnedFile::new(path, owned.role.clone()),
    };
    match &owned.role {
        FileRole::DropIn { .. } | FileRole::Template { .. } if owned.created => Ok(gone(before)),
        FileRole::Template { .. } => {
            let parts = split_template(path, &text)?;
            let mut doc = parse_toml(path, parts.body)?;
            let after = if remove_owned(&mut doc, owned) {
                format!("{}{}", parts.header, render_like(&doc, parts.body))
            } else {
                text.clone()
            };
            Ok(finished(path, owned, before, prefer_original(owned, after)))
        }
        _ => {
            let mut doc = parse_toml(path, &text)?;
            let dirty = remove_owned(&mut doc, owned);
            if owned.created && only_version_left(&doc) {
                return Ok(gone(before));
            }
            let after = if dirty {
                render_like(&doc, &text)
            } else {
                text.clone()
            };
            Ok(finished(path, owned, before, prefer_original(owned, after)))
        }
    }
}

fn finished(path: &Path, owned: &OwnedFile, before: Option<String>, after: String) -> FileOutcome {
    FileOutcome {
        path: path.to_path_buf(),
        role: owned.role.clone(),
        before,
        after: Some(after),
        owned: OwnedFile::new(path, owned.role.clone()),
    }
}

fn unchanged(path: &Path, role: FileRole, before: Option<String>) -> FileOutcome {
    FileOutcome {
        path: path.to_path_buf(),
        role: role.clone(),
        after: before.clone(),
        before,
        owned: OwnedFile::new(path, role),
    }
}

/// What validation dumps for a drop-in: the main file when it imports the drop-in (by glob or
/// exactly); otherwise (k0s merges drop-ins itself) a scratch copy of the main file that imports
/// it, which proves our file parses and our keys are known.
fn drop_in_base(
    host: &dyn HostFs,
    outcomes: &[FileOutcome],
    file: &Path,
    main: &Path,
) -> Result<Base, ConfigError> {
    let Some(text) = read_host(host, main)? else {
        return Ok(Base::Nothing);
    };
    let doc = parse_toml(main, &text)?;
    let imports = imports_of(main, &doc)?;
    if covered_drop_in(main, &imports).as_deref() == Some(file)
        || imports_exactly(main, &imports, file)
    {
        return Ok(Base::Dump(main.to_path_buf()));
    }
    let drop_in_exists = outcomes
        .iter()
        .find(|o| o.path == file)
        .is_some_and(|o| o.after.is_some());
    if !drop_in_exists {
        return Ok(Base::Dump(main.to_path_buf()));
    }
    let mut doc = doc;
    let mut scratch_owned = OwnedFile::new(main, FileRole::Config);
    ensure_import(main, &mut doc, &utf8(file)?, None, &mut scratch_owned)?;
    Ok(Base::Scratch(ScratchFile {
        path: scratch_path(main),
        content: render_like(&doc, &text),
    }))
}

/// The config the distribution will render from the template once containerd restarts: its
/// current rendering with the same edits applied. `None` when nothing was rendered yet. The flag
/// says whether the prediction differs from the current rendering (a restart is still due).
fn predict_render(
    host: &dyn HostFs,
    rendered: &Path,
    edit: RenderEdit<'_>,
) -> Result<Option<(String, bool)>, ConfigError> {
    let Some(text) = read_host(host, rendered)? else {
        return Ok(None);
    };
    let mut doc = parse_toml(rendered, &text)?;
    let dirty = match edit {
        RenderEdit::Install {
            version,
            runtimes,
            previous,
        } => {
            // The template's record applies to the rendering: the distribution copies the
            // template body verbatim after its base config.
            let previous = previous.map(|p| OwnedFile {
                path: rendered.to_path_buf(),
                ..p.clone()
            });
            let edit = RuntimeEdit {
                path: rendered,
                version,
                desired: runtimes,
                previous: previous.as_ref(),
                style: None,
                kept: None,
            };
            reconcile_runtimes(&mut doc, &edit)?.dirty
        }
        RenderEdit::Remove(owned) => remove_owned(&mut doc, owned),
    };
    let content = if dirty {
        render_like(&doc, &text)
    } else {
        text
    };
    Ok(Some((content, dirty)))
}

/// What [`predict_render`] applies to the current rendering.
enum RenderEdit<'a> {
    Install {
        version: ConfigVersion,
        runtimes: &'a [RuntimeEntry],
        previous: Option<&'a OwnedFile>,
    },
    Remove(&'a OwnedFile),
}

/// Whether a document holds nothing besides a top-level `version`.
fn only_version_left(doc: &DocumentMut) -> bool {
    doc.as_table().iter().all(|(key, _)| key == "version")
}

fn scratch_path(config: &Path) -> PathBuf {
    suffixed(config, SCRATCH_SUFFIX)
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
