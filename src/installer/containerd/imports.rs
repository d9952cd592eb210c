//! The top-level `imports` array: which drop-in paths a config already covers, and adding or
//! removing our own entry.
//!
//! containerd resolves each entry like this: clean the path, make a relative one relative to the
//! importing file's directory, and expand `*` globs. We mirror that for the one question we ask
//! ("would a file of ours in that directory be imported?"), conservatively: a pattern we cannot
//! evaluate exactly (wildcards in the directory part, character classes, escapes) does not count.

use std::path::{Component, Path, PathBuf};

use toml_edit::{DocumentMut, Item, Value};

use super::edit::describe;
use super::error::ConfigError;
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
    imports.iter().find_map(|entry| {
        let resolved = resolve(main_dir, entry);
        let file_pattern = resolved.file_name()?.to_str()?;
        let dir = resolved.parent()?;
        let dir_is_literal = dir.to_str().is_some_and(|d| !has_meta(d));
        (file_pattern.contains(['*', '?'])
            && dir_is_literal
            && glob_match(file_pattern, DROP_IN_NAME))
        .then(|| dir.join(DROP_IN_NAME))
    })
}

/// Whether an import entry of `main` names exactly `file` (after resolution).
pub(crate) fn imports_exactly(main: &Path, imports: &[String], file: &Path) -> bool {
    let main_dir = main.parent().unwrap_or(Path::new("/"));
    imports.iter().any(|entry| resolve(main_dir, entry) == file)
}

/// containerd's resolution: clean, and join a relative entry to the importing file's directory.
fn resolve(dir: &Path, entry: &str) -> PathBuf {
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

fn has_meta(text: &str) -> bool {
    text.contains(['*', '?', '[', '\\'])
}

/// Matches `*` (any run) and `?` (one character) within one path segment; patterns with
/// character classes or escapes never match, since guessing wrong would leave our file unread.
fn glob_match(pattern: &str, name: &str) -> bool {
    if pattern.contains(['[', '\\']) {
        return false;
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    // Classic two-pointer wildcard matching with backtracking to the last `*`.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((star_p, star_n)) = star {
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
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
            // In a multi-line array the new entry goes on its own line like the others.
            if let Some(prefix) = array
                .iter()
                .last()
                .and_then(|last| last.decor().prefix())
                .and_then(|prefix| prefix.as_str())
                .filter(|prefix| prefix.contains('\n'))
            {
                value.decor_mut().set_prefix(prefix.to_string());
                value.decor_mut().set_suffix("");
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
    let before = array.len();
    array.retain(|value| {
        !value
            .as_str()
            .is_some_and(|text| owned.imports.iter().any(|ours| ours == text))
    });
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
        assert_eq!(covered(&["/etc/containerd/conf.d/[0-9]*.toml"]), None);
        assert_eq!(
            covered(&["/etc/containerd/conf.d/50-containerd-shim.toml"]),
            None,
            "exact entries are not globs"
        );
    }

    #[test]
    fn glob_matching() {
        assert!(glob_match("*", "abc"));
        assert!(glob_match("*.toml", "50-containerd-shim.toml"));
        assert!(glob_match("5?-*.toml", "50-containerd-shim.toml"));
        assert!(glob_match("*shim*", "50-containerd-shim.toml"));
        assert!(!glob_match("*.tom", "50-containerd-shim.toml"));
        assert!(!glob_match("6*", "50-containerd-shim.toml"));
        assert!(!glob_match("?", ""));
        assert!(glob_match("a*b*c", "aXbYbc"));
    }

    #[test]
    fn exact_entries() {
        let imports = vec!["conf.d/50-containerd-shim.toml".to_string()];
        assert!(imports_exactly(
            Path::new(MAIN),
            &imports,
            Path::new("/etc/containerd/conf.d/50-containerd-shim.toml")
        ));
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
