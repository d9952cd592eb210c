//! Errors a shoot owner can fix, each naming the providerConfig field and the offending value.

use std::fmt;

use crate::gardener::api::common::ErrorCode;
use crate::gardener::error_codes::CodedError;

/// The root of every field path, so messages read like the Shoot manifest the owner edits.
pub const ROOT: &str = "providerConfig";

/// A field path such as `providerConfig.shims[1].runtimeClass.handler`.
///
/// Map keys are written `[key]` (as Kubernetes' `field.Path` does) because label keys
/// contain dots and slashes that would make a dotted path ambiguous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    /// `providerConfig`.
    pub fn root() -> Self {
        FieldPath(ROOT.to_owned())
    }

    /// `Shoot`: for the few Shoot fields that decide whether the extension can serve it.
    pub fn shoot() -> Self {
        FieldPath("Shoot".to_owned())
    }

    /// `<self>.<name>`.
    pub fn child(&self, name: &str) -> Self {
        FieldPath(format!("{}.{name}", self.0))
    }

    /// `<self>[<index>]`.
    pub fn index(&self, index: usize) -> Self {
        FieldPath(format!("{}[{index}]", self.0))
    }

    /// `<self>[<key>]`.
    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One problem in the providerConfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Where: starts with [`ROOT`], or with `Shoot` for a Shoot field.
    pub path: String,
    /// What is wrong, starting with the offending value where there is one.
    pub detail: String,
}

impl FieldError {
    /// `<path>: <detail>`.
    pub fn new(path: &FieldPath, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.as_str().to_owned(),
            detail: detail.into(),
        }
    }

    /// `<path>: "<value>" <problem>`, the value quoted so that empty strings and stray spaces
    /// are visible.
    pub fn invalid(path: &FieldPath, value: &str, problem: impl fmt::Display) -> Self {
        Self::new(path, format!("{} {problem}", quote(value)))
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.detail)
    }
}

pub use crate::gardener::decode::quote;

/// Why a providerConfig was rejected (or the Shoot cannot take it): every problem found, not
/// only the first.
///
/// A shoot owner fixes all of them by editing the Shoot, so the error always carries
/// `ERR_CONFIGURATION_PROBLEM`; the actuator stops before touching the applied bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub errors: Vec<FieldError>,
}

impl ConfigError {
    pub fn single(error: FieldError) -> Self {
        ConfigError {
            errors: vec![error],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.errors.iter().all(|e| e.path.starts_with(ROOT)) {
            "invalid providerConfig"
        } else {
            "invalid configuration"
        };
        match self.errors.as_slice() {
            [] => f.write_str(what),
            [one] => write!(f, "{what}: {one}"),
            many => {
                write!(f, "{what} ({} problems):", many.len())?;
                for error in many {
                    write!(f, "\n- {error}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl CodedError for ConfigError {
    fn codes(&self) -> Vec<ErrorCode> {
        vec![ErrorCode::ConfigurationProblem]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_like_the_manifest() {
        let path = FieldPath::root()
            .child("shims")
            .index(1)
            .child("nodeSelector")
            .key("example.com/x");
        assert_eq!(
            path.as_str(),
            "providerConfig.shims[1].nodeSelector[example.com/x]"
        );
    }

    #[test]
    fn display_lists_every_problem_and_the_code_is_configuration_problem() {
        let root = FieldPath::root();
        let err = ConfigError {
            errors: vec![
                FieldError::invalid(&root.child("a"), "x", "is wrong"),
                FieldError::invalid(&root.child("b"), "y", "is wrong too"),
            ],
        };
        let text = err.to_string();
        assert!(text.contains("2 problems"), "{text}");
        assert!(text.contains("providerConfig.a: \"x\" is wrong"), "{text}");
        assert!(
            text.contains("providerConfig.b: \"y\" is wrong too"),
            "{text}"
        );
        assert_eq!(err.codes(), vec![ErrorCode::ConfigurationProblem]);
    }
}
