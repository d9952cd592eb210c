//! Strict decoding of `Extension.spec.providerConfig`.
//!
//! The value is checked against size bounds before anything expensive happens to it: at most
//! [`MAX_BYTES`] serialised, [`MAX_DEPTH`] levels of nesting, [`MAX_STRING_CHARS`] per
//! string, [`MAX_ARRAY_ITEMS`] per list and [`MAX_OBJECT_KEYS`] per object. Then `apiVersion`
//! and `kind` are checked, so a config for another API version gets a clear message instead of
//! a list of unknown fields, and finally the typed structs are deserialised with unknown fields
//! rejected. A decoding error stops at the first problem and names its field path, the given
//! value and what the field takes.
//!
//! An absent (or `null`) providerConfig means "no shims": the extension may be enabled for
//! every shoot by the operator (`autoEnable`), and such shoots must reconcile cleanly.

use std::io::{self, Write};

use serde_json::Value;

use super::error::{ConfigError, FieldError, FieldPath, quote};
use super::types::{API_VERSION, ContainerdShimConfig, KIND};
use crate::gardener::decode::{PathStyle, Problem, value_typed, yaml_value};

/// Largest accepted providerConfig, serialised as JSON.
pub const MAX_BYTES: usize = 64 * 1024;
/// Deepest accepted nesting of objects and lists.
pub const MAX_DEPTH: usize = 12;
/// Longest accepted string (config-file content is not part of the providerConfig).
pub const MAX_STRING_CHARS: usize = 4096;
/// Longest accepted list.
pub const MAX_ARRAY_ITEMS: usize = 64;
/// Most keys in one object.
pub const MAX_OBJECT_KEYS: usize = 64;

/// Decodes a providerConfig; `None`/`null` is the empty configuration.
pub fn decode(provider_config: Option<&Value>) -> Result<ContainerdShimConfig, ConfigError> {
    let value = match provider_config {
        None | Some(Value::Null) => return Ok(ContainerdShimConfig::empty()),
        Some(value) => value,
    };
    let root = FieldPath::root();
    check_bounds(value, &root, 0, false).map_err(ConfigError::single)?;
    check_size(value).map_err(ConfigError::single)?;
    let Value::Object(map) = value else {
        return Err(ConfigError::single(FieldError::new(
            &root,
            format!(
                "expected an object with apiVersion {API_VERSION:?} and kind {KIND:?}, got {}",
                kind_of(value)
            ),
        )));
    };
    let mut errors = Vec::new();
    for (field, expected) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        match map.get(field) {
            Some(Value::String(actual)) if actual == expected => {}
            Some(Value::String(actual)) => errors.push(FieldError::invalid(
                &root.child(field),
                actual,
                format!("is not supported; use {expected:?}"),
            )),
            Some(other) => errors.push(FieldError::new(
                &root.child(field),
                format!("expected the string {expected:?}, got {}", kind_of(other)),
            )),
            None => errors.push(FieldError::new(
                &root.child(field),
                format!("is missing; set it to {expected:?}"),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError { errors });
    }
    let config: ContainerdShimConfig =
        value_typed(value, &PATHS).map_err(|p| ConfigError::single(field_error(p)))?;
    // serde fills a struct from a list too, by position (`"runtimeClass": ["x"]` would set the
    // first field): a list where the API has an object is an error, not a guess.
    let decoded = serde_json::to_value(&config).unwrap_or(Value::Null);
    list_for_object(value, &decoded, &root, false).map_err(ConfigError::single)?;
    Ok(config)
}

/// The first place where the input holds a list and the decoded config an object.
fn list_for_object(
    input: &Value,
    decoded: &Value,
    path: &FieldPath,
    in_map: bool,
) -> Result<(), FieldError> {
    match (input, decoded) {
        (Value::Array(_), Value::Object(_)) => Err(FieldError::new(
            path,
            "expected an object, got a list".to_string(),
        )),
        (Value::Array(items), Value::Array(decoded_items)) => {
            for (i, (item, decoded_item)) in items.iter().zip(decoded_items).enumerate() {
                list_for_object(item, decoded_item, &path.index(i), false)?;
            }
            Ok(())
        }
        (Value::Object(map), Value::Object(decoded_map)) => {
            for (key, item) in map {
                let Some(decoded_item) = decoded_map.get(key) else {
                    continue;
                };
                let (child, is_map) = if in_map {
                    (path.key(key), false)
                } else {
                    (path.child(key), MAP_FIELDS.contains(&key.as_str()))
                };
                list_for_object(item, decoded_item, &child, is_map)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The error for a providerConfig that could not be parsed into a value at all (see
/// `ExtensionSpec::provider_config_error`): in practice, nesting deeper than the JSON decoder's
/// recursion limit.
pub fn undecodable(reason: &str) -> ConfigError {
    let detail = if reason.contains("recursion limit") {
        format!(
            "nesting exceeds the limit of {MAX_DEPTH} levels by far; it cannot be decoded ({reason})"
        )
    } else {
        format!("cannot be decoded: {reason}")
    };
    ConfigError::single(FieldError::new(&FieldPath::root(), detail))
}

/// Decodes a providerConfig written as YAML (example files, the offline `render` command).
/// A key given twice is an error here: JSON decoding keeps the last one, as the API server
/// does, but in a file the author can still fix it.
pub fn decode_yaml(text: &str) -> Result<ContainerdShimConfig, ConfigError> {
    let root = FieldPath::root();
    if text.len() > MAX_BYTES {
        return Err(ConfigError::single(FieldError::new(
            &root,
            format!("{} bytes exceed the limit of {MAX_BYTES}", text.len()),
        )));
    }
    let value = yaml_value(text, &PATHS).map_err(|p| ConfigError::single(field_error(p)))?;
    decode(Some(&value))
}

/// The fields of the API whose values are maps with user-chosen keys.
const MAP_FIELDS: &[&str] = &["options", "nodeSelector"];

/// Paths as validation writes them: `providerConfig.shims[1].options[Foo]`.
pub const PATHS: PathStyle<'static> = PathStyle {
    root: super::error::ROOT,
    map_fields: MAP_FIELDS,
};

fn field_error(problem: Problem) -> FieldError {
    FieldError {
        path: problem.path,
        detail: problem.detail,
    }
}

/// Depth, string length, list length and object size, walking no deeper than allowed.
/// `in_map`: `value` is the value of one of [`MAP_FIELDS`], whose keys are the user's.
fn check_bounds(
    value: &Value,
    path: &FieldPath,
    depth: usize,
    in_map: bool,
) -> Result<(), FieldError> {
    if depth > MAX_DEPTH {
        return Err(FieldError::new(
            path,
            format!("nesting exceeds the limit of {MAX_DEPTH} levels"),
        ));
    }
    match value {
        Value::String(s) => {
            let chars = s.chars().count();
            if chars > MAX_STRING_CHARS {
                return Err(FieldError::new(
                    path,
                    format!(
                        "{} has {chars} characters, more than the limit of {MAX_STRING_CHARS}",
                        quote(s)
                    ),
                ));
            }
        }
        Value::Array(items) => {
            if items.len() > MAX_ARRAY_ITEMS {
                return Err(FieldError::new(
                    path,
                    format!(
                        "{} entries exceed the limit of {MAX_ARRAY_ITEMS}",
                        items.len()
                    ),
                ));
            }
            for (i, item) in items.iter().enumerate() {
                check_bounds(item, &path.index(i), depth + 1, false)?;
            }
        }
        Value::Object(map) => {
            if map.len() > MAX_OBJECT_KEYS {
                return Err(FieldError::new(
                    path,
                    format!("{} keys exceed the limit of {MAX_OBJECT_KEYS}", map.len()),
                ));
            }
            for (key, item) in map {
                if key.chars().count() > MAX_STRING_CHARS {
                    return Err(FieldError::new(
                        path,
                        format!("key {} is too long", quote(key)),
                    ));
                }
                let (child, is_map) = if in_map {
                    (path.key(key), false)
                } else {
                    (path.child(key), MAP_FIELDS.contains(&key.as_str()))
                };
                check_bounds(item, &child, depth + 1, is_map)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// Serialised size, stopping as soon as the limit is passed.
fn check_size(value: &Value) -> Result<(), FieldError> {
    struct Budget(usize);
    impl Write for Budget {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(buf.len())
                .ok_or(io::ErrorKind::FileTooLarge)?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Budget(MAX_BYTES), value).map_err(|_| {
        FieldError::new(
            &FieldPath::root(),
            format!("is larger than the limit of {MAX_BYTES} bytes"),
        )
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::shim::config::types::OptionValue;

    fn header() -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert("apiVersion".into(), API_VERSION.into());
        map.insert("kind".into(), KIND.into());
        map
    }

    fn with(field: &str, value: Value) -> Value {
        let mut map = header();
        map.insert(field.into(), value);
        Value::Object(map)
    }

    fn message(value: Value) -> String {
        decode(Some(&value)).unwrap_err().to_string()
    }

    #[test]
    fn absent_or_null_means_no_shims() {
        assert_eq!(decode(None).unwrap(), ContainerdShimConfig::empty());
        assert_eq!(
            decode(Some(&Value::Null)).unwrap(),
            ContainerdShimConfig::empty()
        );
    }

    #[test]
    fn decodes_a_full_config() {
        let value = with(
            "shims",
            json!([{
                "name": "spin",
                "catalog": {"name": "spin", "version": "v0.22.0"},
                "runtimeClass": {"handler": "spin", "overhead": {"podFixed": {"cpu": "100m", "memory": 64}},
                                 "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]},
                "options": {"SystemdCgroup": false, "Level": 3, "Path": "/x"},
                "workerPools": ["a"],
                "nodeSelector": {"example.com/x": "y"},
                "podAnnotations": ["example.com/*"]
            }]),
        );
        let config = decode(Some(&value)).unwrap();
        let shim = &config.shims[0];
        assert_eq!(shim.options["SystemdCgroup"], OptionValue::Bool(false));
        assert_eq!(shim.options["Level"], OptionValue::Int(3));
        assert_eq!(shim.options["Path"], OptionValue::String("/x".into()));
        let overhead = shim
            .runtime_class
            .as_ref()
            .unwrap()
            .overhead
            .as_ref()
            .unwrap();
        assert_eq!(overhead.pod_fixed.memory.as_ref().unwrap().0, "64");
    }

    #[test]
    fn wrong_api_version_and_kind_are_named() {
        let mut map = header();
        map.insert("apiVersion".into(), "example.com/v1".into());
        map.remove("kind");
        let text = message(Value::Object(map));
        assert!(
            text.contains("providerConfig.apiVersion: \"example.com/v1\" is not supported"),
            "{text}"
        );
        assert!(text.contains("providerConfig.kind: is missing"), "{text}");
        let text = message(json!(["not", "an", "object"]));
        assert!(
            text.contains("providerConfig: expected an object"),
            "{text}"
        );
        let text = message(json!({"apiVersion": 1, "kind": KIND}));
        assert!(
            text.contains("providerConfig.apiVersion: expected the string"),
            "{text}"
        );
    }

    fn plain(text: String) -> String {
        crate::gardener::decode::assert_plain(&text);
        text
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_path_and_the_allowed_ones() {
        let text = plain(message(with(
            "shims",
            json!([{"name": "spin", "hanlder": "x"}]),
        )));
        assert!(
            text.ends_with(
                "providerConfig.shims[0].hanlder: unknown field \"hanlder\"; allowed: name, \
                 catalog, custom, runtimeClass, options, workerPools, nodeSelector, podAnnotations"
            ),
            "{text}"
        );
        let text = plain(message(with("extra", json!(1))));
        assert!(
            text.ends_with(
                "providerConfig.extra: unknown field \"extra\"; allowed: apiVersion, kind, shims, rollout, delivery"
            ),
            "{text}"
        );
    }

    #[test]
    fn type_errors_name_the_field_the_given_value_and_what_is_allowed() {
        let shim = |fields: Value| {
            let mut shim = json!({"name": "spin"});
            if let (Some(shim), Value::Object(fields)) = (shim.as_object_mut(), fields) {
                shim.extend(fields);
            }
            with("shims", json!([shim]))
        };
        for (input, expected) in [
            (
                with("rollout", json!({"maxConcurrentRestarts": -1})),
                "providerConfig.rollout.maxConcurrentRestarts: expected a non-negative integer, \
                 got the integer -1",
            ),
            (
                with("rollout", json!({"maxConcurrentRestarts": "x"})),
                "providerConfig.rollout.maxConcurrentRestarts: expected a non-negative integer, \
                 got the string \"x\"",
            ),
            (
                with("rollout", json!({"maxUnavailable": [1]})),
                "providerConfig.rollout.maxUnavailable: expected an integer or a string, got a list",
            ),
            (
                shim(json!({"options": {"A": 1.5}})),
                "providerConfig.shims[0].options[A]: expected true, false, an integer or a string, \
                 got the number 1.5",
            ),
            (
                shim(json!({"options": {"SystemdCgroup": [1]}})),
                "providerConfig.shims[0].options[SystemdCgroup]: expected true, false, an integer \
                 or a string, got a list",
            ),
            (
                shim(json!({"options": {"A": u64::MAX}})),
                "providerConfig.shims[0].options[A]: expected an integer from \
                 -9223372036854775808 to 9223372036854775807, got the integer 18446744073709551615",
            ),
            (
                shim(json!({"catalog": {"name": "spin", "version": 1}})),
                "providerConfig.shims[0].catalog.version: expected a string, got the integer 1",
            ),
            (
                shim(json!({"runtimeClass": {"tolerations": [{"effect": "NoSched"}]}})),
                "providerConfig.shims[0].runtimeClass.tolerations[0].effect: \"NoSched\" is not \
                 allowed; allowed: NoSchedule, PreferNoSchedule, NoExecute",
            ),
            (
                shim(json!({"runtimeClass": {"overhead": {"podFixed": {"cpu": [1]}}}})),
                "providerConfig.shims[0].runtimeClass.overhead.podFixed.cpu: expected a quantity \
                 such as 250m, 1 or 160Mi, got a list",
            ),
            (
                shim(json!({"workerPools": "worker-a"})),
                "providerConfig.shims[0].workerPools: expected a list, got the string \"worker-a\"",
            ),
            (
                shim(json!({"custom": {"runtimeType": "io.containerd.x.v1", "binaries": []}})),
                "providerConfig.shims[0].custom.version: is required but missing",
            ),
            (
                with("shims", json!([{"catalog": {"name": "spin"}}])),
                "providerConfig.shims[0].name: is required but missing",
            ),
        ] {
            let text = plain(message(input));
            assert_eq!(text, format!("invalid providerConfig: {expected}"));
        }
    }
    #[test]
    fn oversized_inputs_are_rejected_before_decoding() {
        let text = message(with("shims", Value::Array(vec![json!({}); 65])));
        assert!(
            text.contains("providerConfig.shims: 65 entries exceed"),
            "{text}"
        );

        let text = message(with("shims", json!([{"name": "x".repeat(5000)}])));
        assert!(text.contains("providerConfig.shims[0].name"), "{text}");
        assert!(text.contains("5000 characters"), "{text}");

        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!([deep]);
        }
        let text = message(with("shims", deep));
        assert!(text.contains("nesting exceeds"), "{text}");

        let many: Vec<Value> = (0..60)
            .map(|i| json!({"name": format!("s{i}"), "podAnnotations": vec!["a".repeat(1000); 2]}))
            .collect();
        let text = message(with("shims", Value::Array(many)));
        assert!(
            text.contains("larger than the limit of 65536 bytes"),
            "{text}"
        );
    }

    #[test]
    fn a_list_where_an_object_belongs_is_rejected() {
        // serde alone would take these, filling the struct by position.
        let text = message(with("shims", json!([{"name": "spin", "runtimeClass": []}])));
        assert!(
            text.contains("providerConfig.shims[0].runtimeClass: expected an object, got a list"),
            "{text}"
        );
        let text = message(with(
            "shims",
            json!([{"name": "spin", "runtimeClass": ["my-handler"]}]),
        ));
        assert!(
            text.contains("providerConfig.shims[0].runtimeClass"),
            "{text}"
        );
        let text = message(with("rollout", json!([3])));
        assert!(
            text.contains("providerConfig.rollout: expected an object"),
            "{text}"
        );
        let text = message(with("shims", json!([["spin"]])));
        assert!(text.contains("providerConfig.shims[0]"), "{text}");
        // Lists where the API has lists stay fine.
        let ok = with(
            "shims",
            json!([{"name": "spin", "workerPools": ["a"], "podAnnotations": ["x/*"]}]),
        );
        assert!(decode(Some(&ok)).is_ok());
    }

    #[test]
    fn bounds_errors_write_map_keys_like_decoding_errors() {
        let text = message(with(
            "shims",
            json!([{"name": "spin", "options": {"SystemdCgroup": "y".repeat(5000)}}]),
        ));
        assert!(
            text.contains("providerConfig.shims[0].options[SystemdCgroup]"),
            "{text}"
        );
        let text = message(with(
            "shims",
            json!([{"name": "spin", "nodeSelector": {"example.com/x": "y".repeat(5000)}}]),
        ));
        assert!(
            text.contains("providerConfig.shims[0].nodeSelector[example.com/x]"),
            "{text}"
        );
    }

    #[test]
    fn an_undecodable_provider_config_is_a_configuration_problem() {
        use crate::gardener::error_codes::CodedError;
        let err = undecodable("recursion limit exceeded at line 1 column 1053");
        let text = err.to_string();
        assert!(
            text.contains("providerConfig: nesting exceeds the limit"),
            "{text}"
        );
        assert_eq!(
            err.codes(),
            vec![crate::gardener::api::common::ErrorCode::ConfigurationProblem]
        );
        assert!(
            undecodable("eof")
                .to_string()
                .contains("cannot be decoded: eof")
        );
    }

    #[test]
    fn yaml_input() {
        let config = decode_yaml(&format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nshims:\n  - name: spin\n"
        ))
        .unwrap();
        assert_eq!(config.shims[0].name, "spin");
        let err = decode_yaml("shims: [").unwrap_err();
        let text = plain(err.to_string());
        assert!(
            text.contains("providerConfig.shims: invalid YAML: unclosed bracket '[' at line 1"),
            "{text}"
        );
        let err = decode_yaml(&"#".repeat(MAX_BYTES + 1)).unwrap_err();
        assert!(err.to_string().contains("exceed the limit"), "{err}");
    }

    #[test]
    fn yaml_keys_given_twice_and_second_documents_are_named_with_their_line() {
        let header = format!("apiVersion: {API_VERSION}\nkind: {KIND}\n");
        let err = decode_yaml(&format!(
            "{header}shims:\n  - name: spin\n    catalog: {{name: spin}}\n    name: wasmtime\n"
        ))
        .unwrap_err();
        assert_eq!(
            crate::gardener::error_codes::CodedError::codes(&err),
            vec![crate::gardener::api::common::ErrorCode::ConfigurationProblem]
        );
        assert_eq!(
            plain(err.to_string()),
            "invalid providerConfig: providerConfig.shims[0]: key \"name\" appears twice (again at line 6)"
        );
        let err = decode_yaml(&format!("{header}shims: []\nshims: []\n")).unwrap_err();
        assert_eq!(
            plain(err.to_string()),
            "invalid providerConfig: providerConfig: key \"shims\" appears twice (again at line 4)"
        );
        let err = decode_yaml(&format!("{header}---\n{header}")).unwrap_err();
        assert_eq!(
            plain(err.to_string()),
            "invalid providerConfig: providerConfig: holds more than one YAML document (another \
             one at line 4); give exactly one"
        );
        let err = decode_yaml(&format!(
            "{header}shims:\n  - name: spin\n    options: {{A: [1]}}\n"
        ))
        .unwrap_err();
        assert_eq!(
            plain(err.to_string()),
            "invalid providerConfig: providerConfig.shims[0].options[A]: expected true, false, an \
             integer or a string, got a list"
        );
    }
}
