//! Which file containerd reads on this host, and how we may change it.
//!
//! The config is `/etc/containerd/config.toml`, or the path the operator configured
//! (`--containerd-config`). Distribution layouts that render containerd's config from a
//! template or merge drop-ins themselves (k3s, rke2, k0s, microk8s) are out of scope: the
//! installer DaemonSet mounts only `/etc/containerd` of a Gardener node, where they never
//! occur, so code for them could only ever run untested.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config_version::{ConfigVersion, parse_toml};
use super::daemon_version::ContainerdVersion;
use super::error::ConfigError;
use super::host::{HostFs, read_host};
use super::imports::{DROP_IN_NAME, covered_drop_in, imports_of};

/// The default config path of containerd.
pub const DEFAULT_CONFIG: &str = "/etc/containerd/config.toml";

/// Where the config path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Distro {
    /// Plain containerd (`/etc/containerd/config.toml`), e.g. Gardener nodes, kubeadm, kind.
    Generic,
    /// A config path the operator configured explicitly; handled like `Generic`.
    Custom,
}

/// How our runtimes get into containerd's effective config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteStrategy {
    /// Edit `file` with structured edits (created when missing); a backup of the original is
    /// kept. Used on containerd 1.x, where an import would replace the whole CRI table.
    InPlace { file: PathBuf },
    /// Write our own drop-in `file`, which `main` already imports through a glob. `main` is not
    /// changed.
    DropIn { file: PathBuf, main: PathBuf },
    /// Write our own drop-in `file` and add exactly that path to `imports` of `main` (one
    /// structured edit). Used on containerd >= 2.0 when no existing import covers a drop-in.
    DropInWithImport { file: PathBuf, main: PathBuf },
}

/// Where and how to configure containerd on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub distro: Distro,
    /// The containerd release on the node.
    pub containerd: ContainerdVersion,
    /// The config file containerd reads at start (`--config`).
    pub config: PathBuf,
    /// The config version our tables are written for: the version of the file they go into,
    /// which for a drop-in is the version of the main file (containerd migrates each file by its
    /// own declared version).
    pub version: ConfigVersion,
    pub strategy: WriteStrategy,
}

/// Finds containerd's config on the host and decides the write strategy. `config_override` is
/// an operator-configured config path.
pub fn locate(
    host: &dyn HostFs,
    containerd: ContainerdVersion,
    config_override: Option<&Path>,
) -> Result<Target, ConfigError> {
    containerd.ensure_supported()?;
    match config_override {
        Some(path) => plain_target(host, Distro::Custom, containerd, path),
        None => plain_target(host, Distro::Generic, containerd, Path::new(DEFAULT_CONFIG)),
    }
}

/// A config file containerd reads directly.
fn plain_target(
    host: &dyn HostFs,
    distro: Distro,
    containerd: ContainerdVersion,
    path: &Path,
) -> Result<Target, ConfigError> {
    let with_import = || WriteStrategy::DropInWithImport {
        file: path
            .parent()
            .unwrap_or(Path::new("/"))
            .join("conf.d")
            .join(DROP_IN_NAME),
        main: path.to_path_buf(),
    };
    let Some(text) = read_host(host, path)? else {
        // No file: containerd runs on defaults. We create one at the version this containerd
        // writes by default (and delete it on uninstall), shaped as the next run will find it:
        // on 2.x a main file importing our drop-in, on 1.x a file holding our tables.
        let strategy = if containerd.merges_imports() {
            with_import()
        } else {
            WriteStrategy::InPlace {
                file: path.to_path_buf(),
            }
        };
        return Ok(Target {
            distro,
            containerd,
            config: path.to_path_buf(),
            version: containerd.default_config_version(),
            strategy,
        });
    };
    let doc = parse_toml(path, &text)?;
    let version = ConfigVersion::detect(path, &doc)?;
    let strategy = if containerd.merges_imports() {
        let imports = imports_of(path, &doc)?;
        match covered_drop_in(path, &imports) {
            Some(file) => WriteStrategy::DropIn {
                file,
                main: path.to_path_buf(),
            },
            None => with_import(),
        }
    } else {
        WriteStrategy::InPlace {
            file: path.to_path_buf(),
        }
    };
    Ok(Target {
        distro,
        containerd,
        config: path.to_path_buf(),
        version,
        strategy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::containerd::MemoryHost;

    const V1_7: ContainerdVersion = ContainerdVersion::new(1, 7, 27);
    const V2_2: ContainerdVersion = ContainerdVersion::new(2, 2, 0);
    const V2_3: ContainerdVersion = ContainerdVersion::new(2, 3, 7);

    fn locate_in(host: &MemoryHost, containerd: ContainerdVersion) -> Target {
        locate(host, containerd, None).unwrap()
    }

    #[test]
    fn generic_on_containerd_1_edits_in_place_even_with_imports() {
        let host = MemoryHost::new().with(
            DEFAULT_CONFIG,
            "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
        );
        let target = locate_in(&host, V1_7);
        assert_eq!(target.distro, Distro::Generic);
        assert_eq!(target.version, ConfigVersion::V2);
        assert_eq!(
            target.strategy,
            WriteStrategy::InPlace {
                file: DEFAULT_CONFIG.into()
            }
        );
    }

    #[test]
    fn generic_on_containerd_2_uses_a_covered_drop_in() {
        let host = MemoryHost::new().with(
            DEFAULT_CONFIG,
            "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
        );
        let target = locate_in(&host, V2_3);
        assert_eq!(target.version, ConfigVersion::V2, "the main file's version");
        assert_eq!(
            target.strategy,
            WriteStrategy::DropIn {
                file: "/etc/containerd/conf.d/50-containerd-shim.toml".into(),
                main: DEFAULT_CONFIG.into()
            }
        );
    }

    #[test]
    fn generic_on_containerd_2_without_imports_adds_one() {
        let host = MemoryHost::new().with(DEFAULT_CONFIG, "version = 3\n");
        assert_eq!(
            locate_in(&host, V2_2).strategy,
            WriteStrategy::DropInWithImport {
                file: "/etc/containerd/conf.d/50-containerd-shim.toml".into(),
                main: DEFAULT_CONFIG.into()
            }
        );
    }

    #[test]
    fn missing_config_is_created_at_the_default_version() {
        let host = MemoryHost::new();
        for (containerd, version) in [
            (V1_7, ConfigVersion::V2),
            (V2_2, ConfigVersion::V3),
            (V2_3, ConfigVersion::V4),
        ] {
            let target = locate_in(&host, containerd);
            assert_eq!(target.version, version);
            let expected = if !containerd.merges_imports() {
                WriteStrategy::InPlace {
                    file: DEFAULT_CONFIG.into(),
                }
            } else {
                WriteStrategy::DropInWithImport {
                    file: "/etc/containerd/conf.d/50-containerd-shim.toml".into(),
                    main: DEFAULT_CONFIG.into(),
                }
            };
            assert_eq!(target.strategy, expected);
        }
    }

    #[test]
    fn an_override_is_handled_like_the_default_path() {
        let host = MemoryHost::new()
            .with(DEFAULT_CONFIG, "version = 2\n")
            .with("/opt/containerd/containerd.toml", "version = 3\n");
        let custom = Path::new("/opt/containerd/containerd.toml");
        let target = locate(&host, V1_7, Some(custom)).unwrap();
        assert_eq!(target.distro, Distro::Custom);
        assert_eq!(target.config, custom);
        assert_eq!(target.version, ConfigVersion::V3);
        assert_eq!(
            target.strategy,
            WriteStrategy::InPlace {
                file: custom.into()
            }
        );
        // On containerd 2.x the drop-in goes next to the configured file.
        assert_eq!(
            locate(&host, V2_3, Some(custom)).unwrap().strategy,
            WriteStrategy::DropInWithImport {
                file: "/opt/containerd/conf.d/50-containerd-shim.toml".into(),
                main: custom.into()
            }
        );
    }

    #[test]
    fn distribution_layouts_are_not_detected() {
        // k3s, rke2, k0s and microk8s keep their containerd config elsewhere; on a Gardener
        // node those paths are not even mounted. Their files change nothing.
        let host = MemoryHost::new()
            .with(
                "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
                "version = 3\n",
            )
            .with(
                "/etc/k0s/containerd.toml",
                "# k0s_managed=true\nversion = 2\n",
            )
            .with(
                "/var/snap/microk8s/current/args/containerd-template.toml",
                "version = 2\n",
            );
        let target = locate_in(&host, V1_7);
        assert_eq!(target.distro, Distro::Generic);
        assert_eq!(target.config, PathBuf::from(DEFAULT_CONFIG));
        assert_eq!(
            target.strategy,
            WriteStrategy::InPlace {
                file: DEFAULT_CONFIG.into()
            }
        );
    }

    #[test]
    fn errors_name_the_file() {
        let host = MemoryHost::new().with(DEFAULT_CONFIG, "version = \"2\"\n");
        let err = locate(&host, V1_7, None).unwrap_err().to_string();
        assert!(
            err.contains(DEFAULT_CONFIG) && err.contains("\"2\""),
            "{err}"
        );
        let host = MemoryHost::new().with(DEFAULT_CONFIG, "version = 2\n[plugins\n");
        let err = locate(&host, V1_7, None).unwrap_err().to_string();
        assert!(err.contains("is not valid TOML"), "{err}");
        let err = locate(&host, ContainerdVersion::new(3, 0, 0), None).unwrap_err();
        assert!(
            matches!(err, ConfigError::UnsupportedContainerd { .. }),
            "{err}"
        );
        let host = MemoryHost::new().with(DEFAULT_CONFIG, "version = 3\nimports = \"/x\"\n");
        let err = locate(&host, V2_3, None).unwrap_err().to_string();
        assert!(err.contains("`imports` is a string"), "{err}");
    }
}
