//! The command blocks of the shoot owner's and the operator's documentation run as written, and
//! the catalog overlay example of docs/operations.md is the one its commands check. Needs
//! nothing but the built binary: no control plane, no network.
//!
//! Which blocks run: every ```` ```sh ```` block of [`DOCS`] is split into commands (lines,
//! joined at a trailing `\`, without blank and `#` lines) and each command into the programs of
//! its pipeline or list (`|`, `&&`, `||`, `;`). A program counts as offline when, after leading
//! `NAME=value` environment assignments, it is one of [`OFFLINE_PROGRAMS`]: the extension's
//! binary, or `cat`/`cp` of the repository's files. A block whose programs are all offline runs;
//! a block with none (kubectl, helm: they need a cluster) is skipped; a block that mixes both
//! fails the test, to be split so that its offline part is checked. Each document must hold at
//! least one block that runs, so that losing them all fails too.
//!
//! A block runs with `sh -e` in a temporary directory that holds a copy of example/, so that
//! paths read as in the repository and nothing is written into it, with the binary first on
//! `PATH` and without the overrides `SHIM_CATALOG_OVERLAY` and `IMAGEVECTOR_OVERWRITE` of the
//! environment the test runs in; it must exit 0.

// Tests and benchmarks fail by panicking: unwrap and expect are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod claims;
mod maps;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-containerd-shim");
const BIN_NAME: &str = "gardener-extension-containerd-shim";

/// The documents whose command blocks run.
const DOCS: &[&str] = &["docs/usage.md", "docs/operations.md"];

/// Programs that need nothing but the repository and the binary.
const OFFLINE_PROGRAMS: &[&str] = &[BIN_NAME, "cat", "cp"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of the section `## <heading>` of the document at `path`, up to the next `## `.
fn section(path: &str, heading: &str) -> String {
    let doc = read(path);
    let rest = doc
        .split(&format!("\n## {heading}"))
        .nth(1)
        .unwrap_or_else(|| panic!("{path} has no section \"## {heading}\""));
    rest.split("\n## ").next().unwrap_or(rest).to_owned()
}

/// A fenced block: its info string (`sh`, `yaml`), first line number and text.
#[derive(Debug)]
struct Block {
    info: String,
    line: usize,
    text: String,
}

fn fenced_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, String, usize)> = None;
    for (number, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((info.trim().to_owned(), number + 2, String::new(), indent));
                }
            }
            Some((info, first, text, fence_indent)) => {
                if trimmed == "```" {
                    blocks.push(Block {
                        info,
                        line: first,
                        text,
                    });
                } else {
                    let mut text = text;
                    text.push_str(line.get(fence_indent..).unwrap_or(trimmed));
                    text.push('\n');
                    open = Some((info, first, text, fence_indent));
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is not closed");
    blocks
}

/// The commands of a shell block: continued lines joined, comments and blank lines left out.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

/// The program each part of a pipeline or list starts, after environment assignments.
fn programs(command: &str) -> Vec<String> {
    command
        .split(['|', ';'])
        .flat_map(|part| part.split("&&"))
        .filter_map(|part| {
            part.split_whitespace()
                .find(|word| !is_assignment(word))
                .map(str::to_owned)
        })
        .collect()
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Run,
    Skip,
    /// Offline and other programs together: the offline ones would go unchecked.
    Mixed {
        other: Vec<String>,
    },
}

fn verdict(block: &str) -> Verdict {
    let all: Vec<String> = commands(block).iter().flat_map(|c| programs(c)).collect();
    let other: Vec<String> = all
        .iter()
        .filter(|p| !OFFLINE_PROGRAMS.contains(&p.as_str()))
        .cloned()
        .collect();
    if other.is_empty() && !all.is_empty() {
        Verdict::Run
    } else if other.len() == all.len() {
        Verdict::Skip
    } else {
        Verdict::Mixed { other }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("directory entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        }
    }
}

/// A shell in a scratch copy of example/, with the binary first on `PATH`.
fn shell(dir: &Path, script: &str) -> Command {
    let bin_dir = Path::new(BIN)
        .parent()
        .expect("the binary is in a directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    let mut command = Command::new("sh");
    command
        .args(["-e", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("SHIM_CATALOG_OVERLAY")
        .env_remove("IMAGEVECTOR_OVERWRITE");
    command
}

#[test]
fn every_offline_command_block_of_the_docs_runs() {
    let scratch = tempfile::tempdir().expect("temp dir");
    copy_dir(&repo("example"), &scratch.path().join("example"));
    let mut failures = Vec::new();
    for doc in DOCS {
        let mut ran = 0;
        for block in fenced_blocks(&read(doc))
            .into_iter()
            .filter(|b| b.info == "sh")
        {
            let at = format!("{doc}:{}", block.line);
            match verdict(&block.text) {
                Verdict::Skip => eprintln!("{at}: skipped (needs a cluster or tools)"),
                Verdict::Mixed { other } => failures.push(format!(
                    "{at}: mixes offline commands with {other:?}; split the block so that its \
                     offline commands are checked"
                )),
                Verdict::Run => {
                    eprintln!("{at}: running\n{}", block.text);
                    let output = shell(scratch.path(), &block.text)
                        .output()
                        .unwrap_or_else(|e| panic!("cannot run sh: {e}"));
                    ran += 1;
                    if !output.status.success() {
                        failures.push(format!(
                            "{at}: failed ({}):\n{}\n{}",
                            output.status,
                            block.text,
                            String::from_utf8_lossy(&output.stderr)
                        ));
                    } else if output.stdout.is_empty() {
                        failures.push(format!("{at}: printed nothing:\n{}", block.text));
                    }
                }
            }
        }
        if ran == 0 {
            failures.push(format!("{doc}: no command block runs offline"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The chart values of the catalog overlay example, and what they hold for the controller: the
/// overlay file and the image vector override.
fn operations_catalog_example() -> (String, Value) {
    let section = section("docs/operations.md", "Shim catalog");
    let values = fenced_blocks(&section)
        .into_iter()
        .find(|b| b.info == "yaml" && b.text.contains("shimCatalog:"))
        .expect("the Shim catalog section shows chart values with shimCatalog");
    let values: Value = serde_saphyr::from_str(&values.text).expect("the example values are YAML");
    let overlay = values["shimCatalog"]
        .as_str()
        .expect("shimCatalog in its string form")
        .to_owned();
    (overlay, values["imageVectorOverwrite"].clone())
}

#[test]
fn the_catalog_overlay_example_of_the_operations_doc_works_as_written() {
    let (overlay, overwrite) = operations_catalog_example();
    // The doc's commands check the example files: they must hold what the doc shows.
    let yaml = |text: &str| -> Value { serde_saphyr::from_str(text).expect("YAML") };
    assert_eq!(
        yaml(&overlay),
        yaml(&read("example/shim-catalog-overlay.yaml")),
        "the shimCatalog of docs/operations.md differs from example/shim-catalog-overlay.yaml"
    );
    assert_eq!(
        overwrite,
        yaml(&read("example/imagevector-overwrite.yaml")),
        "the imageVectorOverwrite of docs/operations.md differs from \
         example/imagevector-overwrite.yaml"
    );

    // And the doc's values, as the chart hands them to the controller, take effect.
    let dir = tempfile::tempdir().expect("temp dir");
    let overlay_file = dir.path().join("catalog-overlay.yaml");
    std::fs::write(&overlay_file, &overlay).expect("write the overlay");
    let overwrite_file = dir.path().join("images_overwrite.yaml");
    std::fs::write(
        &overwrite_file,
        serde_json::to_string(&overwrite).expect("JSON is YAML"),
    )
    .expect("write the override");
    let output = Command::new(BIN)
        .current_dir(repo(""))
        .env("IMAGEVECTOR_OVERWRITE", &overwrite_file)
        .env_remove("SHIM_CATALOG_OVERLAY")
        .args([
            "render",
            "-f",
            "example/extension.yaml",
            "--shim-catalog-overlay",
        ])
        .arg(&overlay_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("ghcr.io/spinframework/containerd-shim-spin/node-installer:v0.21.0"),
        "the overlay's default Spin version is not what the example Extension gets"
    );
}

#[test]
fn blocks_are_told_apart_by_their_programs() {
    assert_eq!(
        verdict("gardener-extension-containerd-shim render -f x.yaml\n"),
        Verdict::Run
    );
    assert_eq!(
        verdict(
            "# a comment\nA=1 B=2 \\\n  gardener-extension-containerd-shim render \\\n  -f x\ncat x | cat\n"
        ),
        Verdict::Run
    );
    assert_eq!(verdict("kubectl get nodes\nhelm list\n"), Verdict::Skip);
    assert_eq!(verdict("\n# nothing\n"), Verdict::Skip);
    assert_eq!(
        verdict("gardener-extension-containerd-shim render -f x | kubectl apply -f -\n"),
        Verdict::Mixed {
            other: vec!["kubectl".into()]
        }
    );
    assert_eq!(
        verdict("cp example/x.yaml y.yaml && kubectl apply -f y.yaml\n"),
        Verdict::Mixed {
            other: vec!["kubectl".into()]
        }
    );
    assert_eq!(
        commands("a \\\n  b\n\n# c\nd\n"),
        vec!["a b".to_owned(), "d".to_owned()]
    );
    let blocks = fenced_blocks("text\n```sh\nx\n```\n  ```yaml\n  a: 1\n  ```\n");
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (
            blocks[0].info.as_str(),
            blocks[0].line,
            blocks[0].text.as_str()
        ),
        ("sh", 3, "x\n")
    );
    assert_eq!(
        (blocks[1].info.as_str(), blocks[1].text.as_str()),
        ("yaml", "a: 1\n")
    );
}
