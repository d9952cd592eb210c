//! Claims of the docs that the repository's own files decide: the Rust versions the README asks
//! for, and the chart values the operator's table describes.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{read, section};

const WASM_WORKSPACE: &str = "hack/images/payloads/wasm/Cargo.toml";

/// The `rust-version` of a Cargo manifest (or its workspace's).
fn rust_version(manifest: &str) -> String {
    read(manifest)
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{manifest} has no rust-version"))
        .to_owned()
}

#[test]
fn readme_asks_for_the_rust_versions_the_manifests_declare() {
    // Words, whatever the line breaks.
    let readme = read("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let build = rust_version("Cargo.toml");
    // The tests build the Wasm shim payloads, a workspace of its own with a newer minimum.
    let wasm = rust_version(WASM_WORKSPACE);
    for claim in [
        format!("{build} or newer for the extension"),
        format!("{wasm} or newer for the Wasm shim payloads"),
    ] {
        assert!(
            readme.contains(&claim),
            "README.md's prerequisites do not say \"{claim}\" (Cargo.toml: {build}, \
             {WASM_WORKSPACE}: {wasm})"
        );
    }
}

/// The dotted paths of every leaf of `value`; a map or list that is empty counts as a leaf.
fn leaves(prefix: &str, value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(&path, child, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

/// The value paths the first column of a row names: `` `a.b` `` is a path, and a bare name
/// after it in the same cell (`` `a.b`, `c` ``) is a sibling (`a.c`).
fn documented(row: &str) -> Vec<String> {
    let Some(cell) = row.strip_prefix('|').and_then(|r| r.split('|').next()) else {
        return Vec::new();
    };
    let mut parent = String::new();
    let mut paths = Vec::new();
    for name in cell.split('`').skip(1).step_by(2) {
        if let Some((head, _)) = name.rsplit_once('.') {
            parent = format!("{head}.");
            paths.push(name.to_owned());
        } else {
            paths.push(format!("{parent}{name}"));
        }
    }
    paths
}

#[test]
fn operations_doc_describes_every_chart_value() {
    let values: Value = serde_saphyr::from_str(&read(
        "charts/gardener-extension-containerd-shim/values.yaml",
    ))
    .expect("values.yaml is YAML");
    let mut keys = BTreeSet::new();
    leaves("", &values, &mut keys);
    assert!(keys.len() > 30, "{keys:?}");
    let section = section("docs/operations.md", "Chart values");
    let rows: BTreeSet<String> = section.lines().flat_map(documented).collect();
    // A row may describe a whole map (`resources`): it covers every key below it.
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| {
            let mut path = key.as_str();
            loop {
                if rows.contains(path) {
                    return false;
                }
                match path.rsplit_once('.') {
                    Some((head, _)) => path = head,
                    None => return true,
                }
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the Chart values table of docs/operations.md does not describe: {missing:?}"
    );
    assert_eq!(
        documented("| `a.b.c`, `d` / `e` | x |"),
        ["a.b.c", "a.b.d", "a.b.e"]
    );
}
