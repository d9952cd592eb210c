//! Every reference to the Gardener contract must resolve: each `§` section number and each test
//! id used in `src/`, `test/`, `docs/*.md` and `README.md` has to exist in
//! `docs/gardener-contract.md`, as a heading containing the number (`## §1.4 …`) or as a bold
//! marker of the id (`**t3c**`).
//!
//! What counts as a reference:
//!
//! - a section: `§` followed by numbers separated by dots (`§1`, `§1.4`; in `§1.3–1.4` only
//!   `§1.3` is seen);
//! - a test function name: `t<digits>[a-z]_` at the start of a word (`t3c_a_failed_migration…`);
//! - an id in quotes or backticks: `"t3c"`, `` `t3c` `` (fixture names, prose);
//! - an id in prose: `T<digits>[a-z]` as a word (`T9a`, `T1–T7`); in Rust files only in comments,
//!   so generic parameters such as `T1` do not count.
//!
//! Ids are compared in lower case. This file itself is not scanned: its tests contain references
//! that are meant not to resolve.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const CONTRACT: &str = "docs/gardener-contract.md";
const THIS_FILE: &str = "test/repository/contract_refs.rs";

/// A reference found in a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Ref {
    /// A section number without the `§`, e.g. `1.4`.
    Section(String),
    /// A test id in lower case, e.g. `t3c`.
    TestId(String),
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ref::Section(s) => write!(f, "section §{s} (no heading contains it)"),
            Ref::TestId(id) => write!(f, "test id {id} (no **{id}** marker)"),
        }
    }
}

/// What the contract defines: the section numbers of its headings and its test-id markers.
#[derive(Debug, Default)]
struct Contract {
    sections: BTreeSet<String>,
    ids: BTreeSet<String>,
}

impl Contract {
    fn parse(text: &str) -> Self {
        let mut contract = Contract::default();
        for line in text.lines() {
            if line.trim_start().starts_with('#') {
                contract.sections.extend(section_refs(line));
            }
            contract.ids.extend(bold_ids(line));
        }
        contract
    }

    fn resolves(&self, reference: &Ref) -> bool {
        match reference {
            Ref::Section(s) => self.sections.contains(s),
            Ref::TestId(id) => self.ids.contains(id),
        }
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `§1`, `§1.4`, `§10.2.3` → `1`, `1.4`, `10.2.3`. A trailing dot is not part of the number.
fn section_refs(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (start, _) in line.match_indices('§') {
        let rest = &line.as_bytes()[start + '§'.len_utf8()..];
        let mut end = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if end == 0 {
            continue;
        }
        while end + 1 < rest.len() && rest[end] == b'.' && rest[end + 1].is_ascii_digit() {
            end += 1;
            end += rest[end..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        }
        // Only ASCII digits and dots were taken, so this is a char boundary.
        found.push(String::from_utf8_lossy(&rest[..end]).into_owned());
    }
    found
}

/// The id starting at `i` (`t`/`T`, digits, an optional lower-case letter) and the index after
/// it, if there is one.
fn id_at(bytes: &[u8], i: usize) -> Option<(String, usize)> {
    if !matches!(bytes.get(i), Some(b't' | b'T')) {
        return None;
    }
    let digits = bytes[i + 1..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return None;
    }
    let mut end = i + 1 + digits;
    if bytes.get(end).is_some_and(u8::is_ascii_lowercase) {
        end += 1;
    }
    let id = String::from_utf8_lossy(&bytes[i..end]).to_ascii_lowercase();
    Some((id, end))
}

/// `**t3c**` markers in the contract.
fn bold_ids(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    for (start, _) in line.match_indices("**") {
        if let Some((id, end)) = id_at(bytes, start + 2)
            && bytes[start + 2] == b't'
            && bytes[end..].starts_with(b"**")
        {
            found.push(id);
        }
    }
    found
}

/// Test ids referenced on one line. `prose` says whether capitalised ids (`T9a`) count.
fn id_refs(line: &str, prose: bool) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    for i in 0..bytes.len() {
        let Some((id, end)) = id_at(bytes, i) else {
            continue;
        };
        let before = i.checked_sub(1).map(|p| bytes[p]);
        let after = bytes.get(end).copied();
        let at_word_start = !before.is_some_and(is_word);
        let hit = if bytes[i] == b't' {
            // A test function name, or an id in quotes or backticks.
            (at_word_start && after == Some(b'_'))
                || matches!(before, Some(q @ (b'"' | b'`')) if after == Some(q))
        } else {
            prose && at_word_start && !after.is_some_and(is_word)
        };
        if hit {
            found.push(id);
        }
    }
    found
}

/// All references in one file's text, with their 1-based line numbers.
fn refs_in(path: &Path, text: &str) -> Vec<(usize, Ref)> {
    let rust = path.extension().is_some_and(|e| e == "rs");
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for s in section_refs(line) {
            found.push((n + 1, Ref::Section(s)));
        }
        // In Rust, capitalised ids count only in comments.
        let comment = line.find("//").map(|c| &line[c..]);
        let (code, prose) = match (rust, comment) {
            (false, _) => (line, line),
            (true, Some(comment)) => (&line[..line.len() - comment.len()], comment),
            (true, None) => (line, ""),
        };
        for id in id_refs(code, !rust) {
            found.push((n + 1, Ref::TestId(id)));
        }
        if rust {
            for id in id_refs(prose, true) {
                found.push((n + 1, Ref::TestId(id)));
            }
        }
    }
    found
}

/// The files whose references are checked, relative to the crate root.
fn files_to_scan(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = dir.join(&*name);
            match entry.file_type() {
                Ok(t) if t.is_dir() => walk(root, &path, out),
                Ok(t) if t.is_file() => out.push(path),
                _ => {}
            }
        }
    }
    let mut files = Vec::new();
    walk(root, Path::new("src"), &mut files);
    walk(root, Path::new("test"), &mut files);
    if let Ok(entries) = fs::read_dir(root.join("docs")) {
        for entry in entries.flatten() {
            let path = Path::new("docs").join(entry.file_name());
            if path.extension().is_some_and(|e| e == "md") && path != Path::new(CONTRACT) {
                files.push(path);
            }
        }
    }
    files.push(PathBuf::from("README.md"));
    files.retain(|p| p != Path::new(THIS_FILE));
    files.sort();
    files
}

/// `path:line: missing …` for every reference in `text` the contract does not define.
fn unresolved(path: &Path, text: &str, contract: &Contract) -> Vec<String> {
    refs_in(path, text)
        .into_iter()
        .filter(|(_, r)| !contract.resolves(r))
        .map(|(line, r)| format!("{}:{line}: missing {r}", path.display()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn contract() -> Contract {
        let text = fs::read_to_string(root().join(CONTRACT)).expect("docs/gardener-contract.md");
        Contract::parse(&text)
    }

    #[test]
    fn every_reference_to_the_contract_resolves() {
        let contract = contract();
        let (mut sections, mut ids) = (0, 0);
        let mut missing = Vec::new();
        for path in files_to_scan(root()) {
            // Binary files (fixtures, golden data) cannot hold references.
            let Ok(text) = fs::read_to_string(root().join(&path)) else {
                continue;
            };
            for (_, r) in refs_in(&path, &text) {
                match r {
                    Ref::Section(_) => sections += 1,
                    Ref::TestId(_) => ids += 1,
                }
            }
            missing.extend(unresolved(&path, &text, &contract));
        }
        assert!(
            missing.is_empty(),
            "references without a target in {CONTRACT}:\n{}",
            missing.join("\n")
        );
        // Guard against a scanner that silently finds nothing.
        assert!(
            sections > 0 && ids > 0,
            "found {sections} section and {ids} id references"
        );
    }

    #[test]
    fn the_contract_defines_sections_and_ids() {
        let c = contract();
        for s in ["1", "1.4", "1.13", "3.3", "4.3", "7", "8"] {
            assert!(c.sections.contains(s), "no heading for §{s}");
        }
        for id in ["t1", "t1a", "t3c", "t7", "t10", "t10d"] {
            assert!(c.ids.contains(id), "no marker for {id}");
        }
        // A number in the text is not a heading.
        assert!(!c.sections.contains("99"));
    }

    #[test]
    fn unresolved_references_are_reported_with_file_and_line() {
        let text = "fn t3c_known() {}\n\
                    // see §1.4 and §99.1\n\
                    async fn t99z_unknown() {}\n\
                    let f = Fixture::with_shoot(\"t42\");\n\
                    // T9a and T77b\n";
        let got = unresolved(Path::new("test/x.rs"), text, &contract());
        assert_eq!(
            got,
            [
                "test/x.rs:2: missing section §99.1 (no heading contains it)",
                "test/x.rs:3: missing test id t99z (no **t99z** marker)",
                "test/x.rs:4: missing test id t42 (no **t42** marker)",
                "test/x.rs:5: missing test id t77b (no **t77b** marker)",
            ]
        );
    }

    #[test]
    fn section_numbers_are_read_up_to_the_last_number() {
        assert_eq!(
            section_refs("§1.3–1.4, §1. and §10.2.3 and § 4"),
            ["1.3", "1", "10.2.3"]
        );
        assert_eq!(section_refs("(§4.3)"), ["4.3"]);
    }

    #[test]
    fn only_id_shaped_words_count_as_test_ids() {
        let ids = |text: &str| -> Vec<String> {
            refs_in(Path::new("a.rs"), text)
                .into_iter()
                .map(|(_, r)| match r {
                    Ref::TestId(id) | Ref::Section(id) => id,
                })
                .collect()
        };
        assert_eq!(ids("async fn t10a_leader() {}"), ["t10a"]);
        assert_eq!(
            ids("let t1 = first; t1.as_second(); {t1}"),
            Vec::<String>::new()
        );
        assert_eq!(
            ids("unique_name(\"garden-t6b\"); xt1_y"),
            Vec::<String>::new()
        );
        assert_eq!(ids("fn f<T1, T2>() {}"), Vec::<String>::new());
        assert_eq!(
            ids("Fixture::with_shoot(\"t6b\") // T1–T7, T9a/T9c"),
            ["t6b", "t1", "t7", "t9a", "t9c"]
        );
        let md = |text: &str| -> Vec<(usize, Ref)> { refs_in(Path::new("a.md"), text) };
        assert_eq!(
            md("integration test `t3c`"),
            [(1, Ref::TestId("t3c".into()))]
        );
        assert_eq!(
            md("T1–T7"),
            [(1, Ref::TestId("t1".into())), (1, Ref::TestId("t7".into()))]
        );
        assert_eq!(md("UTF8 and HTTP2 and 2026-01-01T10:00"), []);
    }
}
