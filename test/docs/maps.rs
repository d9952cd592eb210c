//! The two maps of the tree agree with the tree: docs/development.md's layout table names every
//! folder under `src/`, `test/` and `hack/` (and the scripts and top-level modules beside
//! them), and docs/architecture.md's module tree names every module of the library.

use std::collections::BTreeSet;

use super::{read, repo, section};

/// Entries of a repository folder: folders as `name/`, files as `name`; build output and
/// hidden entries left out.
fn entries(folder: &str) -> Vec<String> {
    let dir = repo(folder);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{folder}: {e}")))
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                return None;
            }
            Some(if entry.path().is_dir() {
                format!("{name}/")
            } else {
                name
            })
        })
        .collect();
    names.sort();
    names
}

/// The backticked paths of the first column of the layout table.
fn layout_paths() -> BTreeSet<String> {
    section("docs/development.md", "Layout")
        .lines()
        .filter_map(|row| row.strip_prefix('|').and_then(|r| r.split('|').next()))
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn development_layout_names_every_folder() {
    let named = layout_paths();
    let mut expected = Vec::new();
    for top in ["src", "test", "hack"] {
        for entry in entries(top) {
            let is_folder = entry.ends_with('/');
            // Below src/ the modules beside the folders; below hack/ the scripts.
            let listed = is_folder
                || (top == "src" && entry.ends_with(".rs") && entry != "lib.rs")
                || (top == "hack" && (entry.ends_with(".sh") || entry.ends_with(".py")));
            if listed {
                expected.push(format!("{top}/{entry}"));
            }
        }
    }
    expected.push("hack/images/payloads/".to_owned());
    let missing: Vec<&String> = expected.iter().filter(|p| !named.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "the layout table of docs/development.md does not name: {missing:?}"
    );
}

/// The names a section of the module tree lists at `indent` spaces: the first word of each of
/// its lines at that indent.
fn tree_names(tree: &str, indent: usize) -> BTreeSet<String> {
    tree.lines()
        .filter(|line| {
            line.len() > indent
                && line[..indent].trim().is_empty()
                && !line[indent..].starts_with(' ')
        })
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn architecture_tree_names_every_module() {
    let doc = read("docs/architecture.md");
    let tree = doc
        .split("```\nsrc/\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/architecture.md has the module tree (a block that starts with `src/`)");
    let mut missing = Vec::new();
    let top = tree_names(tree, 2);
    for entry in entries("src") {
        if entry != "lib.rs" && !top.contains(&entry) {
            missing.push(format!("src/{entry}"));
        }
    }
    for module in ["gardener", "shim", "installer"] {
        // The lines between `  <module>/` and the next line at that indent.
        let section: String = tree
            .split(&format!("\n  {module}/"))
            .nth(1)
            .map(|rest| {
                rest.lines()
                    .skip(1)
                    .take_while(|line| line.starts_with("   "))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let listed = tree_names(&section, 4);
        for entry in entries(&format!("src/{module}")) {
            // mod.rs is the folder itself; test modules are not part of the map.
            let test_module = entry.ends_with("_test.rs") || entry == "tests.rs";
            if entry != "mod.rs" && !test_module && !listed.contains(&entry) {
                missing.push(format!("src/{module}/{entry}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the module tree of docs/architecture.md does not name: {missing:?}"
    );
}
