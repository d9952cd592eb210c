//! The dependency direction the crate documentation promises, as a test: the framework
//! (`gardener`) knows nothing of shims, and the node installer uses neither the framework nor
//! the extension. A `use` that breaks it fails here, naming the file and line, before the
//! modules grow into each other.

use std::path::{Path, PathBuf};

/// Module → the crate modules it must not name.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("gardener", &["shim", "installer"]),
    ("installer", &["gardener", "shim"]),
    ("desired_shims", &["gardener", "shim", "installer"]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of a top-level module: `src/<name>.rs` and everything below `src/<name>/`.
fn module_files(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let dir = src.join(name);
    if dir.is_dir() {
        rust_files(&dir, &mut files);
    }
    files
}

/// Lines of `text` that name `crate::<module>` (in a `use`, a path or a doc link), skipping
/// line comments that are not doc comments.
fn violations(text: &str, module: &str) -> Vec<(usize, String)> {
    let needle = format!("crate::{module}");
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.trim_start();
            !(code.starts_with("//") && !code.starts_with("///") && !code.starts_with("//!"))
        })
        .filter(|(_, line)| {
            line.match_indices(&needle).any(|(at, _)| {
                // `crate::shim` but not `crate::shim_something`.
                !line[at + needle.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(i, line)| (i + 1, line.trim().to_string()))
        .collect()
}

#[test]
fn modules_depend_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut checked = 0;
    for (module, forbidden) in FORBIDDEN {
        let files = module_files(&src, module);
        assert!(!files.is_empty(), "no files for module {module}");
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            checked += 1;
            for other in *forbidden {
                for (line, code) in violations(&text, other) {
                    found.push(format!(
                        "{}:{line}: {module} must not use {other}: {code}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} files checked");
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_forbidden_path_is_found() {
    let text = "use crate::shim::config;\n// crate::shim in a comment\nuse crate::shim_x;\n/// [`crate::installer`]\n";
    assert_eq!(
        violations(text, "shim"),
        [(1, "use crate::shim::config;".to_string())]
    );
    assert_eq!(violations(text, "installer").len(), 1);
}
