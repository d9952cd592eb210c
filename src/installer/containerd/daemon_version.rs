//! The version of the containerd binary on the node, from `containerd --version`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::config_version::ConfigVersion;
use super::error::ConfigError;

/// A containerd release, as far as config handling depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ContainerdVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl ContainerdVersion {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        ContainerdVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parses `containerd --version` output, e.g.
    /// `containerd github.com/containerd/containerd v1.6.20 <commit>`,
    /// `containerd containerd.io 1.7.27 <commit>`, Debian's `... 1.6.20~ds1 1.6.20~ds1-1+deb12u3`,
    /// k3s' `v1.7.23-k3s2`, or a bare `v2.3.7`. The first token that looks like a version wins;
    /// the package name before it never does because it does not start with a digit.
    pub fn parse(output: &str) -> Result<Self, ConfigError> {
        output
            .split_whitespace()
            .find_map(parse_token)
            .ok_or_else(|| ConfigError::ContainerdVersionUnparsable {
                output: output.trim().to_string(),
            })
    }

    /// Whether imported files are deep-merged (2.0+). containerd 1.x replaces a whole plugin table
    /// from an import, so a drop-in holding only our runtime would wipe the CRI settings.
    pub fn merges_imports(self) -> bool {
        self.major >= 2
    }

    /// The config version `containerd config default` of this release writes; used for a config
    /// file we create from nothing.
    pub fn default_config_version(self) -> ConfigVersion {
        match (self.major, self.minor) {
            (0 | 1, _) => ConfigVersion::V2,
            (2, 0..=2) => ConfigVersion::V3,
            _ => ConfigVersion::V4,
        }
    }

    /// Refuses majors whose config handling this engine does not know.
    pub fn ensure_supported(self) -> Result<(), ConfigError> {
        if matches!(self.major, 1 | 2) {
            Ok(())
        } else {
            Err(ConfigError::UnsupportedContainerd {
                version: self.to_string(),
            })
        }
    }
}

impl fmt::Display for ContainerdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `v1.6.20`, `1.6.20~ds1`, `2.3.7+unknown`, `1.7.23-k3s2` → the numeric part.
fn parse_token(token: &str) -> Option<ContainerdVersion> {
    let token = token.strip_prefix('v').unwrap_or(token);
    let numeric_end = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(token.len());
    let mut parts = token[..numeric_end].split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = match parts.next() {
        Some(patch) => patch.parse().ok()?,
        None => 0,
    };
    Some(ContainerdVersion::new(major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_outputs() {
        let cases = [
            (
                "containerd github.com/containerd/containerd v1.6.20 2806fc1057397dbaeefbea0e4e17bddfbd388f38\n",
                (1, 6, 20),
            ),
            (
                "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da",
                (1, 7, 27),
            ),
            (
                "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
                (1, 6, 20),
            ),
            (
                "containerd github.com/containerd/containerd/v2 v2.3.7 ",
                (2, 3, 7),
            ),
            ("v2.3.7", (2, 3, 7)),
            (
                "containerd github.com/k3s-io/containerd v1.7.23-k3s2",
                (1, 7, 23),
            ),
            (
                "containerd github.com/containerd/containerd/v2 2.0.0+unknown",
                (2, 0, 0),
            ),
            ("containerd 2.1", (2, 1, 0)),
        ];
        for (output, (major, minor, patch)) in cases {
            assert_eq!(
                ContainerdVersion::parse(output).unwrap(),
                ContainerdVersion::new(major, minor, patch),
                "{output}"
            );
        }
    }

    #[test]
    fn refuses_output_without_a_version() {
        for output in [
            "",
            "containerd",
            "containerd github.com/containerd/containerd/v2",
            "vX.Y",
        ] {
            let err = ContainerdVersion::parse(output).unwrap_err();
            assert!(
                err.to_string().contains("cannot find a containerd version"),
                "{err}"
            );
        }
    }

    #[test]
    fn config_behaviour_by_release() {
        let v = ContainerdVersion::new;
        assert!(!v(1, 7, 27).merges_imports());
        assert!(v(2, 0, 0).merges_imports());
        assert_eq!(v(1, 6, 20).default_config_version(), ConfigVersion::V2);
        assert_eq!(v(2, 2, 1).default_config_version(), ConfigVersion::V3);
        assert_eq!(v(2, 3, 7).default_config_version(), ConfigVersion::V4);
        assert!(v(1, 6, 0).ensure_supported().is_ok());
        assert!(v(2, 3, 0).ensure_supported().is_ok());
        let err = v(3, 0, 0).ensure_supported().unwrap_err();
        assert!(err.to_string().contains("v3.0.0"), "{err}");
        assert!(v(0, 9, 0).ensure_supported().is_err());
    }
}
