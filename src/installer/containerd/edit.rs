//! Structured, format-preserving edits of our runtime tables with toml_edit.
//!
//! Only keys the ownership record names are changed or removed; a value is rewritten only when
//! it differs from the desired one (keeping its comment and spacing), so an unchanged desired
//! state leaves the document untouched and the plan writes nothing.

use std::collections::BTreeSet;
use std::path::Path;

use toml_edit::{Array, Decor, DocumentMut, Item, Key, Table, Value};

use crate::desired_shims::OptionValue;

use super::config_version::ConfigVersion;
use super::effective::KeptRuntime;
use super::error::{ConfigError, describe};
use super::key_path::{KeyPath, table_at, table_at_mut};
use super::ownership::{KeptHandler, OwnedFile, OwnedHandler};
use super::runtime::{ManagedKey, RuntimeEntry, describe_runtime};
use super::style::{RuntimeStyle, TableStyle, key_indent};

/// The part of an ownership record an edit produces for one file.
#[derive(Debug, Default)]
pub(crate) struct EditOutcome {
    pub handlers: Vec<OwnedHandler>,
    pub kept: Vec<KeptHandler>,
    pub created_tables: Vec<KeyPath>,
    pub dirty: bool,
}

/// Inputs of [`reconcile_runtimes`].
pub(crate) struct RuntimeEdit<'a> {
    /// The file being edited, for error messages.
    pub path: &'a Path,
    pub version: ConfigVersion,
    pub desired: &'a [RuntimeEntry],
    /// What we owned in this file before.
    pub previous: Option<&'a OwnedFile>,
    /// A fixed layout (generated files) instead of copying the neighbours'.
    pub style: Option<RuntimeStyle>,
    /// Runtimes containerd provides implicitly that this file must now define to keep them
    /// (see [`KeptRuntime`]); `None` when not known on this run: then what we kept before
    /// stays as it is while we still have runtimes here.
    pub kept: Option<&'a [KeptRuntime]>,
}

/// Makes the document hold exactly the desired runtime tables among the ones we own: adds
/// missing tables and keys, restores values someone changed, removes keys and handlers we no
/// longer want, and removes tables we created that became empty.
pub(crate) fn reconcile_runtimes(
    doc: &mut DocumentMut,
    edit: &RuntimeEdit<'_>,
) -> Result<EditOutcome, ConfigError> {
    let previous_handlers: &[OwnedHandler] = edit.previous.map_or(&[], |p| &p.handlers);
    let mut created: BTreeSet<KeyPath> = edit
        .previous
        .map(|p| p.created_tables.iter().cloned().collect())
        .unwrap_or_default();
    let mut outcome = EditOutcome::default();

    // Handlers we no longer want here, or whose table moved (another config version).
    for owned in previous_handlers {
        let still_wanted = edit.desired.iter().any(|d| {
            d.handler == owned.handler && edit.version.runtime_table(&d.handler) == owned.table
        });
        if !still_wanted {
            outcome.dirty |= remove_handler_keys(doc, owned);
        }
    }

    for desired in edit.desired {
        let table_path = edit.version.runtime_table(&desired.handler);
        let previous = previous_handlers
            .iter()
            .find(|owned| owned.handler == desired.handler && owned.table == table_path);
        let handler = HandlerEdit {
            desired,
            previous,
            table_path,
        };
        let owned = write_runtime(doc, edit, handler, &mut created, &mut outcome)?;
        outcome.handlers.push(owned);
    }
    outcome.kept = reconcile_kept(doc, edit, &mut created, &mut outcome)?;

    outcome.dirty |= remove_empty_created(doc, &mut created);
    outcome.created_tables = created.into_iter().collect();
    Ok(outcome)
}

/// Removes everything a record claims in a document (not the file itself): handler keys, empty
/// tables we created, our `imports` entries. Returns whether anything changed.
pub(crate) fn remove_owned(doc: &mut DocumentMut, owned: &OwnedFile) -> bool {
    let mut dirty = false;
    for handler in &owned.handlers {
        dirty |= remove_handler_keys(doc, handler);
    }
    for kept in &owned.kept {
        dirty |= remove_kept_keys(doc, kept);
    }
    let mut created: BTreeSet<KeyPath> = owned.created_tables.iter().cloned().collect();
    dirty |= remove_empty_created(doc, &mut created);
    dirty |= super::imports::remove_imports(doc, owned);
    dirty
}

fn write_runtime(
    doc: &mut DocumentMut,
    edit: &RuntimeEdit<'_>,
    handler: HandlerEdit<'_>,
    created: &mut BTreeSet<KeyPath>,
    outcome: &mut EditOutcome,
) -> Result<OwnedHandler, ConfigError> {
    let runtimes_path = edit.version.runtimes_table();
    let runtimes = ensure_tables(
        doc.as_table_mut(),
        edit.path,
        &runtimes_path,
        created,
        outcome,
    )?;
    let style = edit
        .style
        .clone()
        .unwrap_or_else(|| RuntimeStyle::infer(runtimes, &handler.desired.handler));

    let table = runtime_table(runtimes, edit, &handler, &style, created, outcome)?;
    let HandlerEdit {
        desired,
        previous,
        table_path,
    } = handler;

    let wanted = desired_values(desired);
    let wanted_keys: BTreeSet<KeyPath> = wanted.iter().map(|(key, _)| key.clone()).collect();
    if let Some(previous) = previous {
        for key in previous
            .keys
            .iter()
            .filter(|key| !wanted_keys.contains(*key))
        {
            outcome.dirty |= remove_relative(table, key);
        }
    }

    write_values(
        table,
        edit.path,
        &table_path,
        &wanted,
        &style,
        created,
        outcome,
    )?;

    Ok(OwnedHandler {
        handler: desired.handler.clone(),
        table: table_path,
        keys: wanted.into_iter().map(|(key, _)| key).collect(),
        runtime_path: desired.runtime_path.clone(),
        managed_key: desired.managed_key,
        runtime_type: desired.runtime_type.clone(),
    })
}

/// One of our handlers as it is written: the runtime wanted, our record of it in this file
/// from before, and where its table is.
struct HandlerEdit<'a> {
    desired: &'a RuntimeEntry,
    previous: Option<&'a OwnedHandler>,
    table_path: KeyPath,
}

/// Our handler's table below `runtimes`, created when missing; an existing one we have no
/// record of must be adoptable.
fn runtime_table<'t>(
    runtimes: &'t mut Table,
    edit: &RuntimeEdit<'_>,
    handler: &HandlerEdit<'_>,
    style: &RuntimeStyle,
    created: &mut BTreeSet<KeyPath>,
    outcome: &mut EditOutcome,
) -> Result<&'t mut Table, ConfigError> {
    let HandlerEdit {
        desired,
        previous,
        ref table_path,
    } = *handler;
    match runtimes.get(&desired.handler) {
        None => {
            let mut table = Table::new();
            decorate_table(&mut table, &style.table);
            runtimes.insert(&desired.handler, Item::Table(table));
            created.insert(table_path.clone());
            outcome.dirty = true;
        }
        Some(Item::Table(existing)) => {
            if previous.is_none() {
                ensure_adoptable(edit.path, table_path, existing, desired)?;
                // Its runtime_path is our managed symlink (the table is ours from an earlier run
                // whose record was lost), or the node agent wrote it for this shim (delivered
                // through the OSC before): treat it (and its options) as created by us so that
                // uninstall can remove it.
                if existing.contains_table("options") {
                    created.insert(table_path.join(["options"]));
                }
                created.insert(table_path.clone());
            }
        }
        Some(other) => {
            return Err(unexpected(edit.path, table_path, other, "a table"));
        }
    }
    match runtimes.get_mut(&desired.handler) {
        Some(Item::Table(table)) => Ok(table),
        _ => Err(missing_after_insert(edit.path, table_path)),
    }
}

/// Sets each wanted key (at the top of our table or below its `options`), keeping the style
/// of what is there.
fn write_values(
    table: &mut Table,
    file: &Path,
    table_path: &KeyPath,
    wanted: &[(KeyPath, Value)],
    style: &RuntimeStyle,
    created: &mut BTreeSet<KeyPath>,
    outcome: &mut EditOutcome,
) -> Result<(), ConfigError> {
    let options_path = table_path.join(["options"]);
    for (key, value) in wanted {
        let (target, key_style, name) = match key.segments() {
            [name] => (&mut *table, &style.table, name),
            [options, name] if options == "options" => {
                let options = ensure_child_table(table, file, &options_path, &style.options)?;
                if options.1 {
                    created.insert(options_path.clone());
                    outcome.dirty = true;
                }
                (options.0, &style.options, name)
            }
            _ => {
                return Err(missing_after_insert(file, &table_path.join(key.segments())));
            }
        };
        let full_key = table_path.join(key.segments());
        outcome.dirty |= set_value(target, file, &full_key, name, value, key_style)?;
    }
    Ok(())
}

/// The keys (relative to the handler table) and values we write for a runtime, in the order a
/// reader expects them.
fn desired_values(desired: &RuntimeEntry) -> Vec<(KeyPath, Value)> {
    let mut out = vec![(
        KeyPath::new(["runtime_type"]),
        Value::from(desired.runtime_type.as_str()),
    )];
    // With the path as the runtime type, the one key says both.
    if desired.managed_key != ManagedKey::RuntimeType {
        out.push((
            KeyPath::new(desired.managed_key.segments().iter().copied()),
            Value::from(desired.runtime_path.as_str()),
        ));
    }
    if !desired.pod_annotations.is_empty() {
        let array: Array = desired.pod_annotations.iter().map(String::as_str).collect();
        out.push((KeyPath::new(["pod_annotations"]), Value::Array(array)));
    }
    if desired.privileged_without_host_devices {
        out.push((
            KeyPath::new(["privileged_without_host_devices"]),
            Value::from(true),
        ));
    }
    for (name, value) in &desired.options {
        let value = match value {
            OptionValue::Bool(flag) => Value::from(*flag),
            OptionValue::Int(number) => Value::from(*number),
            OptionValue::String(text) => Value::from(text.as_str()),
        };
        out.push((KeyPath::new(["options", name.as_str()]), value));
    }
    out
}

/// A table of the same name is ours only if it points at our managed shim path or is this
/// shim as gardener-node-agent delivered it ([`RuntimeEntry::delivered_by_node_agent`]);
/// anything else belongs to someone else.
fn ensure_adoptable(
    path: &Path,
    table_path: &KeyPath,
    existing: &Table,
    desired: &RuntimeEntry,
) -> Result<(), ConfigError> {
    if desired.managed_key.value_in(existing) == Some(desired.runtime_path.as_str())
        || desired.delivered_by_node_agent(existing)
    {
        return Ok(());
    }
    Err(ConfigError::ForeignRuntime {
        path: path.to_path_buf(),
        key: table_path.clone(),
        defines: describe_runtime(existing),
    })
}

/// Walks to (and creates, as header-less implicit tables) every table of `path`.
fn ensure_tables<'t>(
    root: &'t mut Table,
    file: &Path,
    path: &KeyPath,
    created: &mut BTreeSet<KeyPath>,
    outcome: &mut EditOutcome,
) -> Result<&'t mut Table, ConfigError> {
    let mut table = root;
    let mut here = KeyPath::default();
    for segment in path.segments() {
        here = here.join([segment.as_str()]);
        if !table.contains_key(segment) {
            let mut child = Table::new();
            child.set_implicit(true);
            table.insert(segment, Item::Table(child));
            created.insert(here.clone());
            outcome.dirty = true;
        }
        table = match table.get_mut(segment) {
            Some(Item::Table(child)) => child,
            Some(other) => return Err(unexpected(file, &here, other, "a table")),
            None => return Err(missing_after_insert(file, &here)),
        };
    }
    Ok(table)
}

/// The child table `options`, created with a header when missing; the flag says it was created.
fn ensure_child_table<'t>(
    parent: &'t mut Table,
    file: &Path,
    path: &KeyPath,
    style: &TableStyle,
) -> Result<(&'t mut Table, bool), ConfigError> {
    let name = path
        .segments()
        .last()
        .map(String::as_str)
        .unwrap_or_default();
    let mut inserted = false;
    if !parent.contains_key(name) {
        let mut child = Table::new();
        decorate_table(&mut child, style);
        parent.insert(name, Item::Table(child));
        inserted = true;
    }
    match parent.get_mut(name) {
        Some(Item::Table(child)) => Ok((child, inserted)),
        Some(other) => Err(unexpected(file, path, other, "a table")),
        None => Err(missing_after_insert(file, path)),
    }
}

fn decorate_table(table: &mut Table, style: &TableStyle) {
    // An empty indent keeps toml_edit's default, which also knows not to put a blank line before
    // the first table of an empty file.
    if !style.header_indent.is_empty() {
        table
            .decor_mut()
            .set_prefix(format!("\n{}", style.header_indent));
    }
}

/// Sets `name = value` unless an equal value is already there. A changed value keeps the old
/// one's spacing and trailing comment.
fn set_value(
    table: &mut Table,
    file: &Path,
    full_key: &KeyPath,
    name: &str,
    value: &Value,
    style: &TableStyle,
) -> Result<bool, ConfigError> {
    match table.get_mut(name) {
        Some(Item::Value(existing)) => {
            if same_value(existing, value) {
                return Ok(false);
            }
            let decor = existing.decor().clone();
            *existing = value.clone();
            *existing.decor_mut() = decor;
            Ok(true)
        }
        Some(Item::None) | None => {
            let indent = key_indent(table).unwrap_or_else(|| style.key_indent.clone());
            let key = Key::new(name).with_leaf_decor(Decor::new(indent, " "));
            table.insert_formatted(&key, Item::Value(value.clone()));
            Ok(true)
        }
        Some(other) => Err(unexpected(file, full_key, other, "a value")),
    }
}

/// Equality of the TOML data, ignoring representation (quotes, spacing, comments).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(a), Value::String(b)) => a.value() == b.value(),
        (Value::Integer(a), Value::Integer(b)) => a.value() == b.value(),
        (Value::Boolean(a), Value::Boolean(b)) => a.value() == b.value(),
        (Value::Float(a), Value::Float(b)) => a.value() == b.value(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| same_value(a, b))
        }
        _ => false,
    }
}

/// Writes out the runtimes containerd would otherwise stop providing, as long as we have
/// runtimes in this file; takes them out with our last one.
fn reconcile_kept(
    doc: &mut DocumentMut,
    edit: &RuntimeEdit<'_>,
    created: &mut BTreeSet<KeyPath>,
    outcome: &mut EditOutcome,
) -> Result<Vec<KeptHandler>, ConfigError> {
    let previous: &[KeptHandler] = edit.previous.map_or(&[], |p| &p.kept);
    let wanted: &[KeptRuntime] = match edit.kept {
        _ if edit.desired.is_empty() => &[],
        None => return Ok(previous.to_vec()),
        Some(kept) => kept,
    };
    for old in previous {
        let still = wanted
            .iter()
            .any(|k| edit.version.runtime_table(&k.handler) == old.table);
        if !still {
            outcome.dirty |= remove_kept_keys(doc, old);
        }
    }
    let runtimes_path = edit.version.runtimes_table();
    let mut kept = Vec::new();
    for runtime in wanted {
        if edit.desired.iter().any(|d| d.handler == runtime.handler) {
            continue;
        }
        let table_path = runtimes_path.join([runtime.handler.as_str()]);
        let ours_before = previous.iter().find(|k| k.table == table_path);
        let defined = table_at(doc.as_table(), &table_path).is_some();
        if defined && ours_before.is_none() {
            // Someone defines it in this file: it is theirs and already explicit.
            continue;
        }
        let style = edit.style.clone().unwrap_or_else(|| {
            table_at(doc.as_table(), &runtimes_path)
                .map(|runtimes| RuntimeStyle::infer(runtimes, &runtime.handler))
                .unwrap_or_default()
        });
        let mut keys = Vec::new();
        for (key, value) in &runtime.values {
            let Some((name, parents)) = key.segments().split_last() else {
                continue;
            };
            let parent_path = table_path.join(parents.iter().map(String::as_str));
            let table = ensure_tables(
                doc.as_table_mut(),
                edit.path,
                &parent_path,
                created,
                outcome,
            )?;
            let full_key = table_path.join(key.segments().iter().map(String::as_str));
            outcome.dirty |= set_value(table, edit.path, &full_key, name, value, &style.table)?;
            keys.push(key.clone());
        }
        // Created with headers, like our own runtime tables, not as implicit tables.
        if let Some(table) = table_at_mut(doc.as_table_mut(), &table_path)
            && table.is_implicit()
        {
            table.set_implicit(false);
            decorate_table(table, &style.table);
        }
        kept.push(KeptHandler {
            handler: runtime.handler.clone(),
            table: table_path,
            keys,
        });
    }
    Ok(kept)
}

fn remove_kept_keys(doc: &mut DocumentMut, kept: &KeptHandler) -> bool {
    let Some(table) = table_at_mut(doc.as_table_mut(), &kept.table) else {
        return false;
    };
    let mut dirty = false;
    for key in &kept.keys {
        dirty |= remove_relative(table, key);
    }
    dirty
}

/// Removes a handler's keys we own; the table itself goes with the empty-table sweep.
fn remove_handler_keys(doc: &mut DocumentMut, owned: &OwnedHandler) -> bool {
    let Some(table) = table_at_mut(doc.as_table_mut(), &owned.table) else {
        return false;
    };
    let mut dirty = false;
    for key in &owned.keys {
        dirty |= remove_relative(table, key);
    }
    dirty
}

fn remove_relative(table: &mut Table, key: &KeyPath) -> bool {
    let Some((last, parents)) = key.segments().split_last() else {
        return false;
    };
    let parent = if parents.is_empty() {
        Some(table)
    } else {
        table_at_mut(table, &KeyPath::new(parents.iter().cloned()))
    };
    parent.is_some_and(|parent| parent.remove(last).is_some())
}

/// Removes tables we created that are empty now, deepest first; forgets created tables that are
/// gone or were replaced by something that is not a table.
fn remove_empty_created(doc: &mut DocumentMut, created: &mut BTreeSet<KeyPath>) -> bool {
    let mut paths: Vec<KeyPath> = created.iter().cloned().collect();
    paths.sort_by_key(|path| std::cmp::Reverse(path.segments().len()));
    let mut dirty = false;
    for path in paths {
        let Some((last, parents)) = path.segments().split_last() else {
            created.remove(&path);
            continue;
        };
        let parent_path = KeyPath::new(parents.iter().cloned());
        let Some(parent) = table_at_mut(doc.as_table_mut(), &parent_path) else {
            created.remove(&path);
            continue;
        };
        match parent.get(last) {
            Some(Item::Table(table)) if table.is_empty() => {
                parent.remove(last);
                created.remove(&path);
                dirty = true;
            }
            Some(Item::Table(_)) => {}
            _ => {
                created.remove(&path);
            }
        }
    }
    dirty
}

fn unexpected(file: &Path, key: &KeyPath, item: &Item, expected: &'static str) -> ConfigError {
    ConfigError::UnexpectedType {
        path: file.to_path_buf(),
        key: key.clone(),
        found: describe(item),
        expected,
    }
}

/// Only reachable if toml_edit lost an item we just inserted; reported instead of panicking.
fn missing_after_insert(file: &Path, key: &KeyPath) -> ConfigError {
    ConfigError::UnexpectedType {
        path: file.to_path_buf(),
        key: key.clone(),
        found: "missing after insertion",
        expected: "a table",
    }
}
