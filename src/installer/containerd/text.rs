//! Text-level details that toml_edit does not preserve on its own: the spelling of lines an edit
//! does not touch, line endings, a missing final newline and a byte-order mark.

use toml_edit::DocumentMut;

use super::key_path::KeyPath;
use super::toml_value::same_table;

/// At most this many lines may differ between two renderings before [`render_edit`] gives up
/// splicing (the diff's memory grows with the square of it); our edits change a few dozen.
const MAX_CHANGED_LINES: usize = 1_000;

/// Renders `edited`, which is `untouched` (the parse of `original`) after our edits, as
/// `original` with exactly the lines the edits added, changed or removed: every other line keeps
/// its bytes.
///
/// toml_edit alone rewrites more than it was asked to: it renders a table header from the keys
/// its parent tables were first spelled with, so `[plugins."x".y]` after `[plugins.'x']` comes
/// out as `[plugins.'x'.y]`, and the spacing around the dots of a header moves to the headers
/// below it. An operator diffing the file would see lines change that are not ours. So the edit
/// is taken as the line difference between toml_edit's renderings of the untouched and of the
/// edited document, and applied to the original's own lines: the rendering of the untouched
/// document has the original's lines one for one (toml_edit respells within a line, never
/// across lines). Where that does not hold, or the spliced text would not mean what `edited`
/// means, toml_edit's own rendering is used.
pub(crate) fn render_edit(original: &str, untouched: &DocumentMut, edited: &DocumentMut) -> String {
    splice(original, untouched, edited).unwrap_or_else(|| render_like(edited, original))
}

fn splice(original: &str, untouched: &DocumentMut, edited: &DocumentMut) -> Option<String> {
    let body = original.strip_prefix(BOM).unwrap_or(original);
    let old_rendering = untouched.to_string();
    let new_rendering = edited.to_string();
    let old: Vec<&str> = body.split_inclusive('\n').collect();
    let rendered_old: Vec<&str> = old_rendering.split_inclusive('\n').collect();
    if old.len() != rendered_old.len() {
        return None;
    }
    let rendered_new: Vec<&str> = new_rendering.split_inclusive('\n').collect();
    let content = |line: &&str| line.strip_suffix('\n').unwrap_or(line).to_string();
    let ops = diff(
        &rendered_old.iter().map(content).collect::<Vec<_>>(),
        &rendered_new.iter().map(content).collect::<Vec<_>>(),
    )?;

    let ending = if original.contains('\n') && !has_bare_lf(original) {
        "\r\n"
    } else {
        "\n"
    };
    let mut out = String::with_capacity(original.len() + new_rendering.len() / 4);
    if body.len() != original.len() {
        out.push(BOM);
    }
    let push = |out: &mut String, line: &str| {
        // The original's last line may lack its newline; it gets one when a line follows.
        if !out.is_empty() && !out.ends_with('\n') && !out.ends_with(BOM) {
            out.push_str(ending);
        }
        out.push_str(line);
    };
    for op in ops {
        match op {
            Op::Keep(i) => push(&mut out, old[i]),
            Op::Insert(j) => {
                let line = rendered_new[j]
                    .strip_suffix('\n')
                    .unwrap_or(rendered_new[j]);
                let line = line.strip_suffix('\r').unwrap_or(line);
                let line = canonical_header(line).unwrap_or_else(|| line.to_string());
                push(&mut out, &format!("{line}{ending}"));
            }
            Op::Delete(_) => {}
        }
    }
    if !original.is_empty()
        && !original.ends_with('\n')
        && let Some(stripped) = out.strip_suffix(ending)
    {
        out.truncate(stripped.len());
    }
    let spliced: DocumentMut = out.parse().ok()?;
    same_table(spliced.as_table(), edited.as_table()).then_some(out)
}

/// An added table header in one plain spelling: toml_edit writes a new table's header with the
/// keys its parents were first spelled with, so below `[ plugins . 'x' . containerd ]` our
/// table would come out as `[plugins.'x'. containerd.runtimes.spin]`. The path, and so the
/// meaning, stays the same. `None` for a line that is not a single table header.
fn canonical_header(line: &str) -> Option<String> {
    let header = line.trim_start();
    if !header.starts_with('[') || header.starts_with("[[") {
        return None;
    }
    let indent = &line[..line.len() - header.len()];
    let doc: DocumentMut = header.parse().ok()?;
    let mut segments = Vec::new();
    let mut table = doc.as_table();
    loop {
        let mut entries = table.iter();
        let (key, item) = entries.next()?;
        if entries.next().is_some() {
            return None;
        }
        segments.push(key.to_string());
        table = item.as_table()?;
        if !table.is_implicit() {
            break;
        }
    }
    table
        .is_empty()
        .then(|| format!("{indent}[{}]", KeyPath::new(segments)))
}

/// One step of a line diff: keep line `i` of the old text, delete it, or insert line `j` of
/// the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Keep(usize),
    Delete(usize),
    Insert(usize),
}

/// A shortest edit script from `a` to `b` (Myers' O((N+M)D) algorithm after trimming the common
/// head and tail); `None` when more than [`MAX_CHANGED_LINES`] lines differ.
fn diff(a: &[String], b: &[String]) -> Option<Vec<Op>> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let middle = shortest_edit(&a[head..a.len() - tail], &b[head..b.len() - tail])?;
    let mut ops: Vec<Op> = (0..head).map(Op::Keep).collect();
    ops.extend(middle.into_iter().map(|op| match op {
        Op::Keep(i) => Op::Keep(head + i),
        Op::Delete(i) => Op::Delete(head + i),
        Op::Insert(j) => Op::Insert(head + j),
    }));
    ops.extend((a.len() - tail..a.len()).map(Op::Keep));
    Some(ops)
}

fn shortest_edit(a: &[String], b: &[String]) -> Option<Vec<Op>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let limit = (a.len() + b.len()).min(MAX_CHANGED_LINES) as isize;
    let offset = limit + 1;
    let index = |k: isize| (k + offset) as usize;
    let mut v = vec![0isize; 2 * offset as usize + 1];
    // Per step d, the furthest x of diagonals -d-1..=d+1 before the step: what backtracking
    // reads, O(D²) in all.
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let mut found = None;
    'search: for d in 0..=limit {
        trace.push(v[index(-d - 1)..=index(d + 1)].to_vec());
        for k in (-d..=d).step_by(2) {
            let mut x = if k == -d || (k != d && v[index(k - 1)] < v[index(k + 1)]) {
                v[index(k + 1)]
            } else {
                v[index(k - 1)] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[index(k)] = x;
            if x >= n && y >= m {
                found = Some(d);
                break 'search;
            }
        }
    }
    let depth = found?;
    let (mut x, mut y) = (n, m);
    let mut ops = Vec::new();
    for d in (0..=depth).rev() {
        let window = &trace[d as usize];
        let at = |k: isize| window[(k + d + 1) as usize];
        let k = x - y;
        let previous_k = if k == -d || (k != d && at(k - 1) < at(k + 1)) {
            k + 1
        } else {
            k - 1
        };
        let previous_x = if d == 0 { 0 } else { at(previous_k) };
        let previous_y = if d == 0 { 0 } else { previous_x - previous_k };
        while x > previous_x && y > previous_y {
            x -= 1;
            y -= 1;
            ops.push(Op::Keep(x as usize));
        }
        if d > 0 {
            if x == previous_x {
                y -= 1;
                ops.push(Op::Insert(y as usize));
            } else {
                x -= 1;
                ops.push(Op::Delete(x as usize));
            }
        }
    }
    ops.reverse();
    Some(ops)
}

/// Renders an edited document so that it keeps the original's line endings and its (missing)
/// final newline. toml_edit keeps every untouched byte except these two: it ends each line it
/// writes with `\n`, including the last one. Without this, install followed by uninstall would
/// not give back a CRLF file, or a file without a final newline, byte for byte.
pub(crate) fn render_like(doc: &DocumentMut, original: &str) -> String {
    let mut out = doc.to_string();
    // toml_edit drops a leading byte-order mark when it parses; put it back (found by the
    // fuzz target `containerd_config`: install + uninstall lost it).
    if original.starts_with(BOM) && !out.starts_with(BOM) {
        out.insert(0, BOM);
    }
    let crlf = original.contains('\n') && !has_bare_lf(original);
    if crlf {
        out = to_crlf(&out);
    }
    if !original.is_empty() && !original.ends_with('\n') {
        if let Some(stripped) = out.strip_suffix("\r\n").filter(|_| crlf) {
            out.truncate(stripped.len());
        } else if let Some(stripped) = out.strip_suffix('\n') {
            out.truncate(stripped.len());
        }
    }
    out
}

/// U+FEFF at the start of a file: a UTF-8 byte-order mark.
const BOM: char = '\u{feff}';

fn has_bare_lf(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

fn to_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut previous = '\0';
    for c in text.chars() {
        if c == '\n' && previous != '\r' {
            out.push('\r');
        }
        out.push(c);
        previous = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        render_like(&text.parse::<DocumentMut>().unwrap(), text)
    }

    #[test]
    fn keeps_line_endings_and_a_missing_final_newline() {
        for text in [
            "version = 2",
            "version = 2\n",
            "a = 1\r\nb = 2\r\n",
            "a = 1\r\nb = 2",
            "[x]\r\n# c\r\ny = 1",
            "",
            "# only a comment",
        ] {
            assert_eq!(round_trip(text), text, "{text:?}");
        }
    }

    #[test]
    fn keeps_a_byte_order_mark() {
        for text in ["\u{feff}version = 2\n", "\u{feff}[a]\r\nb = 1", "\u{feff}"] {
            assert_eq!(round_trip(text), text, "{text:?}");
        }
        let text = "\u{feff}a = 1\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        doc["b"] = toml_edit::value(2);
        assert_eq!(render_like(&doc, text), "\u{feff}a = 1\nb = 2\n");
    }

    /// Adds `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin]` and a root key.
    fn edit(text: &str) -> (DocumentMut, DocumentMut) {
        let untouched: DocumentMut = text.parse().unwrap();
        let mut edited = untouched.clone();
        let cri = edited["plugins"]["io.containerd.grpc.v1.cri"]
            .as_table_like_mut()
            .unwrap();
        let mut runtimes = toml_edit::Table::new();
        let mut spin = toml_edit::Table::new();
        spin["runtime_type"] = toml_edit::value("io.containerd.spin.v2");
        runtimes.set_implicit(true);
        runtimes.insert("spin", toml_edit::Item::Table(spin));
        let mut containerd = toml_edit::Table::new();
        containerd.set_implicit(true);
        containerd.insert("runtimes", toml_edit::Item::Table(runtimes));
        if !cri.contains_key("containerd") {
            cri.insert("containerd", toml_edit::Item::Table(containerd));
        }
        edited["imports"] = toml_edit::value(toml_edit::Array::from_iter(["/x.toml"]));
        (untouched, edited)
    }

    /// The lines of `spliced` that are not lines of `original` (in order), and whether every
    /// line of `original` is still there, in order.
    fn added_lines(original: &str, spliced: &str) -> (Vec<String>, bool) {
        let mut old = original.trim_start_matches(BOM).lines().peekable();
        let mut added = Vec::new();
        for line in spliced.trim_start_matches(BOM).lines() {
            if old.peek() == Some(&line) {
                old.next();
            } else {
                added.push(line.to_string());
            }
        }
        (added, old.peek().is_none())
    }

    #[test]
    fn foreign_lines_keep_their_spelling() {
        let original = "version = 2\n\n[ plugins . 'io.containerd.grpc.v1.cri' ]\n  sandbox_image = 'pause'\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
        let (untouched, edited) = edit(original);
        // toml_edit alone respells the second header.
        assert!(
            !render_like(&edited, original)
                .contains("[plugins.\"io.containerd.grpc.v1.cri\".registry]")
        );
        let spliced = render_edit(original, &untouched, &edited);
        let (added, kept) = added_lines(original, &spliced);
        assert!(kept, "{spliced}");
        // Our header in its plain spelling, whatever the spelling of its parents.
        let ours = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]";
        assert!(
            added.iter().any(|l| l == ours) && added.len() <= 4,
            "{added:?}\n{spliced}"
        );
        let reparsed: DocumentMut = spliced.parse().unwrap();
        assert!(same_table(reparsed.as_table(), edited.as_table()));
        // Taking the edit out again gives every byte back.
        assert_eq!(render_edit(&spliced, &reparsed, &untouched), original);
    }

    #[test]
    fn splicing_keeps_line_endings_a_missing_final_newline_and_a_byte_order_mark() {
        for original in [
            "\u{feff}[plugins.'io.containerd.grpc.v1.cri']\r\n  sandbox_image = 'pause'",
            "[plugins.'io.containerd.grpc.v1.cri']\r\n  sandbox_image = 'pause'\r\n",
            "\u{feff}[plugins.'io.containerd.grpc.v1.cri']\n  sandbox_image = 'pause'",
        ] {
            let (untouched, edited) = edit(original);
            let spliced = render_edit(original, &untouched, &edited);
            assert_eq!(
                spliced.starts_with(BOM),
                original.starts_with(BOM),
                "{spliced:?}"
            );
            assert_eq!(
                spliced.ends_with('\n'),
                original.ends_with('\n'),
                "{spliced:?}"
            );
            if original.contains("\r\n") {
                assert!(!has_bare_lf(&spliced), "{spliced:?}");
            }
            let (_, kept) = added_lines(original, &spliced);
            assert!(kept, "{spliced:?}");
            let reparsed: DocumentMut = spliced.parse().unwrap();
            assert_eq!(render_edit(&spliced, &reparsed, &untouched), original);
        }
    }

    #[test]
    fn headers_are_spelled_plainly() {
        for (line, expected) in [
            (
                "[ plugins . 'x.y' . containerd ]",
                Some("[plugins.\"x.y\".containerd]"),
            ),
            ("  [a.\"b c\".d]", Some("  [a.\"b c\".d]")),
            ("[\"plugins\"]", Some("[plugins]")),
            ("[[a.b]]", None),
            ("a = 1", None),
            ("[a] b = 1", None),
        ] {
            assert_eq!(canonical_header(line).as_deref(), expected, "{line}");
        }
    }

    #[test]
    fn diff_is_a_shortest_edit_script() {
        let lines = |text: &str| -> Vec<String> { text.chars().map(String::from).collect() };
        let script = diff(&lines("abcabba"), &lines("cbabac")).unwrap();
        let edits = script
            .iter()
            .filter(|op| !matches!(op, Op::Keep(_)))
            .count();
        assert_eq!(edits, 5, "{script:?}");
        // Applying the script to a gives b.
        let (a, b) = (lines("abcabba"), lines("cbabac"));
        let mut out = Vec::new();
        for op in &script {
            match op {
                Op::Keep(i) => out.push(a[*i].clone()),
                Op::Insert(j) => out.push(b[*j].clone()),
                Op::Delete(_) => {}
            }
        }
        assert_eq!(out, b);
        assert_eq!(diff(&a, &a).unwrap().len(), a.len());
        assert!(diff(&[], &[]).unwrap().is_empty());
    }

    #[test]
    fn converts_added_lines_to_crlf() {
        let text = "a = 1\r\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        doc["b"] = toml_edit::value(2);
        assert_eq!(render_like(&doc, text), "a = 1\r\nb = 2\r\n");
    }
}
