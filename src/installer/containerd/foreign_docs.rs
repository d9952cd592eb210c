//! A generator of containerd configs as people, distributions and tools spell them, for the
//! property that an install never respells a line that is not ours.
//!
//! A document is built from a fixed tree of realistic tables (CRI plugin, runtimes `runc` and
//! `nvidia` with options, CNI, registry, image settings, GC, grpc, timeouts) by a sequence of
//! random choices: each table is left out, written with a `[header]`, only implied by its
//! children's headers, written as dotted keys in its parent (`containerd.runtimes.runc.
//! runtime_type = ...`) or as an inline table (`options = { SystemdCgroup = true }`). Headers
//! get unusual spacing (`[ plugins . 'io.containerd.grpc.v1.cri' ]`), keys every quoting TOML
//! allows, values both string quotes, arrays one per line with or without a trailing comma;
//! comments and blank lines go between everything, header blocks are shuffled (a sub-table
//! before its parent is valid TOML), and the whole file may use CRLF and lack its final newline.
//!
//! Choices are bytes that proptest shrinks towards zero, which the builder reads as the plainest
//! option, so a failure shrinks to a small, plain document.

use proptest::prelude::*;

use super::test_support::{LineEdit, line_edits};

/// The bytes a document is built from.
pub(super) fn seeds() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 48..256)
}

/// Reads choices off the seed; past its end every choice is the plainest.
struct Dice<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Dice<'_> {
    fn roll(&mut self, sides: usize) -> usize {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        usize::from(byte) % sides
    }

    /// True with about `percent` % probability; false for a zero byte.
    fn chance(&mut self, percent: usize) -> bool {
        self.roll(100) >= 100 - percent
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.roll(options.len())]
    }
}

/// A TOML value as the tree holds it; spelled by the dice when written.
#[derive(Clone)]
enum Val {
    Str(&'static str),
    Int(i64),
    Float(&'static str),
    Bool(bool),
    Strings(&'static [&'static str]),
}

struct Section {
    name: &'static str,
    keys: Vec<(&'static str, Val)>,
    children: Vec<Section>,
}

fn section(name: &'static str, keys: Vec<(&'static str, Val)>, children: Vec<Section>) -> Section {
    Section {
        name,
        keys,
        children,
    }
}

/// The tables of a config of this version (`None`: no `version` line).
fn tree(version: Option<i64>) -> Vec<Section> {
    let split = version.is_some_and(|v| v >= 3);
    let cri = match version {
        None | Some(1) => "cri",
        Some(2) => "io.containerd.grpc.v1.cri",
        _ => "io.containerd.cri.v1.runtime",
    };
    let runtimes = section(
        "runtimes",
        vec![],
        vec![
            section(
                "runc",
                vec![("runtime_type", Val::Str("io.containerd.runc.v2"))],
                vec![section(
                    "options",
                    vec![
                        ("SystemdCgroup", Val::Bool(true)),
                        ("BinaryName", Val::Str("/usr/bin/runc")),
                    ],
                    vec![],
                )],
            ),
            section(
                "nvidia",
                vec![
                    ("runtime_type", Val::Str("io.containerd.runc.v2")),
                    ("privileged_without_host_devices", Val::Bool(false)),
                ],
                vec![section(
                    "options",
                    vec![("BinaryName", Val::Str("/usr/bin/nvidia-container-runtime"))],
                    vec![],
                )],
            ),
        ],
    );
    let mut containerd_keys = vec![("default_runtime_name", Val::Str("runc"))];
    let mut cri_keys = vec![];
    let mut cri_children = vec![section(
        "cni",
        vec![
            ("bin_dir", Val::Str("/opt/cni/bin")),
            ("conf_dir", Val::Str("/etc/cni/net.d")),
        ],
        vec![],
    )];
    let mut plugins = vec![];
    if split {
        cri_keys.push(("enable_cdi", Val::Bool(true)));
        cri_keys.push(("cdi_spec_dirs", Val::Strings(&["/etc/cdi", "/var/run/cdi"])));
        plugins.push(section(
            "io.containerd.cri.v1.images",
            vec![("snapshotter", Val::Str("overlayfs"))],
            vec![section(
                "pinned_images",
                vec![("sandbox", Val::Str("registry.k8s.io/pause:3.10"))],
                vec![],
            )],
        ));
    } else {
        containerd_keys.push(("snapshotter", Val::Str("overlayfs")));
        cri_keys.push(("sandbox_image", Val::Str("registry.k8s.io/pause:3.10")));
        cri_keys.push(("max_concurrent_downloads", Val::Int(3)));
        cri_children.push(section(
            "registry",
            vec![("config_path", Val::Str("/etc/containerd/certs.d"))],
            vec![],
        ));
    }
    cri_children.insert(0, section("containerd", containerd_keys, vec![runtimes]));
    plugins.insert(0, section(cri, cri_keys, cri_children));
    plugins.push(section(
        "io.containerd.gc.v1.scheduler",
        vec![
            ("pause_threshold", Val::Float("0.02")),
            ("deletion_threshold", Val::Int(0)),
        ],
        vec![],
    ));
    plugins.push(section(
        "io.containerd.internal.v1.opt",
        vec![("path", Val::Str("/opt/containerd"))],
        vec![],
    ));
    vec![
        section(
            "grpc",
            vec![
                ("address", Val::Str("/run/containerd/containerd.sock")),
                ("max_recv_message_size", Val::Int(16777216)),
            ],
            vec![],
        ),
        section(
            "timeouts",
            vec![("io.containerd.timeout.shim.cleanup", Val::Str("5s"))],
            vec![],
        ),
        section("plugins", vec![], plugins),
    ]
}

/// A key segment in one of the spellings TOML allows for it.
fn spell_key(dice: &mut Dice<'_>, segment: &str) -> String {
    let bare = segment
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match dice.roll(if bare { 4 } else { 2 }) {
        0 if bare => segment.to_string(),
        1 if bare => segment.to_string(),
        0 | 2 => format!("\"{segment}\""),
        _ => format!("'{segment}'"),
    }
}

/// Segments joined by dots with the spacing TOML allows around them.
fn spell_path(dice: &mut Dice<'_>, segments: &[&str]) -> String {
    let mut out = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            out.push_str(dice.pick(&[".", ".", " . ", ". ", " .", "\t.\t"]));
        }
        out.push_str(&spell_key(dice, segment));
    }
    out
}

fn spell_value(dice: &mut Dice<'_>, value: &Val) -> String {
    let quote = |dice: &mut Dice<'_>, text: &str| match dice.roll(2) {
        0 => format!("\"{text}\""),
        _ => format!("'{text}'"),
    };
    match value {
        Val::Str(text) => quote(dice, text),
        Val::Int(number) => number.to_string(),
        Val::Float(text) => (*text).to_string(),
        Val::Bool(flag) => flag.to_string(),
        Val::Strings(items) => {
            let items: Vec<String> = items.iter().map(|item| quote(dice, item)).collect();
            match dice.roll(3) {
                0 => format!("[{}]", items.join(", ")),
                1 => format!("[\n  {},\n]", items.join(",\n  ")),
                _ => format!("[ {} ]", items.join(" , ")),
            }
        }
    }
}

fn key_line(dice: &mut Dice<'_>, indent: &str, key: &str, value: &str) -> String {
    let equals = dice.pick(&[" = ", " = ", "=", "  =  ", "\t= "]);
    let comment = if dice.chance(15) { "  # keep" } else { "" };
    format!("{indent}{key}{equals}{value}{comment}")
}

/// A header block: the path it defines and its lines.
struct Block {
    path: Vec<&'static str>,
    lines: Vec<String>,
}

/// Where a table's own keys go when it is not written with a header: the block holding its
/// nearest headed ancestor, and its path relative to that block.
type Container = Option<(usize, Vec<&'static str>)>;

fn emit(
    dice: &mut Dice<'_>,
    blocks: &mut Vec<Block>,
    table: &Section,
    path: Vec<&'static str>,
    container: Container,
    dotted_only: bool,
) {
    if dice.chance(15) {
        return;
    }
    let leaf = table.children.is_empty();
    let indent = dice.pick(&["", "", "  ", "\t"]);
    let child_path = |name| {
        let mut path = path.clone();
        path.push(name);
        path
    };
    match (dotted_only, dice.roll(10), &container) {
        // An inline table: `options = { SystemdCgroup = true, ... }`.
        (_, 8, Some((block, relative))) | (true, 0..=2, Some((block, relative))) if leaf => {
            let entries: Vec<String> = table
                .keys
                .iter()
                .map(|(key, value)| {
                    format!("{} = {}", spell_key(dice, key), spell_value(dice, value))
                })
                .collect();
            let key = spell_path(dice, relative);
            let line = key_line(dice, indent, &key, &format!("{{ {} }}", entries.join(", ")));
            blocks[*block].lines.push(line);
        }
        // Dotted keys in the parent: `containerd.runtimes.runc.runtime_type = "..."`.
        (true, _, Some((block, relative))) | (false, 6 | 7, Some((block, relative))) => {
            for (key, value) in &table.keys {
                let mut segments = relative.clone();
                segments.push(key);
                let key = spell_path(dice, &segments);
                let value = spell_value(dice, value);
                let line = key_line(dice, indent, &key, &value);
                blocks[*block].lines.push(line);
            }
            for child in &table.children {
                let mut relative = relative.clone();
                relative.push(child.name);
                emit(
                    dice,
                    blocks,
                    child,
                    child_path(child.name),
                    Some((*block, relative)),
                    true,
                );
            }
        }
        // No header: the table exists through its children's headers only.
        (false, 9, _) if table.keys.is_empty() => {
            for child in &table.children {
                emit(dice, blocks, child, child_path(child.name), None, false);
            }
        }
        _ => {
            let index = blocks.len();
            let mut lines = Vec::new();
            for (key, value) in &table.keys {
                let key = spell_key(dice, key);
                let value = spell_value(dice, value);
                lines.push(key_line(dice, indent, &key, &value));
            }
            blocks.push(Block {
                path: path.clone(),
                lines,
            });
            for child in &table.children {
                emit(
                    dice,
                    blocks,
                    child,
                    child_path(child.name),
                    Some((index, vec![child.name])),
                    false,
                );
            }
        }
    }
}

/// A containerd config built from `seed`.
pub(super) fn foreign_document(seed: &[u8]) -> String {
    let dice = &mut Dice { bytes: seed, at: 0 };
    let version = dice.pick(&[Some(2), None, Some(1), Some(3), Some(4)]);
    let mut root = Vec::new();
    if let Some(version) = version {
        root.push(format!("version = {version}"));
    }
    if dice.chance(50) {
        root.push("root = \"/var/lib/containerd\"".to_string());
    }
    if dice.chance(30) {
        root.push("# Keep the OOM killer away from containerd.".to_string());
        root.push("oom_score = -999".to_string());
    }
    if dice.chance(30) {
        let value = spell_value(dice, &Val::Strings(&["io.containerd.internal.v1.tracing"]));
        root.push(format!("disabled_plugins = {value}"));
    }
    if version.is_some_and(|v| v >= 2) {
        let imports = match dice.roll(6) {
            0 => None,
            1 => Some("[\"/etc/containerd/conf.d/*.toml\"]"),
            2 => Some("[]"),
            3 => Some("[\n  \"/etc/containerd/extra.toml\",\n]"),
            4 => Some("[\n  '/etc/containerd/extra.toml'\n]"),
            _ => Some("['/etc/containerd/conf.d/*.conf'] # not ours"),
        };
        if let Some(imports) = imports {
            root.push(format!("imports = {imports}"));
        }
    }
    let mut blocks = vec![Block {
        path: vec![],
        lines: root,
    }];
    for table in tree(version) {
        emit(
            dice,
            &mut blocks,
            &table,
            vec![table.name],
            Some((0, vec![table.name])),
            false,
        );
    }
    // Shuffle the header blocks: a sub-table before its parent is valid TOML.
    for i in (2..blocks.len()).rev() {
        let j = 1 + dice.roll(i);
        blocks.swap(i, j);
    }

    let mut text = String::new();
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            text.push_str(&"\n".repeat(dice.roll(3)));
            if dice.chance(30) {
                text.push_str("# Managed by the node's provisioning.\n");
            }
            let pad = dice.pick(&["", "", " "]);
            let indent = dice.pick(&["", "", "  "]);
            let header = spell_path(dice, &block.path);
            text.push_str(&format!("{indent}[{pad}{header}{pad}]\n"));
        }
        for line in &block.lines {
            text.push_str(line);
            text.push('\n');
        }
    }
    if dice.chance(20) {
        while text.ends_with('\n') {
            text.pop();
        }
    }
    if dice.chance(30) {
        text = text.replace('\n', "\r\n");
    }
    text
}

/// The lines of `text` (indices) that belong to the top-level `imports` array.
pub(super) fn imports_lines(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|line| line.trim_start().starts_with("imports"))
    else {
        return Vec::new();
    };
    let end = (start..lines.len())
        .find(|&i| lines[i].contains(']'))
        .unwrap_or(start);
    (start..=end).collect()
}

/// The line changes from `old` to `new`: indices of `old`'s lines that are gone and of `new`'s
/// lines that are added.
pub(super) fn line_changes(old: &str, new: &str) -> (Vec<usize>, Vec<usize>) {
    let a: Vec<&str> = old.trim_start_matches('\u{feff}').lines().collect();
    let b: Vec<&str> = new.trim_start_matches('\u{feff}').lines().collect();
    let (mut gone, mut added) = (Vec::new(), Vec::new());
    for edit in line_edits(&a, &b) {
        match edit {
            LineEdit::Kept(_) => {}
            LineEdit::Gone(i) => gone.push(i),
            LineEdit::Added(j) => added.push(j),
        }
    }
    (gone, added)
}
