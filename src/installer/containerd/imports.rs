//! The top-level `imports` array: which drop-in paths a config already covers, and adding or
//! removing our own entry.
//!
//! containerd 2.x resolves each entry like this: clean the path, make a relative one relative to
//! the importing file's directory, and expand it with Go's glob rules when it contains `*`
//! ([`super::glob`]). We mirror that for the one question we ask ("would a file of ours in that
//! directory be imported?"), conservatively: a glob with wildcards in its directory part does
//! not count (we would have to pick one of the directories it matches).

use std::path::{Component, Path, PathBuf};

use toml_edit::{DocumentMut, Item, Value};

use super::error::{ConfigError, describe};
use super::glob::{has_meta, is_glob, matches};
use super::key_path::KeyPath;
use super::ownership::OwnedFile;

/// The name of the drop-in file we write: one file for all our handlers, so a change of the set
/// is one atomic write, one validation, and uninstall is one delete. `50-` sorts it among
/// typical drop-ins; a later foreign file that redefines one of our handlers would win the merge,
/// which validation then reports.
pub const DROP_IN_NAME: &str = "50-containerd-shim.toml";

/// The entries of `imports` (empty when absent).
pub(crate) fn imports_of(path: &Path, doc: &DocumentMut) -> Result<Vec<String>, ConfigError> {
    let Some(item) = doc.as_table().get("imports") else {
        return Ok(Vec::new());
    };
    let bad = |found| ConfigError::UnexpectedType {
        path: path.to_path_buf(),
        key: KeyPath::new(["imports"]),
        found,
        expected: "an array of strings",
    };
    let Some(array) = item.as_array() else {
        return Err(bad(describe(item)));
    };
    array
        .iter()
        .map(|value| {
            value
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(describe(&Item::Value(value.clone()))))
        })
        .collect()
}

/// The path our drop-in would have if an existing glob import of `main` already covers it.
/// Exact (non-glob) entries do not count: such an entry names someone's specific file, or is the
/// entry we added ourselves, which the ownership record tracks.
pub(crate) fn covered_drop_in(main: &Path, imports: &[String]) -> Option<PathBuf> {
    let main_dir = main.parent().unwrap_or(Path::new("/"));
    imports
        .iter()
        .filter(|entry| is_glob(entry))
        .find_map(|entry| {
            let resolved = resolve(main_dir, entry);
            let file_pattern = resolved.file_name()?.to_str()?;
            let dir = resolved.parent()?;
            let dir_is_literal = dir.to_str().is_some_and(|d| !has_meta(d));
            (dir_is_literal && matches(file_pattern, DROP_IN_NAME) == Some(true))
                .then(|| dir.join(DROP_IN_NAME))
        })
}

/// containerd's resolution: clean, and join a relative entry to `dir` (the importing file's
/// directory, or for a relative glob on containerd 1.x its working directory `/`).
pub(crate) fn resolve(dir: &Path, entry: &str) -> PathBuf {
    let path = Path::new(entry);
    if path.is_absolute() {
        clean(path)
    } else {
        clean(&dir.join(path))
    }
}

/// Lexical cleaning as Go's `filepath.Clean`: drops `.` and empty parts, resolves `..`.
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Appends `entry` to `imports` (creating the key when absent) unless it is already listed.
/// Returns whether the document changed; `owned` learns what is ours.
pub(crate) fn ensure_import(
    path: &Path,
    doc: &mut DocumentMut,
    entry: &str,
    previous: Option<&OwnedFile>,
    owned: &mut OwnedFile,
) -> Result<bool, ConfigError> {
    let listed = imports_of(path, doc)?;
    if listed.iter().any(|e| e == entry) {
        if previous.is_some_and(|p| p.imports.iter().any(|e| e == entry)) {
            owned.imports.push(entry.to_string());
            owned.created_imports = previous.is_some_and(|p| p.created_imports);
        }
        return Ok(false);
    }
    match doc.as_table_mut().get_mut("imports") {
        Some(item) => {
            let Some(array) = item.as_array_mut() else {
                return Err(ConfigError::UnexpectedType {
                    path: path.to_path_buf(),
                    key: KeyPath::new(["imports"]),
                    found: describe(item),
                    expected: "an array of strings",
                });
            };
            let mut value = Value::from(entry);
            // In a multi-line array the new entry goes on its own line like the others. Without
            // a trailing comma, the line break before `]` is the last entry's suffix: it moves
            // behind our entry, so that the comma lands right after the previous entry.
            let len = array.len();
            if let Some(last) = array.get_mut(len.wrapping_sub(1))
                && let Some(prefix) = last
                    .decor()
                    .prefix()
                    .and_then(|prefix| prefix.as_str())
                    .filter(|prefix| prefix.contains('\n'))
                    .map(str::to_string)
            {
                let suffix = last
                    .decor()
                    .suffix()
                    .and_then(|suffix| suffix.as_str())
                    .unwrap_or_default()
                    .to_string();
                value.decor_mut().set_prefix(prefix);
                if suffix.trim().is_empty() {
                    last.decor_mut().set_suffix("");
                    value.decor_mut().set_suffix(suffix);
                } else {
                    value.decor_mut().set_suffix("");
                }
            }
            array.push_formatted(value);
            owned.created_imports = previous.is_some_and(|p| p.created_imports);
        }
        None => {
            let array: toml_edit::Array = [entry].into_iter().collect();
            doc.as_table_mut()
                .insert("imports", Item::Value(Value::Array(array)));
            owned.created_imports = true;
        }
    }
    owned.imports.push(entry.to_string());
    Ok(true)
}

/// Removes our `imports` entries, and the key itself when we created it and it is empty now.
pub(crate) fn remove_imports(doc: &mut DocumentMut, owned: &OwnedFile) -> bool {
    if owned.imports.is_empty() && !owned.created_imports {
        return false;
    }
    let Some(array) = doc
        .as_table_mut()
        .get_mut("imports")
        .and_then(Item::as_array_mut)
    else {
        return false;
    };
    let ours = |value: &Value| {
        value
            .as_str()
            .is_some_and(|text| owned.imports.iter().any(|ours| ours == text))
    };
    // The line break before `]` that [`ensure_import`] moved behind our last entry goes back.
    let closing = array
        .iter()
        .last()
        .filter(|last| ours(last))
        .and_then(|last| last.decor().suffix())
        .and_then(|suffix| suffix.as_str())
        .map(str::to_string);
    let before = array.len();
    array.retain(|value| !ours(value));
    let len = array.len();
    if let (Some(closing), Some(last)) = (closing, array.get_mut(len.wrapping_sub(1)))
        && last
            .decor()
            .suffix()
            .and_then(|suffix| suffix.as_str())
            .is_none_or(str::is_empty)
    {
        last.decor_mut().set_suffix(closing);
    }
    let mut dirty = array.len() != before;
    if owned.created_imports && array.is_empty() {
        doc.as_table_mut().remove("imports");
        dirty = true;
    }
    dirty
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::containerd::ownership::FileRole;

    const MAIN: &str = "/etc/containerd/config.toml";

    fn covered(imports: &[&str]) -> Option<PathBuf> {
        let imports: Vec<String> = imports.iter().map(|s| s.to_string()).collect();
        covered_drop_in(Path::new(MAIN), &imports)
    }

    #[test]
    fn finds_a_covering_glob() {
        assert_eq!(
            covered(&["/etc/containerd/conf.d/*.toml"]),
            Some(PathBuf::from(
                "/etc/containerd/conf.d/50-containerd-shim.toml"
            ))
        );
        // Relative entries resolve against the main file's directory, cleaned.
        assert_eq!(
            covered(&["./conf.d/../drop/*.toml"]),
            Some(PathBuf::from(
                "/etc/containerd/drop/50-containerd-shim.toml"
            ))
        );
        assert_eq!(
            covered(&["/a/*.conf", "/b/5?-*"]),
            Some(PathBuf::from("/b/50-containerd-shim.toml"))
        );
        // The first covering entry wins.
        assert_eq!(
            covered(&["/x/*", "/y/*"]),
            Some(PathBuf::from("/x/50-containerd-shim.toml"))
        );
    }

    #[test]
    fn ignores_what_it_cannot_evaluate_exactly() {
        assert_eq!(covered(&[]), None);
        assert_eq!(covered(&["/etc/containerd/conf.d/*.conf"]), None);
        assert_eq!(covered(&["/etc/*/conf.d/*.toml"]), None);
        assert_eq!(
            covered(&["/etc/containerd/conf.d/50-containerd-shim.toml"]),
            None,
            "exact entries are not globs"
        );
        assert_eq!(
            covered(&["/etc/containerd/conf.d/50-containerd-shim.tom?"]),
            None,
            "without `*` containerd reads an entry literally"
        );
        assert_eq!(covered(&["/etc/containerd/conf.d/[6-9]*.toml"]), None);
    }

    #[test]
    fn evaluates_classes_and_escapes_as_containerd_does() {
        assert_eq!(
            covered(&["/etc/containerd/conf.d/[0-9]*.toml"]),
            Some(PathBuf::from(
                "/etc/containerd/conf.d/50-containerd-shim.toml"
            ))
        );
        assert_eq!(
            covered(&["/etc/containerd/conf.d/5\\0-*"]),
            Some(PathBuf::from(
                "/etc/containerd/conf.d/50-containerd-shim.toml"
            ))
        );
    }

    #[test]
    fn imports_must_be_an_array_of_strings() {
        let path = Path::new(MAIN);
        for text in ["imports = \"/a\"\n", "imports = [1]\n", "[imports]\n"] {
            let doc: DocumentMut = text.parse().unwrap();
            let err = imports_of(path, &doc).unwrap_err().to_string();
            assert!(err.contains("`imports`"), "{err}");
            assert!(err.contains(MAIN), "{err}");
        }
    }

    fn add_then_remove(text: &str, expected: &str) {
        let path = Path::new(MAIN);
        let mut doc: DocumentMut = text.parse().unwrap();
        let mut owned = OwnedFile::new(MAIN, FileRole::Config);
        assert!(ensure_import(path, &mut doc, "/d/x.toml", None, &mut owned).unwrap());
        assert_eq!(doc.to_string(), expected);
        // Idempotent with the record.
        let previous = owned.clone();
        let mut again = OwnedFile::new(MAIN, FileRole::Config);
        assert!(!ensure_import(path, &mut doc, "/d/x.toml", Some(&previous), &mut again).unwrap());
        assert_eq!(again, previous);
        assert!(remove_imports(&mut doc, &owned));
        assert_eq!(doc.to_string(), text);
    }

    #[test]
    fn adds_and_removes_our_entry_only() {
        add_then_remove("version = 3\n", "version = 3\nimports = [\"/d/x.toml\"]\n");
        add_then_remove(
            "version = 3\nimports = [\"/a/*.toml\"] # keep\n",
            "version = 3\nimports = [\"/a/*.toml\", \"/d/x.toml\"] # keep\n",
        );
        add_then_remove(
            "imports = [\n  \"/a/*.toml\",\n]\n",
            "imports = [\n  \"/a/*.toml\",\n  \"/d/x.toml\",\n]\n",
        );
        add_then_remove("imports = []\n", "imports = [\"/d/x.toml\"]\n");
        // No trailing comma: the comma goes behind the last entry, ours onto a line of its own.
        add_then_remove(
            "imports = [\n  \"/a/*.toml\"\n]\n",
            "imports = [\n  \"/a/*.toml\",\n  \"/d/x.toml\"\n]\n",
        );
    }

    #[test]
    fn an_entry_someone_else_listed_is_not_ours() {
        let path = Path::new(MAIN);
        let mut doc: DocumentMut = "imports = [\"/d/x.toml\"]\n".parse().unwrap();
        let mut owned = OwnedFile::new(MAIN, FileRole::Config);
        assert!(!ensure_import(path, &mut doc, "/d/x.toml", None, &mut owned).unwrap());
        assert!(owned.is_empty());
    }
}
