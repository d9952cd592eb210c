//! Decoding the YAML and JSON documents people write, with errors in their terms.
//!
//! serde and serde-saphyr describe a problem in terms of Rust types and of their own options
//! ("expected u32", "data did not match any variant of untagged enum", "set DuplicateKeyPolicy
//! in Options"), which the author of a manifest cannot act on. The functions here decode with
//! the path of the failing field tracked, and turn each problem into one sentence that names
//! the field, what was given and what is allowed:
//!
//! - `spec.type: is required but missing`
//! - `providerConfig.rollout.maxConcurrentRestarts: expected a non-negative integer, got the string "x"`
//! - `providerConfig.shims[0]: key "name" appears twice (again at line 5)`
//!
//! Anything serde reports that is not one of its standard problems (a type's own message) is
//! kept as it is.

use std::fmt::{self, Write as _};

use serde::de::DeserializeOwned;
use serde_json::Value;

/// How a path is written: `<root>.field[index]`, with `[key]` for the keys of the maps in
/// `map_fields`, whose keys (label keys, option names) may contain dots.
#[derive(Clone, Copy, Debug)]
pub struct PathStyle<'a> {
    /// What every path starts with; empty for a whole manifest (`spec.type`).
    pub root: &'a str,
    /// Fields whose values are maps with keys the author chooses.
    pub map_fields: &'a [&'a str],
}

impl PathStyle<'static> {
    /// A Kubernetes manifest, paths from its top (`metadata.labels[example.com/x]`).
    pub const MANIFEST: PathStyle<'static> = PathStyle {
        root: "",
        map_fields: &["labels", "annotations"],
    };
}

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Field(String),
    Index(usize),
}

impl PathStyle<'_> {
    /// `segments` written in this style.
    pub fn format(&self, segments: &[Segment]) -> String {
        let mut out = self.root.to_owned();
        let mut in_map = false;
        for segment in segments {
            let mut next_in_map = false;
            match segment {
                Segment::Index(index) => {
                    let _ = write!(out, "[{index}]");
                }
                Segment::Field(key) if in_map => {
                    let _ = write!(out, "[{key}]");
                }
                Segment::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                    next_in_map = self.map_fields.contains(&name.as_str());
                }
            }
            in_map = next_in_map;
        }
        out
    }
}

/// A problem with a document: where, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field, written in the caller's [`PathStyle`]; empty for the document as a whole.
    pub path: String,
    /// What is wrong, with the given value and what is allowed where they are known.
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.detail)
        } else {
            write!(f, "{}: {}", self.path, self.detail)
        }
    }
}

impl std::error::Error for Problem {}

/// Parses one YAML document into a JSON value. A key given twice is an error, as is a second
/// document.
pub fn yaml_value(text: &str, style: &PathStyle<'_>) -> Result<Value, Problem> {
    yaml_typed(text, style)
}

/// Decodes one YAML document straight into `T`, so that YAML's own typing of plain scalars
/// (`version: 1.0` read as a string where `T` wants one) applies as with `serde_saphyr`.
pub fn yaml_typed<T: DeserializeOwned>(text: &str, style: &PathStyle<'_>) -> Result<T, Problem> {
    let mut failed_at = Vec::new();
    serde_saphyr::with_deserializer_from_str(text, |deserializer| {
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            failed_at = segments(e.path());
            e.into_inner()
        })
    })
    .map_err(|e| yaml_problem(&e, text, failed_at, style))
}

/// Decodes a JSON value into `T`.
pub fn value_typed<T: DeserializeOwned>(
    value: &Value,
    style: &PathStyle<'_>,
) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut at = segments(e.path());
        let given = lookup(value, &at);
        let (field, detail) = serde_message(&e.inner().to_string(), given);
        push_field(&mut at, field);
        Problem {
            path: style.format(&at),
            detail,
        }
    })
}

/// A value as it appears in messages: JSON-quoted and cut to a readable length, so that a
/// megabyte string does not end up in a status or a log line.
pub fn quote(value: &str) -> String {
    const SHOWN: usize = 80;
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(SHOWN).collect();
    let quoted = serde_json::to_string(&head).unwrap_or_else(|_| format!("{head:?}"));
    if chars.next().is_some() {
        format!("{quoted}...")
    } else {
        quoted
    }
}

/// What a JSON value is, for "got ...".
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) if n.is_f64() => format!("the number {n}"),
        Value::Number(n) => format!("the integer {n}"),
        Value::String(s) => format!("the string {}", quote(s)),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn segments(path: &serde_path_to_error::Path) -> Vec<Segment> {
    use serde_path_to_error::Segment as S;
    path.iter()
        .filter_map(|segment| match segment {
            S::Seq { index } => Some(Segment::Index(*index)),
            S::Map { key } => Some(Segment::Field(key.clone())),
            S::Enum { variant } => Some(Segment::Field(variant.clone())),
            // A key that failed before it was read (a duplicate key) has no name yet.
            S::Unknown => None,
        })
        .collect()
}

fn lookup<'v>(value: &'v Value, at: &[Segment]) -> Option<&'v Value> {
    at.iter().try_fold(value, |value, segment| match segment {
        Segment::Field(key) => value.get(key),
        Segment::Index(index) => value.get(index),
    })
}

/// Problems about a field that serde reports at its parent (missing, unknown) name the field
/// itself.
fn push_field(at: &mut Vec<Segment>, field: Option<String>) {
    if let Some(field) = field {
        let named = matches!(at.last(), Some(Segment::Field(last)) if *last == field);
        if !named {
            at.push(Segment::Field(field));
        }
    }
}

// Long: one match arm per error variant of serde-saphyr, each a line or two; split up, the
// arms would only move apart from the variants they translate.
fn yaml_problem(
    err: &serde_saphyr::Error,
    text: &str,
    mut at: Vec<Segment>,
    style: &PathStyle<'_>,
) -> Problem {
    use serde_saphyr::Error as E;
    let err = innermost(err);
    let line = err.location().map(|l| l.line()).filter(|line| *line > 0);
    let with_line = |detail: String| match line {
        Some(line) => format!("{detail} (line {line})"),
        None => detail,
    };
    let detail = match err {
        E::DuplicateMappingKey { key, .. } => {
            let key = key
                .as_deref()
                .map_or_else(|| "a key".to_owned(), |k| format!("key {}", quote(k)));
            match line {
                Some(line) => format!("{key} appears twice (again at line {line})"),
                None => format!("{key} appears twice"),
            }
        }
        E::MultipleDocuments { .. } => {
            at.clear();
            match line {
                Some(line) => format!(
                    "holds more than one YAML document (another one at line {line}); give exactly one"
                ),
                None => "holds more than one YAML document; give exactly one".to_owned(),
            }
        }
        E::SerdeUnknownField {
            field, expected, ..
        } => {
            push_field(&mut at, Some(field.clone()));
            with_line(unknown_field(field, expected))
        }
        E::SerdeMissingField { field, .. } => {
            push_field(&mut at, Some((*field).to_owned()));
            with_line("is required but missing".to_owned())
        }
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        }
        | E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => {
            let got = given(unexpected);
            let mut detail = format!("expected {}, got {got}", allowed(expected));
            if got.starts_with("the boolean") && allowed(expected) == "a string" {
                detail.push_str(BOOLEAN_WORDS);
            }
            with_line(detail)
        }
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => with_line(unknown_variant(variant, expected)),
        E::SerdeInvalidLength { len, expected, .. } => {
            with_line(format!("expected {}, got {len} entries", allowed(expected)))
        }
        E::InvalidScalar { ty, location } => with_line(format!(
            "expected {}, got {}",
            allowed(ty),
            scalar_text(text, location)
        )),
        E::NullIntoString { .. } => with_line("expected a string, got null".to_owned()),
        E::Unexpected { expected, .. } => match *expected {
            "string scalar" | "scalar" | "string" | "an integer" | "value" => {
                with_line("expected a single value, got a list or an object".to_owned())
            }
            "sequence start" | "seq" => with_line("expected a list".to_owned()),
            "mapping start" | "map" | "empty mapping start" => {
                with_line("expected an object".to_owned())
            }
            _ => syntax(err),
        },
        E::Message { msg, .. } => {
            let (field, detail) = serde_message(msg, None);
            push_field(&mut at, field);
            with_line(detail)
        }
        other => syntax(other),
    };
    Problem {
        path: style.format(&at),
        detail,
    }
}

/// The scalar as written, for "got ...".
fn scalar_text(text: &str, location: &serde_saphyr::Location) -> String {
    let span = location.span();
    let written = span
        .byte_offset()
        .zip(span.byte_len())
        .and_then(|(offset, len)| {
            let start = usize::try_from(offset).ok()?;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            text.get(start..end)
        })
        .filter(|s| !s.is_empty());
    match written {
        Some(s) if s.starts_with(['"', '\'']) => s.to_owned(),
        Some(s) => quote(s),
        None => "a value of another type".to_owned(),
    }
}

/// Syntax errors: the parser's own sentence, which describes the YAML and ends with the
/// position.
fn syntax(err: &serde_saphyr::Error) -> String {
    let options = serde_saphyr::render_options! {
        formatter: &serde_saphyr::UserMessageFormatter,
        snippets: serde_saphyr::SnippetMode::Off,
    };
    format!("invalid YAML: {}", err.render_with_options(options))
}

/// The error behind snippet and alias wrappers, which carry only context.
fn innermost(err: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match err.without_snippet() {
        serde_saphyr::Error::AliasError { error, .. } => innermost(error),
        other => other,
    }
}

/// Reads serde's standard messages (`serde::de::Error`'s provided methods, whose wording is
/// fixed): the field to add to the path, if the message names one, and our sentence.
fn serde_message(message: &str, given_value: Option<&Value>) -> (Option<String>, String) {
    let message = strip_position(message);
    let quoted_then_rest = |rest: &str| -> Option<(String, String)> {
        let (name, rest) = rest.split_once('`')?;
        Some((name.to_owned(), rest.trim_start_matches(", ").to_owned()))
    };
    if let Some((field, _)) = message
        .strip_prefix("missing field `")
        .and_then(quoted_then_rest)
    {
        return (Some(field), "is required but missing".to_owned());
    }
    if let Some((field, rest)) = message
        .strip_prefix("unknown field `")
        .and_then(quoted_then_rest)
    {
        let detail = unknown_field(&field, &backticked(&rest));
        return (Some(field), detail);
    }
    if let Some((field, _)) = message
        .strip_prefix("duplicate field `")
        .and_then(quoted_then_rest)
    {
        return (Some(field), "appears twice".to_owned());
    }
    if let Some((variant, rest)) = message
        .strip_prefix("unknown variant `")
        .and_then(quoted_then_rest)
    {
        return (None, unknown_variant(&variant, &backticked(&rest)));
    }
    let type_or_value = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    if let Some((unexpected, expected)) = type_or_value.and_then(|r| r.rsplit_once(", expected ")) {
        let got = given_value.map_or_else(|| given(unexpected), describe);
        let mut detail = format!("expected {}, got {got}", allowed(expected));
        if got.starts_with("the boolean") && allowed(expected) == "a string" {
            detail.push_str(BOOLEAN_WORDS);
        }
        return (None, detail);
    }
    if let Some((len, expected)) = message
        .strip_prefix("invalid length ")
        .and_then(|r| r.split_once(", expected "))
    {
        return (
            None,
            format!("expected {}, got {len} entries", allowed(expected)),
        );
    }
    if message.starts_with("data did not match any variant of untagged enum") {
        let got = given_value.map_or_else(|| "the value".to_owned(), describe);
        return (None, format!("{got} is not one of the forms allowed here"));
    }
    (None, message.to_owned())
}

/// Why a string field may receive a boolean: YAML 1.1, which Kubernetes' tools and
/// serde-saphyr follow, reads these words unquoted as booleans.
const BOOLEAN_WORDS: &str =
    " (quote it if it is text: YAML reads true, false, yes, no, on, off, y and n as booleans)";

/// serde_json adds the position when it parses text; our paths say where.
fn strip_position(message: &str) -> &str {
    match message.rsplit_once(" at line ") {
        Some((head, tail))
            if tail
                .split_once(" column ")
                .is_some_and(|(l, c)| is_number(l) && is_number(c)) =>
        {
            head
        }
        _ => message,
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
}

/// The names serde lists as "`a`, `b`".
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn unknown_field<S: AsRef<str>>(field: &str, allowed: &[S]) -> String {
    if allowed.is_empty() {
        format!(
            "unknown field {}; this object takes no fields",
            quote(field)
        )
    } else {
        format!("unknown field {}; allowed: {}", quote(field), join(allowed))
    }
}

fn unknown_variant<S: AsRef<str>>(variant: &str, allowed: &[S]) -> String {
    format!(
        "{} is not allowed; allowed: {}",
        quote(variant),
        join(allowed)
    )
}

fn join<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ")
}

/// serde's description of what a type accepts (its `expecting`), in words.
fn allowed(expected: &str) -> String {
    let words = match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "f32" | "f64" | "floating point" => "a number",
        "a boolean" | "boolean" | "bool" => "true or false",
        "a string" | "a borrowed string" | "string" | "a character" | "char" => "a string",
        "a sequence" => "a list",
        "a map" => "an object",
        "Quantity" => "a quantity such as 250m, 1 or 160Mi",
        "IntOrString" => "an integer or a string",
        "Time" | "a valid RFC 3339 timestamp" => "an RFC 3339 time such as 2025-01-01T00:00:00Z",
        "any valid JSON value" | "a JSON value" => "a value",
        other if other.starts_with("struct ") || other.starts_with("map ") => "an object",
        other if other.starts_with("tuple") || other.starts_with("sequence") => "a list",
        other if other.starts_with("enum ") => "one of the allowed values",
        other => other,
    };
    words.to_owned()
}

/// serde's description of a given value (`serde::de::Unexpected`), in words.
fn given(unexpected: &str) -> String {
    let inner = |rest: &str| rest.trim_end_matches('`').to_owned();
    if let Some(rest) = unexpected.strip_prefix("boolean `") {
        format!("the boolean {}", inner(rest))
    } else if let Some(rest) = unexpected.strip_prefix("integer `") {
        format!("the integer {}", inner(rest))
    } else if let Some(rest) = unexpected.strip_prefix("floating point `") {
        format!("the number {}", inner(rest))
    } else if let Some(rest) = unexpected.strip_prefix("character `") {
        format!("the string {}", quote(&inner(rest)))
    } else if let Some(rest) = unexpected.strip_prefix("string ") {
        format!("the string {rest}")
    } else {
        match unexpected {
            "sequence" => "a list".to_owned(),
            "map" => "an object".to_owned(),
            "unit value" | "Option value" | "null" => "null".to_owned(),
            other => other.to_owned(),
        }
    }
}

/// Phrases of serde and serde-saphyr that tell the author of a file nothing they can act on;
/// no message of ours may carry them.
#[cfg(test)]
const LIBRARY_WORDING: &[&str] = &[
    "untagged enum",
    "DuplicateKeyPolicy",
    "Options",
    "from_str_multiple",
    "invalid type:",
    "invalid value:",
    "unknown field `",
    "unknown variant `",
    "missing field `",
    "expected u32",
    "expected i64",
    "expected struct",
    "expected Quantity",
    "expected IntOrString",
    "struct ",
    "sequence",
    "-->",
];

/// Fails when `message` carries library wording (the tests of every decoder use it).
#[cfg(test)]
pub(crate) fn assert_plain(message: &str) {
    for phrase in LIBRARY_WORDING {
        assert!(
            !message.contains(phrase),
            "library wording {phrase:?} in: {message}"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        #[serde(default)]
        count: Option<u32>,
        #[serde(default)]
        items: Vec<Item>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        #[serde(default)]
        mode: Option<Mode>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        size: i64,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }

    const STYLE: PathStyle<'static> = PathStyle {
        root: "doc",
        map_fields: &["labels"],
    };

    fn from_value(value: Value) -> String {
        let problem = value_typed::<Doc>(&value, &STYLE).unwrap_err().to_string();
        assert_plain(&problem);
        problem
    }

    fn from_yaml(text: &str) -> String {
        let problem = yaml_typed::<Doc>(text, &STYLE).unwrap_err().to_string();
        assert_plain(&problem);
        problem
    }

    #[test]
    fn paths_write_map_keys_in_brackets() {
        let at = [
            Segment::Field("labels".into()),
            Segment::Field("example.com/x".into()),
        ];
        assert_eq!(STYLE.format(&at), "doc.labels[example.com/x]");
        let at = [
            Segment::Field("items".into()),
            Segment::Index(2),
            Segment::Field("size".into()),
        ];
        assert_eq!(STYLE.format(&at), "doc.items[2].size");
        assert_eq!(PathStyle::MANIFEST.format(&at), "items[2].size");
        assert_eq!(PathStyle::MANIFEST.format(&[]), "");
    }

    #[test]
    fn type_errors_name_the_field_the_given_value_and_what_is_allowed() {
        assert_eq!(
            from_value(json!({"name": "a", "count": "x"})),
            "doc.count: expected a non-negative integer, got the string \"x\""
        );
        assert_eq!(
            from_value(json!({"name": "a", "count": -1})),
            "doc.count: expected a non-negative integer, got the integer -1"
        );
        assert_eq!(
            from_value(json!({"name": "a", "items": [{"size": 1.5}]})),
            "doc.items[0].size: expected an integer, got the number 1.5"
        );
        assert_eq!(
            from_value(json!({"name": "a", "items": {"size": 1}})),
            "doc.items: expected a list, got an object"
        );
        assert_eq!(
            from_value(json!({"name": "a", "labels": {"example.com/x": true}})),
            format!(
                "doc.labels[example.com/x]: expected a string, got the boolean true{BOOLEAN_WORDS}"
            )
        );
        assert_eq!(
            from_yaml("name: a\ncount: [1]\n"),
            "doc.count: expected a single value, got a list or an object (line 2)"
        );
        assert_eq!(
            from_yaml("name: a\nitems:\n  - size: x\n"),
            "doc.items[0].size: expected an integer, got \"x\" (line 3)"
        );
    }

    #[test]
    fn unknown_and_missing_fields_and_values_list_what_is_allowed() {
        assert_eq!(
            from_value(json!({"name": "a", "cuont": 1})),
            "doc.cuont: unknown field \"cuont\"; allowed: name, count, items, labels, mode"
        );
        assert_eq!(
            from_value(json!({"count": 1})),
            "doc.name: is required but missing"
        );
        assert_eq!(
            from_value(json!({"name": "a", "items": [{}]})),
            "doc.items[0].size: is required but missing"
        );
        assert_eq!(
            from_value(json!({"name": "a", "mode": "Medium"})),
            "doc.mode: \"Medium\" is not allowed; allowed: Fast, Slow"
        );
        assert_eq!(
            from_yaml("name: a\nitems:\n  - size: 1\n    colour: red\n"),
            "doc.items[0].colour: unknown field \"colour\"; allowed: size (line 4)"
        );
        assert_eq!(
            from_yaml("count: 1\n"),
            "doc.name: is required but missing (line 1)"
        );
        assert_eq!(
            from_yaml("name: a\nmode: Medium\n"),
            "doc.mode: \"Medium\" is not allowed; allowed: Fast, Slow (line 2)"
        );
    }

    #[test]
    fn a_key_given_twice_is_named_with_its_line() {
        assert_eq!(
            from_yaml("name: a\nitems:\n  - size: 1\n    size: 2\n"),
            "doc.items[0]: key \"size\" appears twice (again at line 4)"
        );
        let problem = yaml_value("a: 1\na: 2\n", &PathStyle::MANIFEST).unwrap_err();
        assert_eq!(
            problem.to_string(),
            "key \"a\" appears twice (again at line 2)"
        );
        assert_eq!(problem.path, "");
    }

    #[test]
    fn syntax_errors_and_second_documents_say_where() {
        let problem = yaml_value("a: [1, 2\n", &PathStyle::MANIFEST)
            .unwrap_err()
            .to_string();
        assert_plain(&problem);
        assert!(problem.starts_with("a: invalid YAML: "), "{problem}");
        assert!(problem.contains("line 1"), "{problem}");

        let problem = yaml_value("a: 1\n---\nb: 2\n", &STYLE).unwrap_err();
        assert_plain(&problem.to_string());
        assert_eq!(
            problem.to_string(),
            "doc: holds more than one YAML document (another one at line 3); give exactly one"
        );
    }

    #[test]
    fn the_untagged_enum_message_is_replaced_by_the_given_value() {
        #[derive(Debug, Deserialize)]
        #[serde(untagged)]
        #[allow(dead_code)]
        enum Either {
            Number(i64),
            Text(String),
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Holder {
            either: Either,
        }
        let problem = value_typed::<Holder>(&json!({"either": [1]}), &STYLE)
            .unwrap_err()
            .to_string();
        assert_plain(&problem);
        assert_eq!(
            problem,
            "doc.either: a list is not one of the forms allowed here"
        );
    }

    #[test]
    fn messages_of_a_types_own_are_kept() {
        assert_eq!(
            serde_message("must be positive", None),
            (None, "must be positive".to_owned())
        );
        assert_eq!(
            strip_position("missing field `x` at line 3 column 7"),
            "missing field `x`"
        );
        assert_eq!(strip_position("at line 3 column x"), "at line 3 column x");
    }

    #[test]
    fn long_values_are_cut() {
        let quoted = quote(&"a".repeat(1000));
        assert!(quoted.len() < 100, "{quoted}");
        assert!(quoted.ends_with("..."));
    }
}
