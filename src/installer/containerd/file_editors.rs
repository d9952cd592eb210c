//! The per-file editors of a plan: a config edited in place (our runtime tables and, for a
//! drop-in strategy, one import), our own generated drop-in, and the removal of what a record
//! says we own. Each returns the file's before and after; the plan orders and assembles them.

use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;

use super::config_version::{ConfigVersion, parse_toml};
use super::edit::{RuntimeEdit, reconcile_runtimes, remove_owned};
use super::effective::KeptRuntime;
use super::error::ConfigError;
use super::host::{HostFs, read_host};
use super::imports::{ensure_import, remove_imports};
use super::key_path::table_at;
use super::ownership::{FileRole, OwnedFile};
use super::runtime::RuntimeEntry;
use super::style::RuntimeStyle;
use super::text::render_edit;
use super::toml_value::same_table;

/// The header of drop-ins we generate. Informational only: ownership lives in the state file.
const DROP_IN_HEADER: &str = "# Runtime handlers of the gardener-extension-containerd-shim node installer.\n\
# The installer owns this file: it rewrites it on every change and deletes it on uninstall.\n";

/// The result of planning one file.
pub(super) struct FileOutcome {
    pub path: PathBuf,
    pub role: FileRole,
    pub before: Option<String>,
    /// `None`: the file must not exist afterwards.
    pub after: Option<String>,
    pub owned: OwnedFile,
}

/// A config file edited in place: our runtime tables and, optionally, one `imports` entry.
pub(super) fn edit_config(
    host: &dyn HostFs,
    path: &Path,
    new_file_version: ConfigVersion,
    runtimes: &[RuntimeEntry],
    import: Option<String>,
    previous: Option<&OwnedFile>,
    kept: Option<&[KeptRuntime]>,
) -> Result<FileOutcome, ConfigError> {
    let before = read_host(host, path)?;
    let untouched = match &before {
        Some(text) => parse_toml(path, text)?,
        None => DocumentMut::new(),
    };
    let mut doc = untouched.clone();
    let (version, created) = match &before {
        Some(_) => {
            let version = ConfigVersion::detect(path, &doc)?;
            (version, previous.is_some_and(|p| p.created))
        }
        None => {
            if runtimes.is_empty() && import.is_none() {
                return Ok(unchanged(path, FileRole::Config, None));
            }
            doc.insert("version", toml_edit::value(new_file_version.number()));
            (new_file_version, true)
        }
    };
    let edit = RuntimeEdit {
        path,
        version,
        desired: runtimes,
        previous,
        style: (before.is_none()).then(RuntimeStyle::generated),
        kept,
    };
    let (mut owned, edited) = own_runtimes(&mut doc, &edit, FileRole::Config, created)?;
    let mut dirty = edited || before.is_none();
    if let Some(entry) = import {
        dirty |= ensure_import(path, &mut doc, &entry, previous, &mut owned)?;
    } else if let Some(previous) = previous {
        dirty |= remove_imports(&mut doc, previous);
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
        (original, _) => render_edit(original.as_deref().unwrap_or_default(), &untouched, &doc),
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
pub(super) fn generate_drop_in(
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
    // Generated anew each time: nothing from before carries over.
    let edit = RuntimeEdit {
        path,
        version,
        desired: runtimes,
        previous: None,
        style: Some(RuntimeStyle::generated()),
        kept: None,
    };
    let (owned, _) = own_runtimes(&mut doc, &edit, role.clone(), true)?;
    Ok(FileOutcome {
        path: path.to_path_buf(),
        role,
        before,
        after: Some(format!("{DROP_IN_HEADER}{doc}")),
        owned,
    })
}

/// Reconciles our runtime tables in `doc`; returns the file's record of them and whether the
/// document changed.
fn own_runtimes(
    doc: &mut DocumentMut,
    edit: &RuntimeEdit<'_>,
    role: FileRole,
    created: bool,
) -> Result<(OwnedFile, bool), ConfigError> {
    let outcome = reconcile_runtimes(doc, edit)?;
    let mut owned = OwnedFile::new(edit.path, role);
    owned.created = created;
    owned.handlers = outcome.handlers;
    owned.kept = outcome.kept;
    owned.created_tables = outcome.created_tables;
    Ok((owned, outcome.dirty))
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
    let Some(table) = table_at(doc.as_table(), &runtimes_path) else {
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

/// Records on an edited file what it was before we first changed it: carried over from the
/// previous record, or taken now when we own nothing in the file yet and it holds none of our
/// handler tables (after a lost state file, adopted tables mean nobody knows its pre-us bytes).
pub(super) fn remember_original(outcome: &mut FileOutcome, previous: Option<&OwnedFile>) {
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
pub(super) fn prefer_original(owned: &OwnedFile, removed: String) -> String {
    match &owned.original {
        Some(original) if same_document(original, &removed) => original.clone(),
        _ => removed,
    }
}

/// Whether two versions of a file mean the same: equal TOML values (formatting, comments and
/// key spelling aside).
pub(super) fn same_document(a: &str, b: &str) -> bool {
    match (
        a.parse::<toml_edit::DocumentMut>(),
        b.parse::<toml_edit::DocumentMut>(),
    ) {
        (Ok(a), Ok(b)) => same_table(a.as_table(), b.as_table()),
        _ => false,
    }
}

/// Whether `text` contains one of the handler tables of `owned`. Unparsable text counts as
/// holding them: then no original is recorded.
fn holds_any_handler(text: &str, owned: &OwnedFile) -> bool {
    let Ok(doc) = text.parse::<toml_edit::DocumentMut>() else {
        return true;
    };
    owned
        .handlers
        .iter()
        .any(|h| table_at(doc.as_table(), &h.table).is_some())
}

/// Removes everything a record claims from its file. Drop-ins we created are deleted; a config
/// file we created is deleted once nothing but its `version` is left in it.
pub(super) fn remove_from(
    host: &dyn HostFs,
    owned: &OwnedFile,
) -> Result<FileOutcome, ConfigError> {
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
        FileRole::DropIn { .. } if owned.created => Ok(gone(before)),
        _ => {
            let untouched = parse_toml(path, &text)?;
            let mut doc = untouched.clone();
            let dirty = remove_owned(&mut doc, owned);
            if owned.created && only_version_left(&doc) {
                return Ok(gone(before));
            }
            let after = if dirty {
                render_edit(&text, &untouched, &doc)
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

/// Whether a document holds nothing besides a top-level `version`.
fn only_version_left(doc: &DocumentMut) -> bool {
    doc.as_table().iter().all(|(key, _)| key == "version")
}
