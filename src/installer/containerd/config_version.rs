//! The config file's schema version and where the CRI runtime table lives in each.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use toml_edit::{DocumentMut, Item, Value};

use super::error::ConfigError;
use super::key_path::KeyPath;

/// The `version` a containerd config file declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConfigVersion {
    /// No header (or `version = 1`): containerd ≤ 1.x short plugin names, deprecated.
    V1,
    /// containerd 1.6 and 1.7.
    V2,
    /// containerd 2.0 to 2.2: the CRI plugin is split, runtimes live in `io.containerd.cri.v1.runtime`.
    V3,
    /// containerd 2.3 and later: server settings moved into plugins; runtimes as in v3.
    V4,
}

const CRI_V1: &str = "cri";
const CRI_V2: &str = "io.containerd.grpc.v1.cri";
const CRI_RUNTIME: &str = "io.containerd.cri.v1.runtime";

impl ConfigVersion {
    /// Reads `version` from a parsed file. Absent means v1 (containerd's own rule); anything that
    /// is not the integer 1 to 4 is refused rather than guessed, because writing our table at the
    /// wrong plugin path makes containerd ignore it silently.
    pub fn detect(path: &Path, doc: &DocumentMut) -> Result<Self, ConfigError> {
        let Some(item) = doc.as_table().get("version") else {
            return Ok(ConfigVersion::V1);
        };
        let unsupported = |value: String| ConfigError::UnsupportedVersion {
            path: path.to_path_buf(),
            value,
        };
        match item {
            Item::Value(Value::Integer(number)) => match *number.value() {
                1 => Ok(ConfigVersion::V1),
                2 => Ok(ConfigVersion::V2),
                3 => Ok(ConfigVersion::V3),
                4 => Ok(ConfigVersion::V4),
                _ => Err(unsupported(number.value().to_string())),
            },
            Item::Value(value) => Err(unsupported(value.to_string().trim().to_string())),
            other => Err(unsupported(format!("<{}>", other.type_name()))),
        }
    }

    /// The number written in the `version` key.
    pub fn number(self) -> i64 {
        match self {
            ConfigVersion::V1 => 1,
            ConfigVersion::V2 => 2,
            ConfigVersion::V3 => 3,
            ConfigVersion::V4 => 4,
        }
    }

    /// The CRI plugin id that holds `containerd.runtimes` in a file of this version.
    pub fn runtime_plugin(self) -> &'static str {
        match self {
            ConfigVersion::V1 => CRI_V1,
            ConfigVersion::V2 => CRI_V2,
            ConfigVersion::V3 | ConfigVersion::V4 => CRI_RUNTIME,
        }
    }

    /// The table whose children are the runtime handlers: `plugins.<id>.containerd.runtimes`.
    pub fn runtimes_table(self) -> KeyPath {
        KeyPath::new(["plugins", self.runtime_plugin(), "containerd", "runtimes"])
    }

    /// The handler's table, `plugins.<id>.containerd.runtimes.<handler>`.
    pub fn runtime_table(self, handler: &str) -> KeyPath {
        self.runtimes_table().join([handler])
    }
}

impl fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// Parses TOML, naming the file in the error.
pub(crate) fn parse_toml(path: &Path, text: &str) -> Result<DocumentMut, ConfigError> {
    text.parse::<DocumentMut>()
        .map_err(|err| ConfigError::Parse {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(text: &str) -> Result<ConfigVersion, ConfigError> {
        let path = Path::new("/etc/containerd/config.toml");
        ConfigVersion::detect(path, &parse_toml(path, text)?)
    }

    #[test]
    fn reads_the_integer_version() {
        assert_eq!(detect("").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("[plugins.cri]\n").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("version = 1\n").unwrap(), ConfigVersion::V1);
        assert_eq!(detect("version = 2\n").unwrap(), ConfigVersion::V2);
        assert_eq!(
            detect("version = 3 # comment\n").unwrap(),
            ConfigVersion::V3
        );
        assert_eq!(detect("version = 4\n").unwrap(), ConfigVersion::V4);
        assert_eq!(detect("version = 0x3\n").unwrap(), ConfigVersion::V3);
    }

    #[test]
    fn does_not_detect_by_substring() {
        // A comment or a string that mentions a version must not count.
        let text = "# version = 3\n[plugins.x]\n  note = \"version = 3\"\n";
        assert_eq!(detect(text).unwrap(), ConfigVersion::V1);
        // `version` inside a table is not the file's version.
        assert_eq!(detect("[x]\nversion = 3\n").unwrap(), ConfigVersion::V1);
    }

    #[test]
    fn refuses_everything_else_naming_file_and_value() {
        for (text, value) in [
            ("version = \"2\"\n", "\"2\""),
            ("version = 5\n", "5"),
            ("version = 0\n", "0"),
            ("version = -1\n", "-1"),
            ("version = 2.0\n", "2.0"),
            ("version = true\n", "true"),
            ("version = [2]\n", "[2]"),
            ("[version]\n", "<table>"),
        ] {
            let err = detect(text).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("/etc/containerd/config.toml"),
                "{text}: {message}"
            );
            assert!(
                message.contains(&format!("version = {value}`")),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn corrupt_toml_names_the_file_and_position() {
        let err = detect("version = 2\n[plugins\n").unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("/etc/containerd/config.toml is not valid TOML"),
            "{message}"
        );
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn runtime_paths_per_version() {
        assert_eq!(
            ConfigVersion::V1.runtime_table("spin").to_string(),
            "plugins.cri.containerd.runtimes.spin"
        );
        assert_eq!(
            ConfigVersion::V2.runtime_table("spin").to_string(),
            r#"plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin"#
        );
        for version in [ConfigVersion::V3, ConfigVersion::V4] {
            assert_eq!(
                version.runtime_table("spin").to_string(),
                r#"plugins."io.containerd.cri.v1.runtime".containerd.runtimes.spin"#
            );
        }
    }
}
