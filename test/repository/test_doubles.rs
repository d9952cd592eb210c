//! The library that the binaries link holds no test double: `TestHost`, `MemoryHost`,
//! `MemoryCluster` and the fault injection `kill_at` exist only under `cfg(test)` or the
//! `test-util` feature, which only the test crates, benchmarks and fuzz targets enable.
//!
//! The check builds the binaries as `cargo build --bins` does (the features the binaries get,
//! not the test crates') and reads the library that cargo compiled for them. Its object code
//! holds the symbols of every non-generic function it compiled, with each name length-prefixed
//! as mangling writes it (`8TestHost`), and the text of every error message it can print. The
//! bare names would not do: the metadata lists items that `cfg` removed, for diagnostics.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// What a compiled test double leaves in the library: the mangled type names of the doubles
/// (each has non-generic methods, so their code is in the library that defines them) and the
/// message of the error only fault injection raises (`Installer::kill_at` is generic, so its
/// own code is compiled only where it is called).
const DOUBLES: &[&str] = &[
    "8TestHost",
    "10MemoryHost",
    "13MemoryCluster",
    "(fault injection)",
];

/// What every build of the library has: proves that the check can see mangled names.
const ALWAYS: &str = "8NodeHost";

/// The library files cargo produced for the binaries, from its JSON messages.
fn library_built_for_the_binaries() -> Vec<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let output = Command::new(&cargo)
        .args(["build", "--locked", "--bins", "--message-format=json"])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("{cargo} build: {e}"));
    assert!(
        output.status.success(),
        "cargo build --bins failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut files = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let is_lib = message["reason"] == "compiler-artifact"
            && message["target"]["name"] == "gardener_extension_containerd_shim"
            && message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "lib"));
        if is_lib {
            files.extend(
                message["filenames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter(|f| f.ends_with(".rlib"))
                    .map(PathBuf::from),
            );
        }
    }
    files
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn the_binaries_compile_no_test_double() {
    let libs = library_built_for_the_binaries();
    assert_eq!(
        libs.len(),
        1,
        "expected one library for the binaries: {libs:?}"
    );
    let bytes = std::fs::read(&libs[0]).unwrap_or_else(|e| panic!("{}: {e}", libs[0].display()));
    assert!(
        contains(&bytes, ALWAYS),
        "{} does not name {ALWAYS}: the check cannot see item names",
        libs[0].display()
    );
    let found: Vec<&str> = DOUBLES
        .iter()
        .copied()
        .filter(|name| contains(&bytes, name))
        .collect();
    assert!(
        found.is_empty(),
        "{} (the library the binaries link) contains test doubles {found:?}: gate them with \
         #[cfg(any(test, feature = \"test-util\"))]",
        libs[0].display()
    );
}
