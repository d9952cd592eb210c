//! containerd's release behaviour is decided in one place: `ContainerdVersion`'s capabilities
//! (src/installer/containerd/daemon_version.rs). Its numbers are private; the one accessor,
//! `major()`, exists for tests and names, and no library file outside that module calls it.

use std::path::Path;

const RULES_FILE: &str = "src/installer/containerd/daemon_version.rs";

fn library_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            library_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines that ask a containerd version for its release number.
fn release_number_uses(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| line.contains(".major()"))
        .map(|(i, line)| (i + 1, line.trim().to_string()))
        .collect()
}

#[test]
fn no_library_file_compares_containerd_releases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    library_files(&root.join("src"), &mut files);
    assert!(files.len() > 50, "only {} files", files.len());
    let found: Vec<String> = files
        .iter()
        .filter(|file| !file.ends_with(RULES_FILE))
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            release_number_uses(&text)
                .into_iter()
                .map(move |(line, code)| format!("{}:{line}: {code}", file.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "decide through a capability of ContainerdVersion ({RULES_FILE}) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_release_number_use_is_found() {
    let text = "let x = c.major();\n// c.major() in a comment\nlet y = c.merges_imports();\n";
    assert_eq!(
        release_number_uses(text),
        [(1, "let x = c.major();".to_string())]
    );
}
