//! Indentation of the tables we add, copied from their neighbours.
//!
//! `containerd config default` indents every nested table by two spaces; hand-written files
//! usually do not indent at all. A new runtime table that follows the file's own convention keeps
//! the diff a reviewer sees small and the file readable.

use toml_edit::{RawString, Table};

/// Indentation of one table: before its `[header]` and before its keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TableStyle {
    pub header_indent: String,
    pub key_indent: String,
}

/// Indentation of a runtime table and of its `options` sub-table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RuntimeStyle {
    pub table: TableStyle,
    pub options: TableStyle,
}

impl RuntimeStyle {
    /// The layout of files we generate ourselves (drop-ins): two spaces per nesting level.
    pub fn generated() -> Self {
        RuntimeStyle {
            table: TableStyle {
                header_indent: String::new(),
                key_indent: "  ".into(),
            },
            options: TableStyle {
                header_indent: "  ".into(),
                key_indent: "    ".into(),
            },
        }
    }

    /// Copies the style of the first sibling runtime table with a header, other than `skip`;
    /// no indentation when there is none.
    pub fn infer(runtimes: &Table, skip: &str) -> Self {
        let sibling = runtimes
            .iter()
            .find_map(|(key, item)| match item.as_table() {
                Some(table) if key != skip && !table.is_implicit() && !table.is_dotted() => {
                    Some(table)
                }
                _ => None,
            });
        let Some(sibling) = sibling else {
            return RuntimeStyle::default();
        };
        let table = TableStyle {
            header_indent: indent_of(sibling.decor().prefix()).unwrap_or_default(),
            key_indent: key_indent(sibling).unwrap_or_default(),
        };
        let options = sibling
            .get("options")
            .and_then(|item| item.as_table())
            .filter(|options| !options.is_implicit())
            .map(|options| TableStyle {
                header_indent: indent_of(options.decor().prefix()).unwrap_or_default(),
                key_indent: key_indent(options).unwrap_or_default(),
            })
            .unwrap_or_else(|| nested(&table));
        RuntimeStyle { table, options }
    }
}

/// A child table one level deeper: its header where the parent's keys are, its keys one step
/// further.
fn nested(parent: &TableStyle) -> TableStyle {
    let step = parent
        .key_indent
        .strip_prefix(parent.header_indent.as_str())
        .unwrap_or_default();
    TableStyle {
        header_indent: parent.key_indent.clone(),
        key_indent: format!("{}{}", parent.key_indent, step),
    }
}

/// The indentation of a table's existing keys, if it has any.
pub(crate) fn key_indent(table: &Table) -> Option<String> {
    table.iter().find_map(|(key, item)| {
        if !item.is_value() {
            return None;
        }
        indent_of(table.key(key)?.leaf_decor().prefix())
    })
}

/// The whitespace after the last line break of a decor prefix, when it is only spaces and tabs.
fn indent_of(prefix: Option<&RawString>) -> Option<String> {
    let text = prefix?.as_str()?;
    let tail = text.rsplit('\n').next().unwrap_or(text);
    tail.chars()
        .all(|c| c == ' ' || c == '\t')
        .then(|| tail.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml_edit::DocumentMut;

    fn runtimes(doc: &DocumentMut) -> &Table {
        doc["plugins"]["cri"]["containerd"]["runtimes"]
            .as_table()
            .unwrap()
    }

    #[test]
    fn copies_the_sibling_indentation() {
        let doc: DocumentMut = "\n# c\n    [plugins.cri.containerd.runtimes.runc]\n      runtime_type = \"x\"\n\n      [plugins.cri.containerd.runtimes.runc.options]\n        A = 1\n"
            .parse()
            .unwrap();
        let style = RuntimeStyle::infer(runtimes(&doc), "spin");
        assert_eq!(style.table.header_indent, "    ");
        assert_eq!(style.table.key_indent, "      ");
        assert_eq!(style.options.header_indent, "      ");
        assert_eq!(style.options.key_indent, "        ");
    }

    #[test]
    fn derives_options_indentation_without_a_sibling_options_table() {
        let doc: DocumentMut =
            "  [plugins.cri.containerd.runtimes.runc]\n    runtime_type = \"x\"\n"
                .parse()
                .unwrap();
        let style = RuntimeStyle::infer(runtimes(&doc), "spin");
        assert_eq!(style.options.header_indent, "    ");
        assert_eq!(style.options.key_indent, "      ");
    }

    #[test]
    fn no_sibling_means_no_indentation() {
        let doc: DocumentMut = "[plugins.cri.containerd.runtimes.spin]\n  runtime_type = \"x\"\n"
            .parse()
            .unwrap();
        // The only table is the one being written, so it is skipped.
        assert_eq!(
            RuntimeStyle::infer(runtimes(&doc), "spin"),
            RuntimeStyle::default()
        );
    }
}
