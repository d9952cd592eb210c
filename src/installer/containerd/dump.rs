//! Validation with the node's own containerd: `containerd --config <file> config dump` parses
//! the file, follows its imports, migrates every file to the daemon's config version and prints
//! the merged result. That is the only reliable proof that containerd will see our runtimes at
//! the path its CRI plugin reads (a table at the wrong plugin path for the file's version is
//! silently ignored, and containerd 1.x replaces whole plugin tables from imports).

use std::path::Path;

use serde::{Deserialize, Serialize};
use toml_edit::{DocumentMut, Item};

use super::config_version::ConfigVersion;
use super::daemon_version::ContainerdVersion;
use super::error::ConfigError;
use super::key_path::{KeyPath, table_at};
use super::ownership::OwnedHandler;
use super::runtime::{ManagedKey, RuntimeEntry};

/// A runtime as the merged config must (or must no longer) show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedRuntime {
    pub handler: String,
    pub runtime_type: String,
    /// The path of our managed binary, at `managed_key`.
    pub runtime_path: String,
    #[serde(default, skip_serializing_if = "ManagedKey::is_default")]
    pub managed_key: ManagedKey,
}

impl ExpectedRuntime {
    /// A shim at `runtime_path`.
    pub fn new(handler: &str, runtime_type: &str, runtime_path: &str) -> Self {
        ExpectedRuntime {
            handler: handler.to_string(),
            runtime_type: runtime_type.to_string(),
            runtime_path: runtime_path.to_string(),
            managed_key: ManagedKey::RuntimePath,
        }
    }

    /// What a runtime we write must look like in the merged config.
    pub fn of(entry: &RuntimeEntry) -> Self {
        ExpectedRuntime {
            managed_key: entry.managed_key,
            ..ExpectedRuntime::new(&entry.handler, &entry.runtime_type, &entry.runtime_path)
        }
    }

    /// A runtime we own (and may be about to remove).
    pub fn owned(owned: &OwnedHandler) -> Self {
        ExpectedRuntime {
            managed_key: owned.managed_key,
            ..ExpectedRuntime::new(&owned.handler, &owned.runtime_type, &owned.runtime_path)
        }
    }
}

/// What the dump command returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpOutput {
    /// `None` when the process was killed by a signal.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl DumpOutput {
    pub fn from_output(output: &std::process::Output) -> Self {
        DumpOutput {
            exit_code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// The argv of `containerd --config <config> config dump`, after `prefix` (e.g.
/// `nsenter --target 1 --mount --` to run it in the host's mount namespace, where the config's
/// import paths are valid).
pub fn dump_command(
    prefix: &[String],
    containerd: &str,
    config: &Path,
) -> Result<Vec<String>, ConfigError> {
    let config = config.to_str().ok_or_else(|| ConfigError::NonUtf8Path {
        path: config.to_path_buf(),
    })?;
    let mut argv = prefix.to_vec();
    argv.extend(
        [containerd, "--config", config, "config", "dump"]
            .into_iter()
            .map(str::to_string),
    );
    Ok(argv)
}

/// Fails when containerd rejected the config, ignored one of our keys, or merged a config that
/// does not show `present` exactly (or still shows one of `absent`).
pub fn check_dump(
    config: &Path,
    containerd: ContainerdVersion,
    present: &[ExpectedRuntime],
    absent: &[ExpectedRuntime],
    output: &DumpOutput,
) -> Result<(), ConfigError> {
    if output.exit_code != Some(0) {
        return Err(ConfigError::DumpFailed {
            config: config.to_path_buf(),
            code: output.exit_code.map_or_else(
                || "none (killed by a signal)".to_string(),
                |c| c.to_string(),
            ),
            stderr: tail(&output.stderr),
        });
    }
    check_unknown_keys(config, present, &output.stderr)?;

    let doc: DocumentMut =
        output
            .stdout
            .parse()
            .map_err(|err: toml_edit::TomlError| ConfigError::DumpNotToml {
                config: config.to_path_buf(),
                message: err.to_string(),
            })?;
    let layout = containerd.dump_layout();
    ensure_present(config, &doc, layout, present)?;
    for gone in absent {
        let key = layout.runtime_table(&gone.handler);
        let still_ours = table_at(doc.as_table(), &key)
            .and_then(|table| gone.managed_key.value_in(table))
            == Some(gone.runtime_path.as_str());
        if still_ours {
            return Err(ConfigError::RuntimeStillPresent {
                config: config.to_path_buf(),
                handler: gone.handler.clone(),
                key,
            });
        }
    }
    Ok(())
}

/// Fails unless every runtime of `present` shows in the dump exactly as expected.
fn ensure_present(
    config: &Path,
    doc: &DocumentMut,
    layout: ConfigVersion,
    present: &[ExpectedRuntime],
) -> Result<(), ConfigError> {
    for expected in present {
        let key = layout.runtime_table(&expected.handler);
        let Some(table) = table_at(doc.as_table(), &key) else {
            return Err(ConfigError::RuntimeMissing {
                config: config.to_path_buf(),
                handler: expected.handler.clone(),
                key,
            });
        };
        for (field, found, want) in [
            (
                "runtime_type",
                table.get("runtime_type").and_then(Item::as_str),
                &expected.runtime_type,
            ),
            (
                expected.managed_key.name(),
                expected.managed_key.value_in(table),
                &expected.runtime_path,
            ),
        ] {
            if found != Some(want.as_str()) {
                return Err(ConfigError::RuntimeMismatch {
                    config: config.to_path_buf(),
                    key,
                    field,
                    found: found.map_or_else(|| "<unset>".to_string(), |f| format!("{f:?}")),
                    expected: want.clone(),
                });
            }
        }
    }
    Ok(())
}

/// containerd 2.x decodes leniently and only logs keys it does not know, e.g.
/// `msg="Ignoring unknown key in TOML for plugin" key="containerd runtimes spin runtime_typo"
/// plugin=io.containerd.cri.v1.runtime`. Such a key below one of our handlers means containerd
/// would run without it (or without the whole runtime, when the table sits at a path the
/// plugin does not read).
fn check_unknown_keys(
    config: &Path,
    ours: &[ExpectedRuntime],
    stderr: &str,
) -> Result<(), ConfigError> {
    for line in stderr.lines() {
        if !line.contains("Ignoring unknown key") {
            continue;
        }
        let Some(key) = logfmt_field(line, "key") else {
            continue;
        };
        let mut segments: Vec<String> = Vec::new();
        if let Some(plugin) = logfmt_field(line, "plugin") {
            segments.push("plugins".into());
            segments.push(plugin);
        }
        segments.extend(key.split(' ').map(str::to_string));
        let hit = ours.iter().find(|runtime| {
            segments
                .windows(2)
                .any(|pair| pair[0] == "runtimes" && pair[1] == runtime.handler)
        });
        if let Some(runtime) = hit {
            return Err(ConfigError::UnknownKey {
                file: logfmt_field(line, "file").unwrap_or_else(|| config.display().to_string()),
                key: KeyPath(segments).to_string(),
                handler: runtime.handler.clone(),
            });
        }
    }
    Ok(())
}

/// The value of `name=` in a logrus text line: quoted (with `\"` and `\\` escapes) or bare.
fn logfmt_field(line: &str, name: &str) -> Option<String> {
    let needle = format!("{name}=");
    let mut search = 0;
    let start = loop {
        let found = search + line[search..].find(&needle)?;
        let at_boundary = found == 0 || line[..found].ends_with(' ');
        if at_boundary {
            break found + needle.len();
        }
        search = found + needle.len();
    };
    let rest = &line[start..];
    let Some(quoted) = rest.strip_prefix('"') else {
        return Some(rest.split(' ').next().unwrap_or_default().to_string());
    };
    let mut value = String::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(chars.next()?),
            other => value.push(other),
        }
    }
    None
}

/// The end of stderr, which holds the error, bounded so an error message stays readable.
fn tail(stderr: &str) -> String {
    const LIMIT: usize = 2000;
    let trimmed = stderr.trim();
    if trimmed.len() <= LIMIT {
        return trimmed.to_string();
    }
    let mut start = trimmed.len() - LIMIT;
    while !trimmed.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &trimmed[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "/etc/containerd/config.toml";
    const V1: ContainerdVersion = ContainerdVersion::new(1, 6, 20);
    const V2: ContainerdVersion = ContainerdVersion::new(2, 3, 7);

    fn spin() -> ExpectedRuntime {
        ExpectedRuntime::new("spin", "io.containerd.spin.v2", "/opt/shims/spin")
    }

    fn ok(stdout: &str, stderr: &str) -> DumpOutput {
        DumpOutput {
            exit_code: Some(0),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    fn check(containerd: ContainerdVersion, output: &DumpOutput) -> Result<(), ConfigError> {
        check_dump(Path::new(CONFIG), containerd, &[spin()], &[], output)
    }

    const DUMP_V2: &str = "version = 4\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.spin]\n  runtime_type = 'io.containerd.spin.v2'\n  runtime_path = '/opt/shims/spin'\n";
    const DUMP_V1: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]\n  runtime_type = \"io.containerd.spin.v2\"\n  runtime_path = \"/opt/shims/spin\"\n";

    #[test]
    fn builds_the_command_with_a_prefix() {
        let prefix = vec![
            "nsenter".to_string(),
            "-t".into(),
            "1".into(),
            "-m".into(),
            "--".into(),
        ];
        assert_eq!(
            dump_command(&prefix, "/usr/bin/containerd", Path::new(CONFIG)).unwrap(),
            [
                "nsenter",
                "-t",
                "1",
                "-m",
                "--",
                "/usr/bin/containerd",
                "--config",
                CONFIG,
                "config",
                "dump"
            ]
        );
        assert_eq!(
            dump_command(&[], "containerd", Path::new("/c.toml")).unwrap(),
            ["containerd", "--config", "/c.toml", "config", "dump"]
        );
    }

    #[test]
    fn accepts_our_runtime_at_the_daemons_path() {
        check(
            V2,
            &ok(
                DUMP_V2,
                "level=warning msg=\"Configuration migrated from version 2\"",
            ),
        )
        .unwrap();
        check(V1, &ok(DUMP_V1, "")).unwrap();
    }

    #[test]
    fn a_failed_dump_reports_stderr() {
        let output = DumpOutput {
            exit_code: Some(1),
            stdout: String::new(),
            stderr: "containerd: failed to unmarshal TOML at row 2 column 9\n".into(),
        };
        let err = check(V2, &output).unwrap_err().to_string();
        assert!(err.contains(CONFIG) && err.contains("exit code 1"), "{err}");
        assert!(err.contains("row 2 column 9"), "{err}");
        let killed = DumpOutput {
            exit_code: None,
            ..output
        };
        assert!(
            check(V2, &killed)
                .unwrap_err()
                .to_string()
                .contains("signal")
        );
    }

    #[test]
    fn an_ignored_key_of_ours_is_an_error() {
        let stderr = "time=\"2026-01-01T00:00:00Z\" level=warning msg=\"Ignoring unknown key in TOML for plugin\" error=\"strict mode: fields in the document are missing in the target struct\" key=\"containerd runtimes spin runtime_typo\" plugin=io.containerd.cri.v1.runtime\n";
        let err = check(V2, &ok(DUMP_V2, stderr)).unwrap_err().to_string();
        assert!(
            err.contains(
                "plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.spin.runtime_typo"
            ),
            "{err}"
        );
        assert!(err.contains("runtime spin"), "{err}");
        // The v2 path in a v4 file: containerd ignores the whole runtime.
        let stderr = "level=warning msg=\"Ignoring unknown key in TOML for plugin\" key=\"containerd runtimes spin\" plugin=io.containerd.grpc.v1.cri\n";
        assert!(matches!(
            check(V2, &ok(DUMP_V2, stderr)).unwrap_err(),
            ConfigError::UnknownKey { .. }
        ));
        // File-level warnings name the file.
        let stderr = "level=warning msg=\"Ignoring unknown key in TOML\" column=1 file=/etc/containerd/conf.d/50-containerd-shim.toml key=\"plugins x containerd runtimes spin foo\" row=3\n";
        let err = check(V2, &ok(DUMP_V2, stderr)).unwrap_err().to_string();
        assert!(
            err.contains("file /etc/containerd/conf.d/50-containerd-shim.toml"),
            "{err}"
        );
        // Unknown keys of other runtimes are not our business.
        let stderr = "level=warning msg=\"Ignoring unknown key in TOML for plugin\" key=\"containerd runtimes runc foo\" plugin=io.containerd.cri.v1.runtime\nlevel=warning msg=\"Ignoring unknown key in TOML for plugin\" key=containerd plugin=io.containerd.grpc.v1.cri\n";
        check(V2, &ok(DUMP_V2, stderr)).unwrap();
    }

    #[test]
    fn a_missing_or_different_runtime_is_an_error() {
        // containerd 2.x shows runtimes only under the split plugin.
        let err = check(V2, &ok(DUMP_V1, "")).unwrap_err();
        assert!(matches!(err, ConfigError::RuntimeMissing { .. }), "{err}");
        assert!(
            err.to_string().contains("io.containerd.cri.v1.runtime"),
            "{err}"
        );
        let err = check(V1, &ok(DUMP_V2, "")).unwrap_err();
        assert!(matches!(err, ConfigError::RuntimeMissing { .. }), "{err}");
        let other = DUMP_V2.replace("io.containerd.spin.v2", "io.containerd.other.v1");
        let err = check(V2, &ok(&other, "")).unwrap_err().to_string();
        assert!(
            err.contains("runtime_type = \"io.containerd.other.v1\""),
            "{err}"
        );
        let other = DUMP_V2.replace("/opt/shims/spin", "/usr/bin/x");
        let err = check(V2, &ok(&other, "")).unwrap_err().to_string();
        assert!(err.contains("runtime_path = \"/usr/bin/x\""), "{err}");
        let err = check(V2, &ok("not = [toml", "")).unwrap_err();
        assert!(matches!(err, ConfigError::DumpNotToml { .. }), "{err}");
    }

    #[test]
    fn removed_runtimes_must_be_gone() {
        let output = ok(DUMP_V2, "");
        let err = check_dump(Path::new(CONFIG), V2, &[], &[spin()], &output).unwrap_err();
        assert!(
            matches!(err, ConfigError::RuntimeStillPresent { .. }),
            "{err}"
        );
        // A foreign runtime of the same name (another path) is not ours to complain about.
        let foreign = ExpectedRuntime::new("spin", "io.containerd.spin.v2", "/elsewhere");
        check_dump(Path::new(CONFIG), V2, &[], &[foreign], &output).unwrap();
    }

    #[test]
    fn logfmt_fields() {
        let line = r#"level=warning msg="a \"b\" c" key=bare file="/x y" monkey=no"#;
        assert_eq!(logfmt_field(line, "msg").as_deref(), Some("a \"b\" c"));
        assert_eq!(logfmt_field(line, "key").as_deref(), Some("bare"));
        assert_eq!(logfmt_field(line, "file").as_deref(), Some("/x y"));
        assert_eq!(logfmt_field(line, "plugin"), None);
        assert_eq!(logfmt_field(r#"key="unterminated"#, "key"), None);
    }

    #[test]
    fn long_stderr_is_cut_at_a_char_boundary() {
        let long = "é".repeat(3000);
        let cut = tail(&long);
        assert!(cut.starts_with('…') && cut.len() <= 2000 + '…'.len_utf8() + 1);
    }
}
