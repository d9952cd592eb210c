//! The library's module structure as tests:
//!
//! - **direction**: the framework (`gardener`) knows nothing of shims, and the node installer uses
//!   neither the framework nor the extension; a `use` that breaks it fails here, naming the file
//!   and line, before the modules grow into each other;
//! - **no cycle**: no two modules (files) of the library import each other, directly or through
//!   others. An import is any path a module names outside comments, in a `use` (grouped
//!   `use crate::{a::b, c::{d, e}}` included) or inline (`crate::x::f()`), resolved to the module
//!   file that defines it (re-exports are followed). A module's use of its own ancestors does not
//!   count: a submodule is part of its parent. Test code (`#[cfg(test)]` modules and files) is
//!   left out: tests may use what they test from both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the crate modules it must not name.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("gardener", &["shim", "installer"]),
    ("installer", &["gardener", "shim"]),
    ("desired_shims", &["gardener", "shim", "installer"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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
    let src = src();
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

// --- the import graph ---------------------------------------------------------------------

/// A module's path below the crate root (`["installer", "payload"]`); the root is empty.
type ModPath = Vec<String>;

/// The library's non-test modules and the file of each.
#[derive(Debug, Default)]
struct Modules {
    files: BTreeMap<ModPath, PathBuf>,
    imports: BTreeMap<ModPath, Imports>,
}

impl Modules {
    /// Follows `mod` declarations from `src/lib.rs`, leaving out those under `#[cfg(test)]`.
    fn read(src: &Path) -> Modules {
        let mut modules = Modules::default();
        modules.add(Vec::new(), src.join("lib.rs"));
        modules
    }

    fn add(&mut self, path: ModPath, file: PathBuf) {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => file.parent().map(Path::to_path_buf),
            _ => file.with_extension("").into(),
        }
        .unwrap_or_else(|| panic!("{}: no directory", file.display()));
        self.files.insert(path.clone(), file.clone());
        let code = strip_test_code(&strip_comments(&text));
        self.imports.insert(path.clone(), imports(&code));
        for child in declared_modules(&code) {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let child_file = if flat.is_file() {
                flat
            } else if nested.is_file() {
                nested
            } else {
                panic!("{}: module {child} has no file", file.display())
            };
            let mut child_path = path.clone();
            child_path.push(child);
            self.add(child_path, child_file);
        }
    }

    /// The module a path named in `from` lands in: the longest prefix of the resolved path that
    /// is a module, followed through that module's re-export of the next name. `None` for paths
    /// into other crates.
    fn resolve(&self, from: &ModPath, path: &[String]) -> Option<ModPath> {
        self.resolve_within(from, path, 0)
    }

    fn resolve_within(&self, from: &ModPath, path: &[String], hops: usize) -> Option<ModPath> {
        let (mut base, mut rest) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("self") => (from.clone(), &path[1..]),
            Some("super") => (from.clone(), path),
            Some(first) => {
                let mut child = from.clone();
                child.push(first.to_string());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (from.clone(), path)
            }
            None => return None,
        };
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        let mut full = base;
        full.extend(rest.iter().cloned());
        let module = (0..=full.len())
            .rev()
            .map(|n| full[..n].to_vec())
            .find(|prefix| self.files.contains_key(prefix))?;
        // Re-exports chain at most a few times; the bound only guards against a loop.
        let target = full
            .get(module.len())
            .and_then(|item| self.imports.get(&module)?.reexports.get(item));
        if let Some(target) = target.filter(|_| hops < 8) {
            let mut through = target.clone();
            through.extend(full[module.len() + 1..].iter().cloned());
            return self
                .resolve_within(&module, &through, hops + 1)
                .or(Some(module));
        }
        Some(module)
    }

    /// Module → the other modules it imports.
    fn graph(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut graph = BTreeMap::new();
        for (module, imports) in &self.imports {
            let targets: BTreeSet<ModPath> = imports
                .used
                .iter()
                .filter_map(|path| self.resolve(module, path))
                // A submodule is part of its parent: it sees the parent's private items, and a
                // file that implements methods of the parent's type (`impl Installer` in
                // `converge/facts.rs`) is the parent split in two, not a second module.
                .filter(|target| !module.starts_with(target))
                .collect();
            graph.insert(module.clone(), targets);
        }
        graph
    }
}

/// The code without comments and without the contents of string and character literals (a
/// glob such as `"conf.d/*.toml"` must not open a comment, nor a `"{"` a block).
fn strip_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            out.push('\n');
                        }
                        i += 1;
                    }
                }
            }
            'r' if (next == Some('"') || next == Some('#'))
                && !chars[..i]
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push(c);
                    i += 1;
                    continue;
                }
                j += 1;
                while j < chars.len() {
                    if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    if chars[j] == '\n' {
                        out.push('\n');
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    } else if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                out.push_str("\"\"");
                i += 1;
            }
            // A character literal ('x', '\'', '"'); a lifetime ('a) has no closing quote.
            '\'' if next == Some('\\') || chars.get(i + 2) == Some(&'\'') => {
                i += 1;
                if chars.get(i) == Some(&'\\') {
                    i += 1;
                }
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                out.push_str("' '");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The text without inline `#[cfg(test)]` modules (`#[cfg(test)] mod tests { … }`).
fn strip_test_code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("#[cfg(test)]") {
            // The item the attribute applies to: skip further attributes.
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim().starts_with("#[") {
                j += 1;
            }
            if j < lines.len() && is_inline_mod(lines[j]) {
                let mut depth = 0i64;
                let mut k = j;
                loop {
                    depth += lines[k].matches('{').count() as i64;
                    depth -= lines[k].matches('}').count() as i64;
                    k += 1;
                    if depth <= 0 || k >= lines.len() {
                        break;
                    }
                }
                i = k;
                continue;
            }
            // `#[cfg(test)] mod name;` and other test-only items: skip the item's line.
            i = j + 1;
            continue;
        }
        out.push(lines[i]);
        i += 1;
    }
    out.join("\n")
}

fn is_inline_mod(line: &str) -> bool {
    let line = line.trim();
    let line = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    line.starts_with("mod ") && line.trim_end().ends_with('{')
}

/// `mod name;` declarations (file modules).
fn declared_modules(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = match line.strip_prefix("pub") {
                Some(rest) if rest.starts_with('(') => rest.split_once(')')?.1.trim_start(),
                Some(rest) => rest.trim_start(),
                None => line,
            };
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            is_ident(name).then(|| name.to_string())
        })
        .collect()
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// What a module's code names: the paths it uses, and the names it re-exports (`pub use`) with
/// the path each stands for. A re-export is no use of its own: a path through it is followed to
/// where it points, so that a parent re-exporting a child's item and the child using the
/// parent's own items do not count as a cycle.
#[derive(Debug, Default)]
struct Imports {
    used: Vec<Vec<String>>,
    reexports: BTreeMap<String, Vec<String>>,
}

/// Every path the code names: each leaf of each `use` tree, and every inline path that starts at
/// `crate`, `self` or `super`.
fn imports(code: &str) -> Imports {
    let mut found = Imports::default();
    let mut rest = String::new();
    let mut remaining = code;
    while let Some(at) = find_use(remaining) {
        let before = &remaining[..at];
        let public = before.trim_end().ends_with("pub")
            || before
                .trim_end()
                .strip_suffix(')')
                .and_then(|b| b.rsplit_once("pub("))
                .is_some_and(|(_, inside)| !inside.contains(['(', ';', '{', '}']));
        rest.push_str(before);
        let statement = &remaining[at + 4..];
        let end = statement.find(';').unwrap_or(statement.len());
        for (path, name) in use_tree_leaves(&statement[..end]) {
            match name {
                Some(name) if public => {
                    found.reexports.insert(name, path);
                }
                _ => found.used.push(path),
            }
        }
        remaining = statement.get(end + 1..).unwrap_or("");
    }
    rest.push_str(remaining);
    found.used.extend(inline_paths(&rest));
    found
}

/// [`imports`], as one list of paths (tests).
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let found = imports(code);
    let mut paths = found.used;
    paths.extend(found.reexports.into_values());
    paths
}

/// The byte offset of the next `use` keyword that starts a statement.
fn find_use(code: &str) -> Option<usize> {
    code.match_indices("use ").map(|(at, _)| at).find(|&at| {
        let before = code[..at].chars().next_back();
        before.is_none_or(|c| c.is_whitespace() || c == ')' || c == ';' || c == '{' || c == '}')
    })
}

/// The leaves of a `use` tree as paths, each with the name it binds: `crate::{a::b, c::{d, e as
/// f}}` gives `crate::a::b` (b), `crate::c::d` (d), `crate::c::e` (f). A glob or `self` leaf
/// names the path before it and binds no single name.
fn use_tree_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    expand(&mut Vec::new(), tree.trim(), &mut out);
    out
}

fn expand(prefix: &mut Vec<String>, tree: &str, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(inner) = tree.strip_prefix('{') {
        let inner = inner.trim_end().strip_suffix('}').unwrap_or(inner);
        for part in split_top_level(inner) {
            expand(&mut prefix.clone(), part, out);
        }
        return;
    }
    match tree.find("::") {
        Some(at) if !tree[..at].contains('{') => {
            prefix.push(tree[..at].trim().to_string());
            expand(prefix, &tree[at + 2..], out);
        }
        _ => {
            let mut words = tree.split(" as ");
            let leaf = words.next().unwrap_or("").trim();
            let alias = words.next().map(str::trim);
            let mut path = prefix.clone();
            let mut name = None;
            if is_ident(leaf) && leaf != "self" {
                path.push(leaf.to_string());
                name = Some(alias.unwrap_or(leaf).to_string());
            } else if leaf == "self" {
                name = alias.map(str::to_string).or_else(|| prefix.last().cloned());
            }
            if !path.is_empty() {
                out.push((path, name.filter(|n| n != "_")));
            }
        }
    }
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Paths in code outside `use` statements that start at `crate`, `self` or `super`
/// (`crate::installer::payload::swap(…)`); `$crate` in macros is another crate's root.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let path: Vec<String> = code[at..]
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or("")
                .split("::")
                .take_while(|s| is_ident(s))
                .map(str::to_string)
                .collect();
            if path.len() > 1 {
                out.push(path);
            }
        }
    }
    out
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let Some((w, _)) = self.graph.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    tarjan.found
}

fn display(path: &ModPath) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

#[test]
fn no_module_imports_itself_through_others() {
    let modules = Modules::read(&src());
    assert!(
        modules.files.len() > 50,
        "only {} modules found",
        modules.files.len()
    );
    let graph = modules.graph();
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(edges > 100, "only {edges} imports found");
    let found: Vec<String> = cycles(&graph)
        .iter()
        .map(|component| {
            let members: BTreeSet<&ModPath> = component.iter().collect();
            let ties: Vec<String> = component
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| format!("  {} -> {}", display(from), display(to)))
                })
                .collect();
            format!("cycle of {} modules:\n{}", component.len(), ties.join("\n"))
        })
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn grouped_and_inline_imports_are_seen() {
    let code = "use crate::{a::b, c::{d, e as f}, g::*};\npub(crate) use super::super::x::Y;\n\
                use std::io;\nfn f() { crate::h::i(); $crate::j::k(); }\n";
    let mut paths = named_paths(code);
    paths.sort();
    let expected: Vec<Vec<String>> = [
        "crate::a::b",
        "crate::c::d",
        "crate::c::e",
        "crate::g",
        "crate::h::i",
        "std::io",
        "super::super::x::Y",
    ]
    .iter()
    .map(|p| p.split("::").map(str::to_string).collect())
    .collect();
    assert_eq!(paths, expected);
}

#[test]
fn test_code_and_comments_are_not_imports() {
    let code = "use crate::a;\n// use crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n    fn f() { if x { y } }\n}\n#[cfg(test)]\nmod test_support;\nuse crate::d;\n";
    let stripped = strip_test_code(&strip_comments(code));
    let paths: Vec<String> = named_paths(&stripped)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(paths, ["crate::a", "crate::d"]);
    assert!(declared_modules(&stripped).is_empty());
    assert_eq!(
        declared_modules("pub mod x;\nmod y;\npub(crate) mod z;\n"),
        ["x", "y", "z"]
    );
}

#[test]
fn a_cycle_through_three_modules_is_found() {
    let m = |s: &str| -> ModPath { s.split("::").map(str::to_string).collect() };
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    graph.insert(m("a"), [m("b")].into());
    graph.insert(m("b"), [m("c")].into());
    graph.insert(m("c"), [m("a"), m("d")].into());
    graph.insert(m("d"), BTreeSet::new());
    assert_eq!(cycles(&graph), [vec![m("a"), m("b"), m("c")]]);
    graph.insert(m("c"), [m("d")].into());
    assert!(cycles(&graph).is_empty());
}

#[test]
fn paths_resolve_to_the_module_that_declares_them() {
    let mut modules = Modules::default();
    for (path, file) in [
        ("", "lib.rs"),
        ("x", "x/mod.rs"),
        ("x::y", "x/y.rs"),
        ("x::z", "x/z.rs"),
    ] {
        let path = if path.is_empty() {
            Vec::new()
        } else {
            path.split("::").map(str::to_string).collect()
        };
        modules.files.insert(path, PathBuf::from(file));
    }
    let seg = |s: &str| -> Vec<String> { s.split("::").map(str::to_string).collect() };
    let y = seg("x::y");
    assert_eq!(
        modules.resolve(&y, &seg("super::z::Item")),
        Some(seg("x::z"))
    );
    assert_eq!(modules.resolve(&y, &seg("super::Item")), Some(seg("x")));
    assert_eq!(
        modules.resolve(&y, &seg("crate::x::z::f")),
        Some(seg("x::z"))
    );
    assert_eq!(
        modules.resolve(&seg("x"), &seg("z::Item")),
        Some(seg("x::z"))
    );
    assert_eq!(modules.resolve(&y, &seg("std::io")), None);
    // A re-export is followed to the module that defines the item.
    modules.imports.insert(
        seg("x"),
        imports("pub use y::Item;\npub(crate) use self::y::Other as Renamed;\n"),
    );
    let z = seg("x::z");
    assert_eq!(modules.resolve(&z, &seg("super::Item")), Some(seg("x::y")));
    assert_eq!(
        modules.resolve(&z, &seg("crate::x::Renamed")),
        Some(seg("x::y"))
    );
    assert_eq!(modules.resolve(&z, &seg("super::Defined")), Some(seg("x")));
    assert!(
        modules.imports[&seg("x")].used.is_empty(),
        "a re-export is not a use"
    );
}
