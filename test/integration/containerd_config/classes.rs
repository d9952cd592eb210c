//! The engine on configs as distributions and tools ship them, by class of what goes wrong on a
//! real node (`test/fixtures/containerd/classes/<class>/<fixture>/`, each a host tree):
//!
//! - `default-runtime`: files that define no runtime, where containerd 1.x fills in `runc`
//!   only as long as no file defines any;
//! - `cri-disabled`: `disabled_plugins` naming the CRI plugin, in each spelling and in a
//!   drop-in;
//! - `foreign-spelling`: headers with unusual spacing and quoting, dotted keys, inline tables,
//!   CRLF, multi-line `imports`;
//! - `handler-conflict`: a runtime of one of our handlers defined by someone else in the main
//!   file, a drop-in, a nested relative import, or a relative glob (which only containerd 2.x
//!   resolves against the config's directory);
//! - `import-overrides`: an import that defines the CRI table, which containerd 1.x puts in
//!   place of the main file's (ours included).
//!
//! Every fixture runs on containerd 1.x and 2.x: the real `containerd config dump` of the
//! fixture is the baseline; an install must pass validation against it (our runtimes where the
//! CRI plugin reads them, nothing else in the effective configuration changed), add lines only
//! (plus the one `imports` entry on 2.x), and be undone byte for byte; a refusal must name the
//! file and entry, write nothing, and be justified by the real dump (the CRI plugin is
//! disabled there, the handler is defined there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_containerd_shim::installer::containerd::{
    ConfigError, ContainerdVersion, DROP_IN_NAME, DumpOutput, EffectiveConfig, HostRoot, Ownership,
    RuntimeEntry, WriteStrategy, locate, plan_install, plan_install_keeping, plan_uninstall,
};
use toml_edit::DocumentMut;

use super::{apply, dump, fixtures, lay_out, runtimes, under, walk};
use crate::support::installer::containerd;

const MAIN: &str = "/etc/containerd/config.toml";

/// What a fixture must lead to on one containerd major.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The install passes validation against the baseline dump. `kept`: the runtimes
    /// containerd provided implicitly that the edit writes out (containerd 1.x).
    Installs { kept: &'static [&'static str] },
    /// Refused up front: `disabled_plugins` of `file` names the CRI plugin as `plugin`.
    CriDisabled {
        file: &'static str,
        plugin: &'static str,
    },
    /// Refused up front: `file` defines the runtime table `key` of one of our handlers.
    Foreign {
        file: &'static str,
        key: &'static str,
    },
    /// Refused up front: the imported `file` defines the CRI table containerd 1.x would put in
    /// place of the main file's.
    CriTableImported { file: &'static str },
}

struct Fixture {
    /// `<class>/<name>` below `test/fixtures/containerd/classes`.
    dir: &'static str,
    /// Our handlers (of [`runtimes`]) to install.
    handlers: &'static [&'static str],
    on_1: Expect,
    on_2: Expect,
}

const FIXTURES: &[Fixture] = &[
    // Debian's packaged config: CNI paths of Debian's plugins, no runtime.
    Fixture {
        dir: "default-runtime/debian-bookworm",
        handlers: &["spin", "crun"],
        on_1: Expect::Installs { kept: &["runc"] },
        on_2: Expect::Installs { kept: &[] },
    },
    // CRI tuned for Kubernetes, `default_runtime_name = "runc"`, but no runtime table.
    Fixture {
        dir: "default-runtime/ubuntu-tuned-cri",
        handlers: &["kata-qemu"],
        on_1: Expect::Installs { kept: &["runc"] },
        on_2: Expect::Installs { kept: &[] },
    },
    // A version-less (v1) file with short plugin names.
    Fixture {
        dir: "default-runtime/legacy-v1-no-version",
        handlers: &["spin"],
        on_1: Expect::Installs { kept: &["runc"] },
        on_2: Expect::Installs { kept: &[] },
    },
    // Docker Engine's containerd: `disabled_plugins = ["cri"]`.
    Fixture {
        dir: "cri-disabled/docker-engine",
        handlers: &["spin"],
        on_1: Expect::CriDisabled {
            file: MAIN,
            plugin: "cri",
        },
        on_2: Expect::CriDisabled {
            file: MAIN,
            plugin: "cri",
        },
    },
    // A build host: the CRI plugin's full id in a multi-line list.
    Fixture {
        dir: "cri-disabled/build-host-v2",
        handlers: &["spin"],
        on_1: Expect::CriDisabled {
            file: MAIN,
            plugin: "io.containerd.grpc.v1.cri",
        },
        on_2: Expect::CriDisabled {
            file: MAIN,
            plugin: "io.containerd.grpc.v1.cri",
        },
    },
    // containerd 2.x's split runtime plugin.
    Fixture {
        dir: "cri-disabled/v3-runtime-plugin",
        handlers: &["spin"],
        on_1: Expect::CriDisabled {
            file: MAIN,
            plugin: "io.containerd.cri.v1.runtime",
        },
        on_2: Expect::CriDisabled {
            file: MAIN,
            plugin: "io.containerd.cri.v1.runtime",
        },
    },
    // Gardener's main file; a drop-in left by an image build disables the CRI plugin.
    Fixture {
        dir: "cri-disabled/gardener-drop-in",
        handlers: &["spin"],
        on_1: Expect::CriDisabled {
            file: "/etc/containerd/conf.d/10-no-kubernetes.toml",
            plugin: "io.containerd.grpc.v1.cri",
        },
        on_2: Expect::CriDisabled {
            file: "/etc/containerd/conf.d/10-no-kubernetes.toml",
            plugin: "io.containerd.grpc.v1.cri",
        },
    },
    // One key quoted two ways in two headers, spaces around the dots of a header.
    Fixture {
        dir: "foreign-spelling/hand-edited-quoting",
        handlers: &["spin", "kata-qemu"],
        on_1: Expect::Installs { kept: &[] },
        on_2: Expect::Installs { kept: &[] },
    },
    // CRLF, no final newline, the runtimes as dotted keys and an inline options table.
    Fixture {
        dir: "foreign-spelling/dotted-keys-crlf",
        handlers: &["spin", "crun"],
        on_1: Expect::Installs { kept: &[] },
        on_2: Expect::Installs { kept: &[] },
    },
    // Spaces inside every header bracket (as the NVIDIA toolkit's TOML writer leaves them),
    // a multi-line `imports` without a trailing comma naming a file of two more runtimes.
    Fixture {
        dir: "foreign-spelling/nvidia-toolkit-spaced",
        handlers: &["spin"],
        on_1: Expect::Installs { kept: &[] },
        on_2: Expect::Installs { kept: &[] },
    },
    // Spin installed by hand in the main file.
    Fixture {
        dir: "handler-conflict/main-file",
        handlers: &["spin"],
        on_1: Expect::Foreign {
            file: MAIN,
            key: "spin",
        },
        on_2: Expect::Foreign {
            file: MAIN,
            key: "spin",
        },
    },
    // Gardener's main file; Kata's own deployer put `kata-qemu` into a drop-in.
    Fixture {
        dir: "handler-conflict/gardener-kata-drop-in",
        handlers: &["kata-qemu", "spin"],
        on_1: Expect::Foreign {
            file: "/etc/containerd/conf.d/30-kata.toml",
            key: "kata-qemu",
        },
        on_2: Expect::Foreign {
            file: "/etc/containerd/conf.d/30-kata.toml",
            key: "kata-qemu",
        },
    },
    // A relative import whose own relative import defines `crun`.
    Fixture {
        dir: "handler-conflict/nested-import",
        handlers: &["crun"],
        on_1: Expect::Foreign {
            file: "/etc/containerd/runtimes/crun.toml",
            key: "crun",
        },
        on_2: Expect::Foreign {
            file: "/etc/containerd/runtimes/crun.toml",
            key: "crun",
        },
    },
    // `imports = ["conf.d/*.toml"]`: containerd 2.x reads conf.d next to the config and its
    // `spin`; containerd 1.x expands the glob in its working directory `/`, reads nothing
    // there, and `spin` is free.
    Fixture {
        dir: "handler-conflict/relative-glob",
        handlers: &["spin"],
        on_1: Expect::Installs { kept: &["runc"] },
        on_2: Expect::Foreign {
            file: "/etc/containerd/conf.d/20-spin.toml",
            key: "spin",
        },
    },
    // Gardener's main file with a registry mirror as a drop-in: containerd 1.x replaces the
    // main file's whole CRI table with the drop-in's (its sandbox image is gone already).
    Fixture {
        dir: "import-overrides/gardener-mirror-drop-in",
        handlers: &["spin"],
        on_1: Expect::CriTableImported {
            file: "/etc/containerd/conf.d/20-mirror.toml",
        },
        on_2: Expect::Installs { kept: &[] },
    },
];

fn classes() -> PathBuf {
    fixtures().join("classes")
}

/// The release of a containerd binary.
fn version_of(binary: &Path) -> ContainerdVersion {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {} --version: {err}", binary.display()));
    ContainerdVersion::parse(&String::from_utf8_lossy(&output.stdout))
        .unwrap_or_else(|err| panic!("{}: {err}", binary.display()))
}

/// Every file below `root`, relative path → bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walk(root)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path.strip_prefix(root).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// A host root holding the fixture's files byte for byte.
fn host_of(fixture: &Fixture) -> tempfile::TempDir {
    let source = classes().join(fixture.dir);
    let dir = tempfile::tempdir().unwrap();
    for (relative, bytes) in snapshot(&source) {
        let target = dir.path().join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
    dir
}

/// `containerd --config <config> config dump` of a host tree, laid out (imports rebased) in a
/// directory of its own, run from `/` as the service runs.
fn real_dump(binary: &Path, host: &Path, config: &Path) -> DumpOutput {
    let copy = tempfile::tempdir().unwrap();
    lay_out(host, copy.path());
    dump(binary, &under(copy.path(), config))
}

/// The selected runtimes as the installer writes them for this containerd.
fn selected(fixture: &Fixture, containerd: ContainerdVersion) -> Vec<RuntimeEntry> {
    let all = runtimes();
    for handler in fixture.handlers {
        assert!(
            all.iter().any(|r| r.handler == *handler),
            "{}: no runtime {handler}",
            fixture.dir
        );
    }
    all.into_iter()
        .filter(|r| fixture.handlers.contains(&r.handler.as_str()))
        .map(|r| r.for_containerd(containerd))
        .collect()
}

/// Whether every line of `before` is still in `after`, in order, except the lines of the
/// top-level `imports` array when `imports_may_change`.
fn only_added_lines(before: &str, after: &str, imports_may_change: bool) -> Result<(), String> {
    let mut expected: Vec<&str> = before.lines().collect();
    if imports_may_change
        && let Some(start) = expected.iter().position(|l| l.starts_with("imports"))
    {
        let end = (start..expected.len())
            .find(|&i| expected[i].contains(']'))
            .unwrap_or(start);
        expected.drain(start..=end);
    }
    let mut remaining = after.lines();
    for line in &expected {
        if !remaining.any(|candidate| candidate == *line) {
            return Err(format!("line {line:?} changed or moved:\n{after}"));
        }
    }
    Ok(())
}

fn run(fixture: &Fixture, major: u64) -> Result<(), String> {
    let binary = containerd(major);
    let version = version_of(&binary);
    let expect = if major == 1 {
        fixture.on_1
    } else {
        fixture.on_2
    };
    let host = host_of(fixture);
    let root = HostRoot::new(host.path());
    let original = snapshot(host.path());
    let runtimes = selected(fixture, version);
    let ours: BTreeSet<String> = runtimes.iter().map(|r| r.handler.clone()).collect();
    let main = Path::new(MAIN);
    let baseline = real_dump(&binary, host.path(), main);
    if baseline.exit_code != Some(0) {
        return Err(format!(
            "the fixture itself does not load: {}",
            baseline.stderr
        ));
    }
    let effective = EffectiveConfig::parse(main, version, &baseline.stdout).unwrap();
    let target = locate(&root, version, None).map_err(|err| err.to_string())?;

    match expect {
        Expect::Installs { kept } => {
            let keep = (major == 1).then(|| effective.runtimes_to_keep(&ours));
            let kept_now: Vec<&str> = keep
                .iter()
                .flatten()
                .filter(|k| !ours.contains(&k.handler))
                .map(|k| k.handler.as_str())
                .collect();
            let plan = plan_install_keeping(
                &root,
                &target,
                &runtimes,
                &Ownership::default(),
                keep.as_deref(),
            )
            .map_err(|err| format!("planning: {err}"))?;
            let written_out: Vec<&str> = plan
                .ownership
                .files
                .iter()
                .flat_map(|f| f.kept.iter().map(|k| k.handler.as_str()))
                .collect();
            if written_out != kept {
                return Err(format!(
                    "kept {written_out:?} (containerd provides {kept_now:?}), expected {kept:?}"
                ));
            }
            apply(&root, &plan);
            let mut validation = plan.validation.clone().ok_or("no validation")?;
            validation.baseline = Some(baseline.stdout.clone());
            let candidate = real_dump(&binary, host.path(), &validation.config);
            validation
                .check(&candidate)
                .map_err(|err| format!("validation: {err}\nstderr: {}", candidate.stderr))?;

            // Every file: only lines added (our entry may join `imports` of the main file).
            for (relative, bytes) in &original {
                let before = String::from_utf8(bytes.clone()).unwrap();
                let after = std::fs::read_to_string(host.path().join(relative)).unwrap();
                let is_main = Path::new("/").join(relative) == main;
                let imports_may_change =
                    is_main && matches!(target.strategy, WriteStrategy::DropInWithImport { .. });
                only_added_lines(&before, &after, imports_may_change)
                    .map_err(|err| format!("{}: {err}", relative.display()))?;
                if imports_may_change
                    && after.lines().filter(|l| l.contains(DROP_IN_NAME)).count() != 1
                {
                    return Err(format!("not exactly one import of ours:\n{after}"));
                }
            }
            // containerd 1.x: the backup is the original, byte for byte.
            if let WriteStrategy::InPlace { file } = &target.strategy {
                let backup = root.resolve(Path::new(&format!(
                    "{}.containerd-shim.bak",
                    file.display()
                )));
                let relative = file.strip_prefix("/").unwrap();
                if std::fs::read(&backup).ok().as_ref() != original.get(relative) {
                    return Err(format!("{} is not the original", backup.display()));
                }
            }

            // Without writing out the implicit runtimes, the comparison refuses the candidate
            // that `config dump` alone accepts.
            if !kept.is_empty() {
                refused_without_kept(fixture, &binary, version, &runtimes, &baseline)?;
            }

            let removal = plan_uninstall(&root, version, &plan.ownership)
                .map_err(|err| format!("uninstall: {err}"))?;
            apply(&root, &removal);
            if let Some(validation) = &removal.validation {
                let output = real_dump(&binary, host.path(), &validation.config);
                validation
                    .check(&output)
                    .map_err(|err| format!("uninstall validation: {err}"))?;
            }
            if snapshot(host.path()) != original {
                return Err("install + uninstall did not give every byte back".into());
            }
            Ok(())
        }
        Expect::CriDisabled { file, plugin } => {
            let err = plan_install(&root, &target, &runtimes, &Ownership::default());
            match err {
                Err(ConfigError::CriDisabled {
                    path,
                    plugin: found,
                }) if path == Path::new(file) && found == plugin => {
                    let message = ConfigError::CriDisabled {
                        path,
                        plugin: found,
                    }
                    .to_string();
                    if !message.contains(file) || !message.contains(plugin) {
                        return Err(format!("unclear message: {message}"));
                    }
                }
                other => return Err(format!("expected CriDisabled in {file}, got {other:?}")),
            }
            if snapshot(host.path()) != original {
                return Err("something was written".into());
            }
            // The real containerd indeed runs without its CRI plugin here.
            let dumped: DocumentMut = baseline.stdout.parse().unwrap();
            let disabled: Vec<&str> = dumped
                .get("disabled_plugins")
                .and_then(|i| i.as_array())
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            let cri = [
                "cri",
                "io.containerd.grpc.v1.cri",
                "io.containerd.cri.v1.runtime",
            ];
            if !disabled.iter().any(|d| cri.contains(d)) {
                return Err(format!(
                    "the real dump does not disable the CRI plugin: {disabled:?}"
                ));
            }
            Ok(())
        }
        Expect::Foreign { file, key } => {
            let err = plan_install(&root, &target, &runtimes, &Ownership::default());
            match err {
                Err(ConfigError::ForeignRuntime {
                    path,
                    key: found,
                    defines,
                }) if path == Path::new(file)
                    && found.segments().last().map(String::as_str) == Some(key) =>
                {
                    let message = ConfigError::ForeignRuntime {
                        path,
                        key: found.clone(),
                        defines,
                    }
                    .to_string();
                    if !message.contains(file) || !message.contains(&found.to_string()) {
                        return Err(format!("unclear message: {message}"));
                    }
                }
                other => return Err(format!("expected ForeignRuntime in {file}, got {other:?}")),
            }
            if snapshot(host.path()) != original {
                return Err("something was written".into());
            }
            // The real containerd indeed has that handler already.
            if !effective.runtime_handlers().iter().any(|h| h == key) {
                return Err(format!(
                    "the real dump has no runtime {key}: the refusal is not justified"
                ));
            }
            Ok(())
        }
        Expect::CriTableImported { file } => {
            match plan_install(&root, &target, &runtimes, &Ownership::default()) {
                Err(err @ ConfigError::CriTableImported { .. })
                    if err.to_string().starts_with(&format!("{file}: ")) => {}
                other => {
                    return Err(format!(
                        "expected CriTableImported of {file}, got {other:?}"
                    ));
                }
            }
            if snapshot(host.path()) != original {
                return Err("something was written".into());
            }
            // The real containerd indeed lost the main file's CRI settings to the import.
            let main_text =
                std::fs::read_to_string(host.path().join("etc/containerd/config.toml")).unwrap();
            let sandbox = main_text
                .lines()
                .find_map(|l| l.trim().strip_prefix("sandbox_image = "))
                .ok_or("the fixture's main file sets no sandbox_image")?;
            if baseline.stdout.contains(sandbox) {
                return Err(format!(
                    "the real dump keeps the main file's sandbox image {sandbox}: the refusal is \
                     not justified"
                ));
            }
            Ok(())
        }
    }
}

/// The same install without the implicit runtimes written out: `config dump` accepts it, the
/// comparison with the baseline names the lost `runc`.
fn refused_without_kept(
    fixture: &Fixture,
    binary: &Path,
    version: ContainerdVersion,
    runtimes: &[RuntimeEntry],
    baseline: &DumpOutput,
) -> Result<(), String> {
    let host = host_of(fixture);
    let root = HostRoot::new(host.path());
    let target = locate(&root, version, None).map_err(|err| err.to_string())?;
    let plan = plan_install(&root, &target, runtimes, &Ownership::default())
        .map_err(|err| err.to_string())?;
    apply(&root, &plan);
    let mut validation = plan.validation.clone().ok_or("no validation")?;
    let candidate = real_dump(binary, host.path(), &validation.config);
    if candidate.exit_code != Some(0) {
        return Err(format!("config dump rejects it: {}", candidate.stderr));
    }
    validation.baseline = Some(baseline.stdout.clone());
    match validation.check(&candidate) {
        Err(ConfigError::ForeignSettingsChanged { changes, .. })
            if changes
                .iter()
                .any(|c| c.contains("containerd.runtimes.runc.")) =>
        {
            Ok(())
        }
        other => Err(format!(
            "without the kept runtime: expected the lost runc to be named, got {other:?}"
        )),
    }
}

fn run_class(class: &str, at_least: usize) {
    let fixtures: Vec<&Fixture> = FIXTURES
        .iter()
        .filter(|f| f.dir.starts_with(&format!("{class}/")))
        .collect();
    assert!(
        fixtures.len() >= at_least,
        "class {class} has {} fixtures",
        fixtures.len()
    );
    let mut failures = Vec::new();
    for fixture in fixtures {
        for major in [1, 2] {
            if let Err(err) = run(fixture, major) {
                failures.push(format!("{} on containerd {major}.x: {err}", fixture.dir));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn class_default_runtime() {
    run_class("default-runtime", 3);
}

#[test]
fn class_cri_disabled() {
    run_class("cri-disabled", 3);
}

#[test]
fn class_foreign_spelling() {
    run_class("foreign-spelling", 3);
}

#[test]
fn class_handler_conflict() {
    run_class("handler-conflict", 3);
}

#[test]
fn class_import_overrides() {
    run_class("import-overrides", 1);
}

/// Every fixture directory has its expectation, so none sits there unrun.
#[test]
fn every_fixture_is_run() {
    let mut on_disk = BTreeSet::new();
    for class in std::fs::read_dir(classes()).unwrap() {
        let class = class.unwrap().path();
        if !class.is_dir() {
            continue;
        }
        for fixture in std::fs::read_dir(&class).unwrap() {
            let fixture = fixture.unwrap().path();
            on_disk.insert(
                fixture
                    .strip_prefix(classes())
                    .unwrap()
                    .display()
                    .to_string(),
            );
        }
    }
    let listed: BTreeSet<String> = FIXTURES.iter().map(|f| f.dir.to_string()).collect();
    assert_eq!(on_disk, listed);
}
