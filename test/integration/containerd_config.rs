//! The containerd configuration engine against real containerd binaries: every config the golden
//! corpus produces must pass `containerd config dump` of the release it was planned for, and
//! show our runtimes where that release's CRI plugin reads them.
//!
//! Binaries: containerd 1.x from `CONTAINERD1_BIN` (default `/usr/bin/containerd`, Debian's
//! package), containerd 2.x from `CONTAINERD2_BIN` (default: the tool cache that
//! `hack/tools/build.sh containerd` fills). A missing binary fails the test; nothing is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_containerd_shim::desired_shims::OptionValue;
use gardener_extension_containerd_shim::installer::containerd::{
    ConfigError, ContainerdVersion, DumpOutput, EffectiveConfig, ExpectedRuntime, HostRoot,
    ManagedKey, Ownership, Plan, RuntimeEntry, Validation, WriteStrategy, check_dump, dump_command,
    locate, plan_install, plan_install_keeping, plan_uninstall,
};
use toml_edit::DocumentMut;

use crate::support::installer::containerd;

mod classes;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> PathBuf {
    repo().join("test/fixtures/containerd")
}

fn dump(binary: &Path, config: &Path) -> DumpOutput {
    // containerd runs as a service with `/` as working directory; so does every dump here.
    dump_in(binary, config, Path::new("/"))
}

fn dump_in(binary: &Path, config: &Path, cwd: &Path) -> DumpOutput {
    let argv = dump_command(&[], binary.to_str().unwrap(), config).unwrap();
    let output = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {argv:?}: {err}"));
    DumpOutput::from_output(&output)
}

/// Rewrites absolute `imports` entries to point below `root`, so that a host tree laid out in a
/// temp dir imports its own files and never the machine's `/etc/containerd`.
fn rebase_imports(text: &str, root: &Path) -> String {
    let Ok(mut doc) = text.parse::<DocumentMut>() else {
        return text.to_string();
    };
    let Some(imports) = doc.get_mut("imports").and_then(|i| i.as_array_mut()) else {
        return text.to_string();
    };
    for value in imports.iter_mut() {
        if let Some(entry) = value.as_str().filter(|e| e.starts_with('/')) {
            let rebased = format!("{}{entry}", root.display());
            let decor = value.decor().clone();
            *value = rebased.into();
            *value.decor_mut() = decor;
        }
    }
    doc.to_string()
}

/// Copies a golden host tree below `root`, rebasing imports.
fn lay_out(tree: &Path, root: &Path) {
    for entry in walk(tree) {
        let relative = entry.strip_prefix(tree).unwrap();
        let target = root.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        let text = std::fs::read_to_string(&entry).unwrap();
        std::fs::write(&target, rebase_imports(&text, root)).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn under(root: &Path, host_path: &Path) -> PathBuf {
    root.join(host_path.strip_prefix("/").unwrap_or(host_path))
}

/// Dumps what a golden validation describes and checks it; `as_major` picks the binary and the
/// expectations (they differ only in where the merged config shows runtimes).
fn validate_golden(tree: &Path, validation: &Validation, as_major: u64) -> Result<(), String> {
    let binary = containerd(as_major);
    let root = tempfile::tempdir().unwrap();
    lay_out(tree, root.path());
    if let Some(scratch) = &validation.scratch {
        let path = under(root.path(), &scratch.path);
        std::fs::write(&path, rebase_imports(&scratch.content, root.path())).unwrap();
    }
    let config = under(root.path(), &validation.config);
    let output = dump(&binary, &config);
    let containerd = if as_major == validation.containerd.major() {
        validation.containerd
    } else {
        ContainerdVersion::new(as_major, 0, 0)
    };
    check_dump(
        &config,
        containerd,
        &validation.present,
        &validation.absent,
        &output,
    )
    .map_err(|err| format!("{err}\nstderr:\n{}", output.stderr))
}

#[test]
fn golden_corpus_passes_containerd_config_dump() {
    let golden = fixtures().join("golden");
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(&golden)
        .unwrap_or_else(|err| panic!("{}: {err}", golden.display()))
        .map(|e| e.unwrap().path())
        .collect();
    scenarios.sort();
    assert!(
        scenarios.len() >= 10,
        "the corpus is missing: {}",
        golden.display()
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for scenario in &scenarios {
        let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
        for phase in ["install", "uninstall"] {
            let file = scenario.join(format!("{phase}-validation.json"));
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let validation: Validation = serde_json::from_str(&text).unwrap();
            let tree = scenario.join(format!("after-{phase}"));
            let mut majors = vec![validation.containerd.major()];
            // containerd 2.x reads the v1/v2 configs planned for 1.x too, migrating them: our
            // runtimes must then appear under io.containerd.cri.v1.runtime.
            if validation.containerd.major() == 1 {
                majors.push(2);
            }
            for major in majors {
                checked += 1;
                if let Err(err) = validate_golden(&tree, &validation, major) {
                    failures.push(format!("{name} ({phase}, containerd {major}.x): {err}"));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} dumps ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn minimal_configs_of_every_version_are_accepted_and_broken_ones_rejected() {
    let minimal = fixtures().join("minimal");
    for major in [1, 2] {
        let binary = containerd(major);
        for name in ["v1.toml", "v2.toml", "v3.toml", "v4.toml"] {
            let output = dump(&binary, &minimal.join(name));
            assert_eq!(
                output.exit_code,
                Some(0),
                "containerd {major}.x rejects {name}: {}",
                output.stderr
            );
            assert!(output.stdout.parse::<DocumentMut>().is_ok(), "{name}");
        }
        let output = dump(&binary, &minimal.join("broken.toml"));
        assert_ne!(
            output.exit_code,
            Some(0),
            "containerd {major}.x accepts broken.toml"
        );
        let err = check_dump(
            &minimal.join("broken.toml"),
            ContainerdVersion::new(major, 0, 0),
            &[],
            &[],
            &output,
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::DumpFailed { .. }), "{err}");
    }
}

/// The behaviours the engine's rules rest on, pinned so that a containerd upgrade that changes
/// them is noticed.
#[test]
fn containerd_behaviours_the_rules_rely_on() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let spin = ExpectedRuntime::new("spin", "io.containerd.spin.v2", "/opt/spin");
    let table = |plugin: &str| {
        format!(
            "[plugins.\"{plugin}\".containerd.runtimes.spin]\n  runtime_type = \"io.containerd.spin.v2\"\n  runtime_path = \"/opt/spin\"\n"
        )
    };
    let c1 = containerd(1);
    let c2 = containerd(2);
    let v1 = ContainerdVersion::new(1, 0, 0);
    let v2 = ContainerdVersion::new(2, 0, 0);

    // Version 5 is refused by 2.x but silently accepted by 1.x: never rely on 1.x to refuse.
    let five = write("five.toml", "version = 5\n");
    assert_eq!(dump(&c1, &five).exit_code, Some(0));
    assert_ne!(dump(&c2, &five).exit_code, Some(0));

    // 1.x accepts a version-3 file but ignores its split CRI plugin: the runtime is missing,
    // which only the dump check notices.
    let v3 = write(
        "v3.toml",
        &format!("version = 3\n{}", table("io.containerd.cri.v1.runtime")),
    );
    let output = dump(&c1, &v3);
    assert_eq!(output.exit_code, Some(0));
    let err = check_dump(&v3, v1, std::slice::from_ref(&spin), &[], &output).unwrap_err();
    assert!(matches!(err, ConfigError::RuntimeMissing { .. }), "{err}");

    // The v2 plugin path in a version-4 file: 2.x logs unknown keys and drops the runtime.
    let wrong = write(
        "wrong.toml",
        &format!("version = 4\n{}", table("io.containerd.grpc.v1.cri")),
    );
    let output = dump(&c2, &wrong);
    assert_eq!(output.exit_code, Some(0));
    let err = check_dump(&wrong, v2, std::slice::from_ref(&spin), &[], &output).unwrap_err();
    assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");

    // A typo in our table: 2.x only warns; the check turns it into an error.
    let typo = write(
        "typo.toml",
        &format!(
            "version = 3\n{}  runtime_typo = \"x\"\n",
            table("io.containerd.cri.v1.runtime")
        ),
    );
    let output = dump(&c2, &typo);
    assert_eq!(output.exit_code, Some(0));
    let err = check_dump(&typo, v2, std::slice::from_ref(&spin), &[], &output).unwrap_err();
    assert!(err.to_string().contains("runtime_typo"), "{err}");

    // Imports: 1.x replaces the whole CRI table from a drop-in (the sandbox image of the main
    // file is lost); 2.x deep-merges. That is why drop-ins are used only on 2.x.
    std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
    write(
        "conf.d/50-containerd-shim.toml",
        &format!("version = 2\n{}", table("io.containerd.grpc.v1.cri")),
    );
    let main_with = |import: &str| {
        write(
            "main.toml",
            &format!(
                "version = 2\nimports = [\"{import}\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"example.com/pause:keep-me\"\n"
            ),
        )
    };
    let main = main_with(&format!("{}/conf.d/*.toml", dir.path().display()));
    let output = dump(&c1, &main);
    check_dump(&main, v1, std::slice::from_ref(&spin), &[], &output).unwrap();
    assert!(
        !output.stdout.contains("keep-me"),
        "1.x merged the CRI table"
    );
    let output = dump(&c2, &main);
    check_dump(&main, v2, std::slice::from_ref(&spin), &[], &output).unwrap();
    assert!(
        output.stdout.contains("keep-me"),
        "2.x lost the main file's CRI settings"
    );

    // A relative import: 2.x resolves it against the importing file's directory, 1.x against
    // its own working directory (so from a service, against `/`).
    let main = main_with("conf.d/*.toml");
    check_dump(
        &main,
        v2,
        std::slice::from_ref(&spin),
        &[],
        &dump(&c2, &main),
    )
    .unwrap();
    let err = check_dump(
        &main,
        v1,
        std::slice::from_ref(&spin),
        &[],
        &dump(&c1, &main),
    );
    assert!(
        matches!(err, Err(ConfigError::RuntimeMissing { .. })),
        "{err:?}"
    );
    let output = dump_in(&c1, &main, dir.path());
    check_dump(&main, v1, std::slice::from_ref(&spin), &[], &output).unwrap();
}

/// How containerd finds the files it reads, which the engine's search for foreign runtimes and
/// disabled CRI plugins mirrors (`sources.rs`), pinned with both releases.
#[test]
fn import_resolution_the_search_relies_on() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    };
    let runtime = |handler: &str| {
        format!(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{handler}]\n  runtime_type = \"io.containerd.{handler}.v1\"\n"
        )
    };
    let runtimes_of = |binary: &Path, config: &Path, major: u64| -> Vec<String> {
        let output = dump(binary, config);
        assert_eq!(output.exit_code, Some(0), "{}", output.stderr);
        let version = ContainerdVersion::new(major, 0, 0);
        EffectiveConfig::parse(config, version, &output.stdout)
            .unwrap()
            .runtime_handlers()
    };
    // Nested, relative, file names exactly: resolved against the importing file's directory,
    // by both releases.
    write(
        "nested/a.toml",
        "version = 2\nimports = [\"deeper/b.toml\"]\n",
    );
    write("nested/deeper/b.toml", &runtime("nested"));
    let main = write(
        "nested.toml",
        "version = 2\nimports = [\"nested/a.toml\"]\n",
    );
    for major in [1, 2] {
        assert!(
            runtimes_of(&containerd(major), &main, major).contains(&"nested".to_string()),
            "containerd {major}.x"
        );
    }
    // Only `*` makes a glob: with `?` alone the entry names a file literally (which 1.x then
    // fails to open; 2.x skips a missing file).
    write("literal/x.toml", &runtime("literal"));
    let main = write(
        "literal.toml",
        &format!(
            "version = 2\nimports = [\"{}/literal/?.toml\"]\n",
            dir.path().display()
        ),
    );
    assert_ne!(dump(&containerd(1), &main).exit_code, Some(0));
    assert!(!runtimes_of(&containerd(2), &main, 2).contains(&"literal".to_string()));
    // A glob with `*` follows Go's rules, classes included.
    let main = write(
        "class.toml",
        &format!(
            "version = 2\nimports = [\"{}/literal/[x]*.toml\"]\n",
            dir.path().display()
        ),
    );
    for major in [1, 2] {
        assert!(
            runtimes_of(&containerd(major), &main, major).contains(&"literal".to_string()),
            "containerd {major}.x"
        );
    }
    // `disabled_plugins` of an imported file counts.
    write(
        "off/no-cri.toml",
        "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n",
    );
    let main = write(
        "off.toml",
        &format!(
            "version = 2\nimports = [\"{}/off/*.toml\"]\n",
            dir.path().display()
        ),
    );
    for major in [1, 2] {
        let output = dump(&containerd(major), &main);
        let doc: DocumentMut = output.stdout.parse().unwrap();
        let disabled = doc["disabled_plugins"].as_array().unwrap();
        assert!(
            disabled
                .iter()
                .any(|v| v.as_str() == Some("io.containerd.grpc.v1.cri")),
            "containerd {major}.x: {disabled}"
        );
    }
    // containerd 2.x also reads the split runtime plugin's table from a version-2 file.
    let main = write(
        "split.toml",
        "version = 2\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.split]\n  runtime_type = \"io.containerd.split.v1\"\n",
    );
    assert!(runtimes_of(&containerd(2), &main, 2).contains(&"split".to_string()));
}

fn runtimes() -> Vec<RuntimeEntry> {
    vec![
        RuntimeEntry {
            handler: "spin".into(),
            runtime_type: "io.containerd.spin.v2".into(),
            runtime_path: "/var/lib/containerd-shim/bin/containerd-shim-spin-v2".into(),
            managed_key: ManagedKey::RuntimePath,
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
            node_agent_dir: None,
        },
        RuntimeEntry {
            handler: "kata-qemu".into(),
            runtime_type: "io.containerd.kata-qemu.v2".into(),
            runtime_path: "/var/lib/containerd-shim/bin/containerd-shim-kata-qemu-v2".into(),
            managed_key: ManagedKey::RuntimePath,
            pod_annotations: vec!["io.katacontainers.*".into()],
            privileged_without_host_devices: true,
            options: BTreeMap::from([
                (
                    "ConfigPath".into(),
                    OptionValue::String("/opt/kata.toml".into()),
                ),
                ("IoUid".into(), OptionValue::Int(0)),
            ]),
            node_agent_dir: None,
        },
        // An OCI runtime for containerd's own runc shim: our path is `options.BinaryName`.
        RuntimeEntry {
            handler: "crun".into(),
            runtime_type: "io.containerd.runc.v2".into(),
            runtime_path: "/var/lib/containerd-shim/current/crun/bin/crun".into(),
            managed_key: ManagedKey::BinaryName,
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
            node_agent_dir: None,
        },
    ]
}

/// Writes a plan's backups and files and deletes its deletions below a host root, as the
/// installer does before it validates.
fn apply(root: &HostRoot, plan: &Plan) {
    for backup in &plan.backups {
        std::fs::write(root.resolve(&backup.destination), &backup.content).unwrap();
    }
    for write in &plan.writes {
        let path = root.resolve(&write.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &write.content).unwrap();
    }
    for delete in &plan.deletes {
        std::fs::remove_file(root.resolve(&delete.path)).unwrap();
    }
}

/// Applies a plan below a host root the way the installer does, then validates it with the
/// real binary, rolling back on failure.
fn apply_and_validate(root: &HostRoot, plan: &Plan, binary: &Path) -> Result<(), ConfigError> {
    apply(root, plan);
    let Some(validation) = &plan.validation else {
        return Ok(());
    };
    if let Some(scratch) = &validation.scratch {
        std::fs::write(root.resolve(&scratch.path), &scratch.content).unwrap();
    }
    let config = root.resolve(&validation.config);
    let mut validation = validation.clone();
    validation.config = config.clone();
    let argv = validation.command(&[], binary.to_str().unwrap()).unwrap();
    let output = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    if let Some(scratch) = &plan.validation.as_ref().and_then(|v| v.scratch.clone()) {
        std::fs::remove_file(root.resolve(&scratch.path)).unwrap();
    }
    validation.check(&DumpOutput::from_output(&output))
}

/// The whole flow on a real directory tree: locate, plan, apply, validate with real containerd,
/// install again (nothing to do), uninstall (original bytes back).
#[test]
fn end_to_end_on_a_host_root_with_each_containerd() {
    // Relative import globs resolve the same for the planner (host paths) and for containerd
    // (paths below the temp dir).
    let original = "# node config\nversion = 2\nimports = [\"conf.d/*.toml\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";
    for (major, version) in [
        (1, ContainerdVersion::new(1, 6, 20)),
        (2, ContainerdVersion::new(2, 3, 7)),
    ] {
        let binary = containerd(major);
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let main = root.resolve(Path::new("/etc/containerd/config.toml"));
        std::fs::create_dir_all(main.parent().unwrap()).unwrap();
        std::fs::write(&main, original).unwrap();

        let target = locate(&root, version, None).unwrap();
        match (major, &target.strategy) {
            (1, WriteStrategy::InPlace { .. }) | (2, WriteStrategy::DropIn { .. }) => {}
            other => panic!("unexpected strategy {other:?}"),
        }
        let install = plan_install(&root, &target, &runtimes(), &Ownership::default()).unwrap();
        assert!(install.changed);
        apply_and_validate(&root, &install, &binary)
            .unwrap_or_else(|err| panic!("containerd {major}.x: {err}"));

        let again = plan_install(&root, &target, &runtimes(), &install.ownership).unwrap();
        assert!(!again.changed && again.writes.is_empty(), "{again:#?}");

        let uninstall = plan_uninstall(&root, version, &install.ownership).unwrap();
        assert!(uninstall.changed);
        apply_and_validate(&root, &uninstall, &binary)
            .unwrap_or_else(|err| panic!("containerd {major}.x uninstall: {err}"));
        assert_eq!(std::fs::read_to_string(&main).unwrap(), original);
        assert!(
            !dir.path()
                .join("etc/containerd/conf.d/50-containerd-shim.toml")
                .exists()
        );
    }
}

/// A foreign drop-in that sorts after ours and redefines our handler: refused up front when
/// it is there while planning, and caught by validation (before any restart) when it appears
/// between planning and validation.
#[test]
fn an_overriding_drop_in_is_refused_or_caught_by_validation() {
    let binary = containerd(2);
    let dir = tempfile::tempdir().unwrap();
    let root = HostRoot::new(dir.path());
    let main = root.resolve(Path::new("/etc/containerd/config.toml"));
    std::fs::create_dir_all(main.parent().unwrap().join("conf.d")).unwrap();
    std::fs::write(&main, "version = 3\nimports = [\"conf.d/*.toml\"]\n").unwrap();
    let other = main.parent().unwrap().join("conf.d/90-other.toml");
    let write_other = || {
        std::fs::write(
            &other,
            "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.spin]\n  runtime_type = \"io.containerd.other.v1\"\n",
        )
        .unwrap()
    };
    let version = ContainerdVersion::new(2, 3, 7);
    let target = locate(&root, version, None).unwrap();

    write_other();
    let err = plan_install(&root, &target, &runtimes(), &Ownership::default()).unwrap_err();
    assert!(
        matches!(&err, ConfigError::ForeignRuntime { path, .. }
            if path == Path::new("/etc/containerd/conf.d/90-other.toml")),
        "{err}"
    );

    std::fs::remove_file(&other).unwrap();
    let plan = plan_install(&root, &target, &runtimes(), &Ownership::default()).unwrap();
    write_other();
    let err = apply_and_validate(&root, &plan, &binary).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::RuntimeMismatch {
                field: "runtime_type",
                ..
            }
        ),
        "{err}"
    );
}

/// Debian's packaged containerd config defines no runtime, and containerd 1.x fills in its
/// default `runc` only while no file defines one. The plan, given the real effective
/// configuration, writes `runc` out; the comparison of the real dumps before and after proves
/// that nothing but our runtimes changed. Without the kept runtime, the same candidate is
/// refused by that comparison, although `config dump` itself succeeds on it.
#[test]
fn the_default_runtime_of_a_file_without_runtimes_survives_on_containerd_1() {
    let debian = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".cni]\n      bin_dir = \"/usr/lib/cni\"\n      conf_dir = \"/etc/cni/net.d\"\n  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = \"/var/lib/containerd/opt\"\n";
    let binary = containerd(1);
    let version = ContainerdVersion::new(1, 6, 20);
    for keep in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let main = root.resolve(Path::new("/etc/containerd/config.toml"));
        std::fs::create_dir_all(main.parent().unwrap()).unwrap();
        std::fs::write(&main, debian).unwrap();
        let baseline = dump(&binary, &main);
        assert_eq!(baseline.exit_code, Some(0), "{}", baseline.stderr);
        let effective = EffectiveConfig::parse(&main, version, &baseline.stdout).unwrap();
        assert_eq!(effective.runtime_handlers(), ["runc"]);

        let target = locate(&root, version, None).unwrap();
        let ours = runtimes().iter().map(|r| r.handler.clone()).collect();
        let kept = effective.runtimes_to_keep(&ours);
        let mut plan = plan_install_keeping(
            &root,
            &target,
            &runtimes(),
            &Ownership::default(),
            keep.then_some(kept.as_slice()),
        )
        .unwrap();
        plan.validation.as_mut().unwrap().baseline = Some(baseline.stdout.clone());
        let result = apply_and_validate(&root, &plan, &binary);
        if keep {
            result.unwrap_or_else(|err| panic!("with runc kept: {err}"));
            let uninstall = plan_uninstall(&root, version, &plan.ownership).unwrap();
            apply_and_validate(&root, &uninstall, &binary).unwrap();
            assert_eq!(std::fs::read_to_string(&main).unwrap(), debian);
        } else {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, ConfigError::ForeignSettingsChanged { changes, .. }
                    if changes.iter().any(|c| c.contains("containerd.runtimes.runc."))),
                "{err}"
            );
        }
    }
}

/// containerd 1.6.0–1.6.20 ignore `runtime_path`: there the shim's path is its runtime type,
/// and the real containerd 1.6 accepts and shows it where the CRI plugin reads it.
#[test]
fn the_shim_path_as_runtime_type_passes_containerd_1_6() {
    let binary = containerd(1);
    let version = ContainerdVersion::new(1, 6, 20);
    let dir = tempfile::tempdir().unwrap();
    let root = HostRoot::new(dir.path());
    let main = root.resolve(Path::new("/etc/containerd/config.toml"));
    std::fs::create_dir_all(main.parent().unwrap()).unwrap();
    std::fs::write(&main, "version = 2\n").unwrap();
    let runtimes: Vec<RuntimeEntry> = runtimes()
        .into_iter()
        .map(|r| r.for_containerd(version))
        .collect();
    assert_eq!(runtimes[0].managed_key, ManagedKey::RuntimeType);
    let target = locate(&root, version, None).unwrap();
    let plan = plan_install(&root, &target, &runtimes, &Ownership::default()).unwrap();
    apply_and_validate(&root, &plan, &binary).unwrap_or_else(|err| panic!("{err}"));
    let text = std::fs::read_to_string(&main).unwrap();
    assert!(
        text.contains("runtime_type = \"/var/lib/containerd-shim/bin/containerd-shim-spin-v2\""),
        "{text}"
    );
    assert!(!text.contains("runtime_path"), "{text}");
}
