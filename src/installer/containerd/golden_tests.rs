//! Golden tests over a corpus of realistic configs (`test/fixtures/containerd/input`).
//!
//! For every scenario the expected host after install and after uninstall, a summary of each
//! plan and its validation are stored under `test/fixtures/containerd/golden/<scenario>/`. The
//! integration test `containerd_config` feeds exactly these files to real containerd binaries.
//! `UPDATE_GOLDEN=1 cargo test --lib` rewrites them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::desired_shims::OptionValue;

use super::test_support::{LineEdit, line_edits};
use super::{
    ContainerdVersion, MemoryHost, Ownership, Plan, RuntimeEntry, locate, plan_install,
    plan_uninstall,
};

struct Scenario {
    name: &'static str,
    containerd: ContainerdVersion,
    /// Host path → fixture file name.
    files: &'static [(&'static str, &'static str)],
    runtimes: fn() -> Vec<RuntimeEntry>,
}

const C1_6: ContainerdVersion = ContainerdVersion::new(1, 6, 20);
const C1_7: ContainerdVersion = ContainerdVersion::new(1, 7, 27);
const C2_1: ContainerdVersion = ContainerdVersion::new(2, 1, 4);
const C2_2: ContainerdVersion = ContainerdVersion::new(2, 2, 0);
const C2_3: ContainerdVersion = ContainerdVersion::new(2, 3, 7);

const MAIN: &str = "/etc/containerd/config.toml";
const BIN: &str = "/var/lib/containerd-shim/bin";

pub(super) fn spin() -> RuntimeEntry {
    RuntimeEntry {
        managed_key: Default::default(),
        handler: "spin".into(),
        runtime_type: "io.containerd.spin.v2".into(),
        runtime_path: format!("{BIN}/containerd-shim-spin-v2"),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
        node_agent_dir: None,
    }
}

pub(super) fn gvisor() -> RuntimeEntry {
    RuntimeEntry {
        managed_key: Default::default(),
        handler: "runsc".into(),
        runtime_type: "io.containerd.runsc.v1".into(),
        runtime_path: format!("{BIN}/containerd-shim-runsc-v1"),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        options: BTreeMap::from([
            (
                "TypeUrl".into(),
                OptionValue::String("io.containerd.runsc.v1.options".into()),
            ),
            (
                "ConfigPath".into(),
                OptionValue::String(
                    "/var/lib/containerd-shim/gvisor/20250512.0/config/runsc.toml".into(),
                ),
            ),
        ]),
        node_agent_dir: None,
    }
}

fn kata() -> RuntimeEntry {
    RuntimeEntry {
        managed_key: Default::default(),
        handler: "kata-qemu".into(),
        runtime_type: "io.containerd.kata-qemu.v2".into(),
        runtime_path: format!("{BIN}/containerd-shim-kata-qemu-v2"),
        pod_annotations: vec!["io.katacontainers.*".into()],
        privileged_without_host_devices: true,
        options: BTreeMap::from([(
            "ConfigPath".into(),
            OptionValue::String(
                "/var/lib/containerd-shim/kata/3.17.0/config/configuration-qemu.toml".into(),
            ),
        )]),
        node_agent_dir: None,
    }
}

fn spin_and_gvisor() -> Vec<RuntimeEntry> {
    vec![spin(), gvisor()]
}

fn spin_only() -> Vec<RuntimeEntry> {
    vec![spin()]
}

fn spin_and_kata() -> Vec<RuntimeEntry> {
    vec![spin(), kata()]
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "v1-no-header-containerd-1.6",
        containerd: C1_6,
        files: &[(MAIN, "v1-no-header.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v2-debian-containerd-1.6",
        containerd: C1_6,
        files: &[(MAIN, "v2-debian.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v2-debian-containerd-2.3",
        containerd: C2_3,
        files: &[(MAIN, "v2-debian.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v2-gardener-containerd-1.7",
        containerd: C1_7,
        files: &[(MAIN, "v2-gardener.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v2-gardener-containerd-2.3",
        containerd: C2_3,
        files: &[(MAIN, "v2-gardener.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v2-nvidia-containerd-1.7",
        containerd: C1_7,
        files: &[(MAIN, "v2-nvidia.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v3-default-containerd-2.2",
        containerd: C2_2,
        files: &[(MAIN, "v3-default.toml")],
        runtimes: spin_and_gvisor,
    },
    Scenario {
        name: "v3-no-imports-containerd-2.1",
        containerd: C2_1,
        files: &[(MAIN, "v3-no-imports.toml")],
        runtimes: spin_only,
    },
    Scenario {
        name: "v4-default-containerd-2.3",
        containerd: C2_3,
        files: &[(MAIN, "v4-default.toml")],
        runtimes: spin_and_kata,
    },
    Scenario {
        name: "empty-containerd-1.6",
        containerd: C1_6,
        files: &[(MAIN, "empty.toml")],
        runtimes: spin_only,
    },
    Scenario {
        name: "missing-containerd-2.3",
        containerd: C2_3,
        files: &[],
        runtimes: spin_and_gvisor,
    },
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test/fixtures/containerd")
}

pub(super) fn fixture(name: &str) -> String {
    let path = fixtures().join("input").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn host_of(scenario: &Scenario) -> MemoryHost {
    scenario
        .files
        .iter()
        .fold(MemoryHost::new(), |host, (path, name)| {
            host.with(*path, fixture(name))
        })
}

/// The golden files of one scenario: relative path → content.
type Golden = BTreeMap<PathBuf, String>;

fn tree(into: &mut Golden, prefix: &str, host: &MemoryHost) {
    for (path, text) in &host.files {
        let relative = path.strip_prefix("/").unwrap_or(path);
        into.insert(Path::new(prefix).join(relative), text.clone());
    }
}

fn summary(title: &str, plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}");
    if let Some(target) = &plan.target {
        let _ = writeln!(out, "distro: {:?}", target.distro);
        let _ = writeln!(
            out,
            "config: {} (version {})",
            target.config.display(),
            target.version
        );
        let _ = writeln!(out, "strategy: {:?}", target.strategy);
    }
    let _ = writeln!(out, "changed: {}", plan.changed);
    for backup in &plan.backups {
        let _ = writeln!(
            out,
            "backup: {} -> {}",
            backup.source.display(),
            backup.destination.display()
        );
    }
    for write in &plan.writes {
        let kind = if write.previous.is_some() {
            "changed"
        } else {
            "new"
        };
        let _ = writeln!(out, "write: {} ({kind})", write.path.display());
    }
    for delete in &plan.deletes {
        let _ = writeln!(out, "delete: {}", delete.path.display());
    }
    match &plan.validation {
        Some(validation) => {
            let _ = writeln!(
                out,
                "validate: containerd --config {} config dump",
                validation.config.display()
            );
            for runtime in &validation.present {
                let _ = writeln!(
                    out,
                    "  expect {} = {} at {}",
                    runtime.handler, runtime.runtime_type, runtime.runtime_path
                );
            }
            for runtime in &validation.absent {
                let _ = writeln!(
                    out,
                    "  expect no {} at {}",
                    runtime.handler, runtime.runtime_path
                );
            }
        }
        None => {
            let _ = writeln!(out, "validate: nothing");
        }
    }
    let _ = writeln!(out, "ownership:");
    for file in &plan.ownership.files {
        let _ = writeln!(
            out,
            "  {} ({:?}{})",
            file.path.display(),
            file.role,
            if file.created { ", created" } else { "" }
        );
        for handler in &file.handlers {
            let keys: Vec<String> = handler.keys.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "    {}: {} {{{}}}",
                handler.handler,
                handler.table,
                keys.join(", ")
            );
        }
        for table in &file.created_tables {
            let _ = writeln!(out, "    created table: {table}");
        }
        for import in &file.imports {
            let _ = writeln!(out, "    import: {import}");
        }
        if file.created_imports {
            let _ = writeln!(out, "    created key: imports");
        }
    }
    out
}

fn run(scenario: &Scenario) -> Golden {
    let original = host_of(scenario);
    let mut host = original.clone();
    let runtimes = (scenario.runtimes)();
    let target = locate(&host, scenario.containerd, None).unwrap();
    let install = plan_install(&host, &target, &runtimes, &Ownership::default()).unwrap();
    assert!(
        install.changed,
        "{}: install changes nothing",
        scenario.name
    );
    host.apply(&install);

    // Installing the same again plans nothing.
    let target_again = locate(&host, scenario.containerd, None).unwrap();
    let again = plan_install(&host, &target_again, &runtimes, &install.ownership).unwrap();
    assert!(
        !again.changed,
        "{}: second install: {again:#?}",
        scenario.name
    );
    assert!(
        again.writes.is_empty() && again.deletes.is_empty(),
        "{}",
        scenario.name
    );
    assert_eq!(again.ownership, install.ownership, "{}", scenario.name);

    let after_install = host.clone();
    let uninstall = plan_uninstall(&host, scenario.containerd, &install.ownership).unwrap();
    host.apply(&uninstall);
    assert!(uninstall.ownership.is_empty(), "{}", scenario.name);
    // Every original file is back byte for byte, and nothing else is left (backups go too).
    for (path, text) in &original.files {
        assert_eq!(
            host.files.get(path),
            Some(text),
            "{}: {}",
            scenario.name,
            path.display()
        );
    }
    for path in host.files.keys() {
        assert!(
            original.files.contains_key(path),
            "{}: {} left behind",
            scenario.name,
            path.display()
        );
    }

    let mut golden = Golden::new();
    let title = format!("{} on containerd {}", scenario.name, scenario.containerd);
    golden.insert(
        "install.txt".into(),
        summary(&format!("install: {title}"), &install),
    );
    golden.insert(
        "uninstall.txt".into(),
        summary(&format!("uninstall: {title}"), &uninstall),
    );
    golden.insert(
        "install-ownership.json".into(),
        serde_json::to_string_pretty(&install.ownership).unwrap() + "\n",
    );
    for (name, plan) in [("install", &install), ("uninstall", &uninstall)] {
        if let Some(validation) = &plan.validation {
            golden.insert(
                format!("{name}-validation.json").into(),
                serde_json::to_string_pretty(validation).unwrap() + "\n",
            );
        }
    }
    tree(&mut golden, "after-install", &after_install);
    tree(&mut golden, "after-uninstall", &host);
    golden
}

fn read_dir_recursive(dir: &Path, base: &Path, into: &mut Golden) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_dir_recursive(&path, base, into);
        } else {
            let text = std::fs::read_to_string(&path).unwrap();
            into.insert(path.strip_prefix(base).unwrap().to_path_buf(), text);
        }
    }
}

#[test]
fn corpus_matches_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let golden_root = fixtures().join("golden");
    let mut failures = Vec::new();
    for scenario in SCENARIOS {
        let produced = run(scenario);
        let dir = golden_root.join(scenario.name);
        if update {
            let _ = std::fs::remove_dir_all(&dir);
            for (path, text) in &produced {
                let file = dir.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(&file, text).unwrap();
            }
            continue;
        }
        let mut stored = Golden::new();
        read_dir_recursive(&dir, &dir, &mut stored);
        for (path, text) in &produced {
            match stored.get(path) {
                Some(expected) if expected == text => {}
                Some(expected) => failures.push(format!(
                    "{}/{} differs:\n{}",
                    scenario.name,
                    path.display(),
                    line_diff(expected, text)
                )),
                None => failures.push(format!("{}/{} is missing", scenario.name, path.display())),
            }
        }
        for path in stored.keys().filter(|p| !produced.contains_key(*p)) {
            failures.push(format!("{}/{} is stale", scenario.name, path.display()));
        }
    }
    if update {
        // Scenarios that no longer exist.
        for entry in std::fs::read_dir(&golden_root).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !SCENARIOS.iter().any(|s| s.name == name) {
                std::fs::remove_dir_all(&path).unwrap();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "golden files differ (run `UPDATE_GOLDEN=1 cargo test --lib` to accept):\n\n{}",
        failures.join("\n\n")
    );
}

/// A line diff (`-` expected, `+` produced) with two lines of context.
pub(super) fn line_diff(expected: &str, produced: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = produced.lines().collect();
    let ops: Vec<(char, &str)> = line_edits(&a, &b)
        .into_iter()
        .map(|edit| match edit {
            LineEdit::Kept(i) => (' ', a[i]),
            LineEdit::Gone(i) => ('-', a[i]),
            LineEdit::Added(j) => ('+', b[j]),
        })
        .collect();
    let near_change = |k: usize| {
        let lo = k.saturating_sub(2);
        let hi = (k + 2).min(ops.len() - 1);
        ops[lo..=hi].iter().any(|(op, _)| *op != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near_change(k) {
            let _ = writeln!(out, "{op} {line}");
            skipped = false;
        } else if !skipped {
            out.push_str("  ...\n");
            skipped = true;
        }
    }
    if expected.ends_with('\n') != produced.ends_with('\n') {
        out.push_str("(final newline differs)\n");
    }
    out
}

#[test]
fn diff_is_readable() {
    let diff = line_diff("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nX\ne\nf\ng");
    assert_eq!(
        diff,
        "  ...\n  b\n  c\n- d\n+ X\n  e\n  f\n  ...\n(final newline differs)\n"
    );
}
