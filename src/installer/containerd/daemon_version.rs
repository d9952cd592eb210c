//! The version of the containerd binary on the node, from `containerd --version`, and every
//! rule that depends on it. The release numbers are private: the engine asks a
//! [`ContainerdVersion`] what its release does (merge imports, pass shim options, ...) and never
//! compares numbers itself, so supporting a new release means reading and extending this file
//! (docs/development.md, "Supporting a new containerd release or config version").

use std::fmt;

use serde::{Deserialize, Serialize};

use super::config_version::ConfigVersion;
use super::error::ConfigError;

/// A containerd release, as far as config handling depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ContainerdVersion {
    major: u64,
    minor: u64,
    patch: u64,
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

    /// The major release, for naming and for tests that pick fixtures by it. Decisions go through
    /// the capabilities below; the repository checks keep the library from comparing it.
    pub fn major(self) -> u64 {
        self.major
    }

    fn at_least(self, major: u64, minor: u64, patch: u64) -> bool {
        (self.major, self.minor, self.patch) >= (major, minor, patch)
    }

    /// Whether imported files are deep-merged (2.0+). containerd 1.x replaces a whole plugin table
    /// from an import, so a drop-in holding only our runtime would wipe the CRI settings.
    pub fn merges_imports(self) -> bool {
        self.at_least(2, 0, 0)
    }

    /// Whether the runtimes containerd provides implicitly (`runc`) survive a file that defines
    /// another runtime (2.0+ merges runtimes into its defaults). containerd 1.x fills in `runc`
    /// only while no file defines a `runtimes` table, so an edit must write them out.
    pub fn keeps_implicit_runtimes(self) -> bool {
        self.at_least(2, 0, 0)
    }

    /// Whether a glob in `imports` is resolved against the importing file's directory (2.0+);
    /// containerd 1.x resolves a relative glob against `/`.
    pub fn resolves_import_globs_from_the_file(self) -> bool {
        self.at_least(2, 0, 0)
    }

    /// The layout `containerd config dump` prints, whatever version the input files declared:
    /// 1.x prints version 2, 2.x its split CRI plugins (version 3's paths).
    pub fn dump_layout(self) -> ConfigVersion {
        if self.at_least(2, 0, 0) {
            ConfigVersion::V3
        } else {
            ConfigVersion::V2
        }
    }

    /// Whether the CRI plugin honours a runtime's `runtime_path` (1.6.21+). Before, it is
    /// ignored and the shim's path must be the `runtime_type` itself.
    pub fn honours_runtime_path(self) -> bool {
        self.at_least(1, 6, 21)
    }

    /// Whether a shim other than runc receives its whole `options` table (1.7+). containerd 1.6
    /// decodes the table of such a shim into `TypeUrl` and `ConfigPath` only and drops the rest.
    pub fn passes_all_shim_options(self) -> bool {
        self.at_least(1, 7, 0)
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

    /// Every capability at the releases where it changes, on both sides of each boundary: the
    /// one table to extend for a new release.
    #[test]
    fn capabilities_by_release() {
        use ConfigVersion::{V2, V3, V4};
        // release, merges imports, keeps implicit runtimes, globs from the file, dump layout,
        // honours runtime_path, passes all shim options, default config version
        type Row = (
            (u64, u64, u64),
            bool,
            bool,
            bool,
            ConfigVersion,
            bool,
            bool,
            ConfigVersion,
        );
        #[rustfmt::skip]
        let table: &[Row] = &[
            ((1, 6, 0),  false, false, false, V2, false, false, V2),
            ((1, 6, 20), false, false, false, V2, false, false, V2),
            ((1, 6, 21), false, false, false, V2, true,  false, V2),
            ((1, 7, 0),  false, false, false, V2, true,  true,  V2),
            ((1, 7, 27), false, false, false, V2, true,  true,  V2),
            ((2, 0, 0),  true,  true,  true,  V3, true,  true,  V3),
            ((2, 2, 9),  true,  true,  true,  V3, true,  true,  V3),
            ((2, 3, 0),  true,  true,  true,  V3, true,  true,  V4),
            ((2, 3, 7),  true,  true,  true,  V3, true,  true,  V4),
        ];
        for &((major, minor, patch), merges, keeps, globs, dump, path, options, default) in table {
            let c = ContainerdVersion::new(major, minor, patch);
            assert!(c.ensure_supported().is_ok(), "{c}");
            assert_eq!(c.merges_imports(), merges, "{c}: merges_imports");
            assert_eq!(
                c.keeps_implicit_runtimes(),
                keeps,
                "{c}: keeps_implicit_runtimes"
            );
            assert_eq!(
                c.resolves_import_globs_from_the_file(),
                globs,
                "{c}: resolves_import_globs_from_the_file"
            );
            assert_eq!(c.dump_layout(), dump, "{c}: dump_layout");
            assert_eq!(c.honours_runtime_path(), path, "{c}: honours_runtime_path");
            assert_eq!(
                c.passes_all_shim_options(),
                options,
                "{c}: passes_all_shim_options"
            );
            assert_eq!(
                c.default_config_version(),
                default,
                "{c}: default_config_version"
            );
        }
        let err = ContainerdVersion::new(3, 0, 0)
            .ensure_supported()
            .unwrap_err();
        assert!(err.to_string().contains("v3.0.0"), "{err}");
        assert!(ContainerdVersion::new(0, 9, 0).ensure_supported().is_err());
    }
}
