//! Behaviour of the planner: idempotence, drift repair, conflicts, migrations between
//! strategies, ownership bookkeeping and every error path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::desired_shims::OptionValue;

use super::golden_tests::{fixture, gvisor, spin};
use super::test_support::install;
use super::*;

const MAIN: &str = "/etc/containerd/config.toml";
const DROP_IN: &str = "/etc/containerd/conf.d/50-containerd-shim.toml";
const C1: ContainerdVersion = ContainerdVersion::new(1, 7, 27);
const C2: ContainerdVersion = ContainerdVersion::new(2, 3, 7);

fn uninstall(host: &mut MemoryHost, containerd: ContainerdVersion, previous: &Ownership) -> Plan {
    let plan = plan_uninstall(host, containerd, previous).unwrap();
    host.apply(&plan);
    plan
}

fn try_install(
    host: &MemoryHost,
    containerd: ContainerdVersion,
    runtimes: &[RuntimeEntry],
) -> Result<Plan, ConfigError> {
    let target = locate(host, containerd, None)?;
    plan_install(host, &target, runtimes, &Ownership::default())
}

/// Installing `runtimes` over this main config fails, saying `expected`.
fn expect_install_error(main: &str, runtimes: &[RuntimeEntry], expected: &str) {
    let host = MemoryHost::new().with(MAIN, main);
    let err = try_install(&host, C1, runtimes).unwrap_err().to_string();
    assert!(err.contains(expected), "expected {expected:?} in: {err}");
}

/// crun as an OCI runtime of containerd's runc shim: our path is `options.BinaryName`.
fn crun() -> RuntimeEntry {
    RuntimeEntry {
        handler: "crun".into(),
        runtime_type: "io.containerd.runc.v2".into(),
        runtime_path: "/var/lib/containerd-shim-installer/current/crun/bin/crun".into(),
        managed_key: ManagedKey::BinaryName,
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
        node_agent_dir: None,
    }
}

fn main_text(host: &MemoryHost) -> &str {
    &host.files[Path::new(MAIN)]
}

fn replace_in(host: &mut MemoryHost, path: &str, from: &str, to: &str) {
    let text = host.files.get_mut(Path::new(path)).unwrap();
    assert!(text.contains(from), "{from:?} not in {text}");
    *text = text.replacen(from, to, 1);
}

#[test]
fn option_types_are_kept() {
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let runtime = RuntimeEntry {
        options: BTreeMap::from([
            ("SystemdCgroup".into(), OptionValue::Bool(true)),
            ("IoUid".into(), OptionValue::Int(1000)),
            (
                "BinaryName".into(),
                OptionValue::String("/usr/bin/crun".into()),
            ),
            ("dotted.key".into(), OptionValue::String("x".into())),
        ]),
        pod_annotations: vec!["io.katacontainers.*".into(), "spin.*".into()],
        privileged_without_host_devices: true,
        ..spin()
    };
    install(&mut host, C1, &[runtime], &Ownership::default());
    assert_eq!(
        main_text(&host),
        "version = 2\n\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]\n\
         runtime_type = \"io.containerd.spin.v2\"\n\
         runtime_path = \"/var/lib/containerd-shim/bin/containerd-shim-spin-v2\"\n\
         pod_annotations = [\"io.katacontainers.*\", \"spin.*\"]\n\
         privileged_without_host_devices = true\n\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin.options]\n\
         BinaryName = \"/usr/bin/crun\"\n\
         IoUid = 1000\n\
         SystemdCgroup = true\n\
         \"dotted.key\" = \"x\"\n"
    );
}

#[test]
fn drift_removed_table_is_put_back() {
    let original = fixture("v2-gardener.toml");
    let mut host = MemoryHost::new().with(MAIN, original.clone());
    let first = install(&mut host, C1, &[spin(), gvisor()], &Ownership::default());
    let installed = main_text(&host).to_string();
    // gardener-node-agent re-renders the file from its own state.
    host.files.insert(MAIN.into(), original);
    let repair = install(&mut host, C1, &[spin(), gvisor()], &first.ownership);
    assert!(repair.changed);
    assert_eq!(main_text(&host), installed);
    assert_eq!(repair.ownership, first.ownership);
}

#[test]
fn installing_an_empty_set_gives_back_the_exact_bytes_too() {
    // Found by fuzzing: a whitespace-only file with mixed line endings lost its CR when the
    // last shim was removed through an install of the empty set.
    let original = "\t\r\n\n";
    let mut host = MemoryHost::new().with(MAIN, original);
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    let emptied = install(&mut host, C1, &[], &first.ownership);
    assert!(emptied.ownership.is_empty());
    assert_eq!(main_text(&host), original);
}

#[test]
fn uninstall_after_a_foreign_change_removes_only_our_keys() {
    let original = fixture("v2-gardener.toml");
    let mut host = MemoryHost::new().with(MAIN, original.clone());
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    // Someone changes a value of theirs after our install: uninstall must keep it, so the
    // recorded original (which no longer means the same) is not written back.
    let changed = main_text(&host).replace("sandbox_image", "#sandbox_image");
    assert_ne!(changed, main_text(&host), "the fixture has a sandbox_image");
    host.files.insert(MAIN.into(), changed);
    uninstall(&mut host, C1, &first.ownership);
    assert!(main_text(&host).contains("#sandbox_image"));
    assert!(!main_text(&host).contains("spin"));
}

#[test]
fn uninstall_gives_back_the_exact_bytes_of_a_file_nobody_else_changed() {
    // One key spelled with two quote styles: the structured edit writes it in one style, so
    // only the recorded original gives the file back byte for byte.
    let original = "version = 2\n\n[plugins.'io.containerd.grpc.v1.cri']\n  sandbox_image = \"pause\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
    let mut host = MemoryHost::new().with(MAIN, original);
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    let second = install(&mut host, C1, &[spin(), gvisor()], &first.ownership);
    uninstall(&mut host, C1, &second.ownership);
    assert_eq!(main_text(&host), original);
}

#[test]
fn drift_changed_values_are_restored_keeping_comments() {
    let mut host = MemoryHost::new().with(MAIN, fixture("v2-nvidia.toml"));
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    let installed = main_text(&host).to_string();
    replace_in(
        &mut host,
        MAIN,
        "runtime_type = \"io.containerd.spin.v2\"",
        "runtime_type = \"io.containerd.spin.v1\" # someone's note",
    );
    replace_in(
        &mut host,
        MAIN,
        "SystemdCgroup = true\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]",
        "SystemdCgroup = \"true\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]",
    );
    let repair = install(&mut host, C1, &[spin()], &first.ownership);
    assert!(repair.changed);
    let expected = installed.replacen(
        "runtime_type = \"io.containerd.spin.v2\"",
        "runtime_type = \"io.containerd.spin.v2\" # someone's note",
        1,
    );
    assert_eq!(main_text(&host), expected);
}

#[test]
fn foreign_keys_in_our_table_are_left_alone() {
    let original = "version = 2\n";
    let mut host = MemoryHost::new().with(MAIN, original);
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    replace_in(
        &mut host,
        MAIN,
        "runtime_path = \"/var/lib/containerd-shim/bin/containerd-shim-spin-v2\"\n",
        "runtime_path = \"/var/lib/containerd-shim/bin/containerd-shim-spin-v2\"\nsnapshotter = \"overlayfs\"\n",
    );
    let again = install(&mut host, C1, &[spin()], &first.ownership);
    assert!(!again.changed);
    uninstall(&mut host, C1, &again.ownership);
    // Only our keys went; the table stays because someone else's key is in it.
    assert_eq!(
        main_text(&host),
        "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]\nsnapshotter = \"overlayfs\"\n"
    );
}

#[test]
fn a_foreign_runtime_of_the_same_name_is_a_conflict() {
    let host = MemoryHost::new().with(MAIN, fixture("foreign-spin.toml"));
    let err = try_install(&host, C1, &[spin()]).unwrap_err();
    assert!(matches!(err, ConfigError::ForeignRuntime { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(MAIN), "{message}");
    assert!(
        message.contains("plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin"),
        "{message}"
    );
    assert!(
        message.contains("runtime_path = \"/usr/local/bin/containerd-shim-spin-v2\""),
        "{message}"
    );
}

#[test]
fn our_table_is_adopted_after_a_lost_state_file() {
    let original = fixture("v2-debian.toml");
    let mut host = MemoryHost::new().with(MAIN, original.clone());
    install(&mut host, C1, &[spin()], &Ownership::default());
    let installed = main_text(&host).to_string();
    // The state file is gone: no record.
    let adopted = install(&mut host, C1, &[spin()], &Ownership::default());
    assert!(!adopted.changed && adopted.writes.is_empty());
    assert_eq!(main_text(&host), installed);
    uninstall(&mut host, C1, &adopted.ownership);
    assert_eq!(main_text(&host), original);
}

#[test]
fn parents_are_removed_only_when_we_created_them() {
    // An explicit, empty runtimes table existed before: it must survive uninstall.
    let original = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\n";
    let mut host = MemoryHost::new().with(MAIN, original);
    let plan = install(&mut host, C1, &[spin()], &Ownership::default());
    let created = &plan.ownership.files[0].created_tables;
    assert!(
        !created.contains(&ConfigVersion::V2.runtimes_table()),
        "{created:?}"
    );
    assert!(created.contains(&ConfigVersion::V2.runtime_table("spin")));
    uninstall(&mut host, C1, &plan.ownership);
    assert_eq!(main_text(&host), original);

    // Parents we created go once the last of our handlers is gone, not before.
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let both = install(&mut host, C1, &[spin(), gvisor()], &Ownership::default());
    assert!(
        both.ownership.files[0]
            .created_tables
            .contains(&KeyPath::new(["plugins"]))
    );
    let one = install(&mut host, C1, &[gvisor()], &both.ownership);
    assert!(!main_text(&host).contains("runtimes.spin"));
    assert!(main_text(&host).contains("runtimes.runsc"));
    assert!(
        one.ownership.files[0]
            .created_tables
            .contains(&KeyPath::new(["plugins"]))
    );
    let none = install(&mut host, C1, &[], &one.ownership);
    assert_eq!(main_text(&host), "version = 2\n");
    assert!(none.ownership.is_empty());
}

#[test]
fn dropped_options_and_flags_are_removed() {
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let full = RuntimeEntry {
        privileged_without_host_devices: true,
        pod_annotations: vec!["a".into()],
        ..gvisor()
    };
    let first = install(&mut host, C1, &[full], &Ownership::default());
    let bare = RuntimeEntry {
        options: BTreeMap::new(),
        ..gvisor()
    };
    let second = install(&mut host, C1, &[bare], &first.ownership);
    assert!(second.changed);
    assert_eq!(
        main_text(&host),
        "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\n\
         runtime_type = \"io.containerd.runsc.v1\"\n\
         runtime_path = \"/var/lib/containerd-shim/bin/containerd-shim-runsc-v1\"\n"
    );
    assert_eq!(
        second.ownership.files[0].handlers[0].keys,
        [
            KeyPath::new(["runtime_type"]),
            KeyPath::new(["runtime_path"])
        ]
    );
}

#[test]
fn upgrading_containerd_to_2_moves_our_tables_into_a_drop_in() {
    let original = fixture("v2-gardener.toml");
    let mut host = MemoryHost::new().with(MAIN, original.clone());
    let on_1 = install(&mut host, C1, &[spin()], &Ownership::default());
    assert!(main_text(&host).contains("runtimes.spin"));
    let on_2 = install(&mut host, C2, &[spin()], &on_1.ownership);
    assert!(on_2.changed);
    assert_eq!(
        main_text(&host),
        original,
        "main file back to its original bytes"
    );
    assert!(host.files[Path::new(DROP_IN)].contains("version = 2\n"));
    assert_eq!(on_2.ownership.files.len(), 1);
    assert_eq!(on_2.ownership.files[0].path, PathBuf::from(DROP_IN));
    // The drop-in is written before the main file changes (an import never dangles).
    let order: Vec<_> = on_2.writes.iter().map(|w| w.path.clone()).collect();
    assert_eq!(order, [PathBuf::from(DROP_IN), PathBuf::from(MAIN)]);
}

#[test]
fn a_migrated_config_keeps_our_runtime() {
    // Someone ran `containerd config migrate`: our table moved to the v3 path with the file.
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    let migrated = main_text(&host)
        .replace("version = 2", "version = 3")
        .replace("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime");
    host.files.insert(MAIN.into(), migrated.clone());
    let target = Target {
        distro: Distro::Generic,
        containerd: C1,
        config: MAIN.into(),
        version: ConfigVersion::V3,
        strategy: WriteStrategy::InPlace { file: MAIN.into() },
    };
    let plan = plan_install(&host, &target, &[spin()], &first.ownership).unwrap();
    assert!(!plan.changed, "{plan:#?}");
    assert_eq!(
        plan.ownership.files[0].handlers[0].table,
        ConfigVersion::V3.runtime_table("spin")
    );
}

#[test]
fn drop_in_with_import_round_trip() {
    let original = fixture("v3-no-imports.toml");
    let mut host = MemoryHost::new().with(MAIN, original.clone());
    let plan = install(&mut host, C2, &[spin()], &Ownership::default());
    assert!(main_text(&host).contains(&format!("imports = [\"{DROP_IN}\"]")));
    assert_eq!(plan.backups.len(), 1, "only the main file is backed up");
    // Someone edits our drop-in: it is regenerated.
    replace_in(
        &mut host,
        DROP_IN,
        "SystemdCgroup = true",
        "SystemdCgroup = false",
    );
    let repair = install(&mut host, C2, &[spin()], &plan.ownership);
    assert_eq!(repair.writes.len(), 1);
    assert_eq!(repair.writes[0].path, PathBuf::from(DROP_IN));
    let removal = uninstall(&mut host, C2, &repair.ownership);
    // The import goes (a write) before the drop-in (a delete).
    assert_eq!(removal.writes[0].path, PathBuf::from(MAIN));
    assert_eq!(removal.deletes[0].path, PathBuf::from(DROP_IN));
    assert_eq!(main_text(&host), original);
    assert!(!host.files.contains_key(Path::new(DROP_IN)));
}

#[test]
fn a_foreign_file_at_our_drop_in_path_is_refused_unless_it_is_ours() {
    let host = MemoryHost::new()
        .with(MAIN, fixture("v3-default.toml"))
        .with(DROP_IN, "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.x]\n  runtime_type = \"io.containerd.x.v1\"\n");
    let err = try_install(&host, C2, &[spin()]).unwrap_err();
    assert!(matches!(err, ConfigError::ForeignFile { .. }), "{err}");
    assert!(err.to_string().contains("runtime `x`"), "{err}");
    let host = host.with(DROP_IN, "not toml [");
    assert!(matches!(
        try_install(&host, C2, &[spin()]).unwrap_err(),
        ConfigError::ForeignFile { .. }
    ));

    // Our own drop-in from a run whose state was lost is taken back.
    let mut host = MemoryHost::new().with(MAIN, fixture("v3-default.toml"));
    install(&mut host, C2, &[spin()], &Ownership::default());
    let again = try_install(&host, C2, &[spin()]).unwrap();
    assert!(!again.changed);
}

#[test]
fn an_empty_desired_set_removes_everything() {
    let mut host = MemoryHost::new().with(MAIN, fixture("v4-default.toml"));
    let first = install(&mut host, C2, &[spin()], &Ownership::default());
    let plan = install(&mut host, C2, &[], &first.ownership);
    assert!(plan.changed);
    assert_eq!(plan.deletes.len(), 1);
    assert!(plan.ownership.is_empty());
    assert_eq!(main_text(&host), fixture("v4-default.toml"));
    let validation = plan.validation.unwrap();
    assert!(validation.present.is_empty());
    assert_eq!(validation.absent[0].handler, "spin");
}

#[test]
fn nothing_to_do_means_no_validation() {
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    assert!(first.validation.is_some());
    let again = install(&mut host, C1, &[spin()], &first.ownership);
    assert!(!again.changed && again.validation.is_none() && again.backups.is_empty());
}

#[test]
fn line_endings_dotted_keys_and_missing_final_newline_survive() {
    for original in [
        "version = 2\r\n[plugins.\"io.containerd.grpc.v1.cri\"]\r\n  sandbox_image = \"x\"\r\n",
        "version = 2\nplugins.\"io.containerd.grpc.v1.cri\".containerd.snapshotter = \"overlayfs\"",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd.snapshotter = \"overlayfs\" # dotted",
    ] {
        let mut host = MemoryHost::new().with(MAIN, original);
        let plan = install(&mut host, C1, &[spin(), gvisor()], &Ownership::default());
        let installed = main_text(&host).to_string();
        assert!(
            installed.parse::<toml_edit::DocumentMut>().is_ok(),
            "{installed}"
        );
        if original.contains('\r') {
            assert!(
                !installed.replace("\r\n", "").contains('\n'),
                "{installed:?}"
            );
        }
        uninstall(&mut host, C1, &plan.ownership);
        assert_eq!(main_text(&host), original);
    }
}

#[test]
fn errors_plan_nothing() {
    let refused_runtimes: [(Vec<RuntimeEntry>, &str); 2] = [
        (
            vec![RuntimeEntry {
                handler: "Spin".into(),
                ..spin()
            }],
            "runtime handler \"Spin\" is invalid",
        ),
        (vec![spin(), spin()], "listed more than once"),
    ];
    for (runtimes, expected) in refused_runtimes {
        expect_install_error("version = 2\n", &runtimes, expected);
    }
    let cri = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n";
    let our_spin = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin]\nruntime_path = \"/var/lib/containerd-shim/bin/containerd-shim-spin-v2\"\n";
    let refused_configs = [
        (
            "version = 2\n[plugins\n".to_string(),
            "/etc/containerd/config.toml is not valid TOML",
        ),
        ("version = 7\n".to_string(), "`version = 7`"),
        (
            format!("{cri}runtimes = \"none\"\n"),
            "`plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes` is a string, expected a table",
        ),
        (
            format!("{cri}runtimes = {{ spin = {{ runtime_type = \"x\" }} }}\n"),
            "runtimes.spin` already exists and was not written by this installer (runtime_type = \"x\")",
        ),
        // Adding a table into an inline table would rewrite a line that is not ours.
        (
            format!(
                "{cri}runtimes = {{ runc = {{ runtime_type = \"io.containerd.runc.v2\" }} }}\n"
            ),
            "`plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes` is an inline table, expected a table",
        ),
        (
            format!("{our_spin}options = {{ SystemdCgroup = true }}\n"),
            "runtimes.spin.options` is an inline table",
        ),
        (
            format!(
                "{our_spin}[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.spin.runtime_type]\n"
            ),
            "runtimes.spin.runtime_type` is a table, expected a value",
        ),
    ];
    for (main, expected) in refused_configs {
        expect_install_error(&main, &[spin()], expected);
    }
    let err = plan_uninstall(
        &MemoryHost::new(),
        ContainerdVersion::new(0, 1, 0),
        &Ownership::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ConfigError::UnsupportedContainerd { .. }),
        "{err}"
    );
}

#[test]
fn uninstall_tolerates_files_that_are_already_gone() {
    let mut host = MemoryHost::new().with(MAIN, fixture("v3-default.toml"));
    let plan = install(&mut host, C2, &[spin()], &Ownership::default());
    host.files.remove(Path::new(DROP_IN));
    let removal = uninstall(&mut host, C2, &plan.ownership);
    assert!(!removal.changed && removal.ownership.is_empty());
}

#[test]
fn ownership_survives_the_state_file() {
    let mut host = MemoryHost::new().with(MAIN, fixture("v2-debian.toml"));
    let plan = install(&mut host, C2, &[spin(), gvisor()], &Ownership::default());
    let stored = serde_json::to_string(&plan.ownership).unwrap();
    let loaded: Ownership = serde_json::from_str(&stored).unwrap();
    let again = install(&mut host, C2, &[spin(), gvisor()], &loaded);
    assert!(!again.changed);
    uninstall(&mut host, C2, &loaded);
    assert_eq!(main_text(&host), fixture("v2-debian.toml"));
}

/// Regression (fuzz target `containerd_config`): a config that starts with a byte-order mark
/// came back without it after install and uninstall.
#[test]
fn install_and_uninstall_keep_a_byte_order_mark() {
    let original = "\u{feff}[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n";
    for containerd in [C1, C2] {
        let mut host = MemoryHost::new().with(MAIN, original);
        let plan = install(&mut host, containerd, &[spin()], &Ownership::default());
        assert!(main_text(&host).starts_with('\u{feff}'), "{containerd:?}");
        uninstall(&mut host, containerd, &plan.ownership);
        assert_eq!(main_text(&host), original, "{containerd:?}");
    }
}

#[test]
fn an_empty_set_on_a_file_we_never_touched_leaves_it_alone() {
    // Fuzz finding: the exact-bytes rule for a file we leave took the planned content of every
    // file we own nothing in, so an empty set on an untouched config planned to delete it.
    for text in ["", "# a comment only\n", "version = 2\n"] {
        let original = MemoryHost::new().with(MAIN, text);
        let mut host = original.clone();
        let plan = install(&mut host, C1, &[], &Ownership::default());
        assert!(plan.deletes.is_empty(), "{text:?}: {plan:?}");
        assert_eq!(host.files, original.files, "{text:?}");
        uninstall(&mut host, C1, &plan.ownership);
        assert_eq!(host.files, original.files, "{text:?}");
    }
}

/// Debian's packaged containerd 1.6 config: a CRI section with CNI settings, no runtime.
const DEBIAN_16: &str = r#"version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"#;

/// What containerd 1.6 dumps for that file: its implicit default runtime `runc`.
const DEBIAN_16_DUMP: &str = r#"version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          base_runtime_spec = ""
          pod_annotations = []
          privileged_without_host_devices = false
          runtime_path = ""
          runtime_type = "io.containerd.runc.v2"
"#;

/// Plans installing spin while containerd runs with the effective configuration of
/// [`DEBIAN_16_DUMP`], so that the runtimes containerd provides by itself are kept.
fn plan_spin_over_debian_16(host: &MemoryHost, target: &Target) -> Plan {
    let kept = EffectiveConfig::parse(Path::new(MAIN), C1, DEBIAN_16_DUMP)
        .unwrap()
        .runtimes_to_keep(&["spin".to_string()].into_iter().collect());
    plan_install_keeping(host, target, &[spin()], &Ownership::default(), Some(&kept)).unwrap()
}

#[test]
fn the_implicit_default_runtime_is_kept_while_ours_are_there() {
    let mut host = MemoryHost::new().with(MAIN, DEBIAN_16);
    let target = locate(&host, C1, None).unwrap();
    let plan = plan_spin_over_debian_16(&host, &target);
    host.apply(&plan);
    let text = main_text(&host);
    let runc = text
        .find(r#"[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]"#)
        .unwrap_or_else(|| panic!("runc is not explicit:\n{text}"));
    assert!(
        text[runc..].contains(r#"runtime_type = "io.containerd.runc.v2""#),
        "{text}"
    );
    assert_eq!(plan.ownership.files[0].kept.len(), 1);
    assert_eq!(
        plan.ownership.files[0].kept[0].keys,
        [KeyPath::new(["runtime_type"])]
    );

    // A later run that does not know the effective configuration leaves runc as it is.
    let again = plan_install(&host, &target, &[spin()], &plan.ownership).unwrap();
    assert!(!again.changed, "{:?}", again.writes);
    assert_eq!(again.ownership, plan.ownership);

    // Removing our last runtime takes runc out again: containerd provides it by itself.
    let removed = uninstall(&mut host, C1, &plan.ownership);
    assert!(removed.ownership.is_empty());
    assert_eq!(main_text(&host), DEBIAN_16);
}

#[test]
fn a_runtime_someone_defines_is_not_kept_by_us() {
    let with_runc = format!(
        "{DEBIAN_16}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"
    );
    let host = MemoryHost::new().with(MAIN, &with_runc);
    let target = locate(&host, C1, None).unwrap();
    let plan = plan_spin_over_debian_16(&host, &target);
    assert!(plan.ownership.files[0].kept.is_empty());
}

#[test]
fn a_disabled_cri_plugin_is_refused_in_either_spelling() {
    for plugin in ["cri", "io.containerd.grpc.v1.cri"] {
        let host = MemoryHost::new().with(
            MAIN,
            format!("version = 2\ndisabled_plugins = [\"{plugin}\"]\n"),
        );
        let err = try_install(&host, C1, &[spin()]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::CriDisabled { plugin: p, .. } if p == plugin),
            "{err}"
        );
        assert!(err.to_string().contains("disabled_plugins"), "{err}");
    }
    let host = MemoryHost::new().with(
        MAIN,
        "version = 3\ndisabled_plugins = [\"io.containerd.cri.v1.runtime\"]\n",
    );
    assert!(matches!(
        try_install(&host, C2, &[spin()]),
        Err(ConfigError::CriDisabled { .. })
    ));
    // Other disabled plugins are none of our business.
    let host = MemoryHost::new().with(
        MAIN,
        "version = 2\ndisabled_plugins = [\"io.containerd.snapshotter.v1.btrfs\"]\n",
    );
    try_install(&host, C1, &[spin()]).unwrap();
}

#[test]
fn an_oci_runtime_is_written_and_recognised_by_its_binary_name() {
    let crun = crun();
    let mut host = MemoryHost::new().with(MAIN, "version = 2\n");
    let plan = install(
        &mut host,
        C1,
        std::slice::from_ref(&crun),
        &Ownership::default(),
    );
    let text = main_text(&host).to_string();
    assert!(!text.contains("runtime_path"), "{text}");
    assert!(
        text.contains("BinaryName = \"/var/lib/containerd-shim-installer/current/crun/bin/crun\""),
        "{text}"
    );
    let expected = &plan.validation.as_ref().unwrap().present[0];
    assert_eq!(expected.managed_key, ManagedKey::BinaryName);

    // A lost state file: the table is adopted by its BinaryName...
    let adopted = install(
        &mut host,
        C1,
        std::slice::from_ref(&crun),
        &Ownership::default(),
    );
    assert!(!adopted.changed);
    assert_eq!(
        adopted.ownership.files[0].handlers,
        plan.ownership.files[0].handlers
    );
    // ... but a crun table that runs another binary is someone else's.
    let foreign = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]\n\
                   runtime_type = \"io.containerd.runc.v2\"\n\
                   [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun.options]\n\
                   BinaryName = \"/usr/bin/crun\"\n";
    let host = MemoryHost::new().with(MAIN, foreign);
    let err = try_install(&host, C1, &[crun]).unwrap_err();
    assert!(matches!(err, ConfigError::ForeignRuntime { .. }), "{err}");
}

/// The backup is the file before our first edit: later edits (a changed option, drift repair)
/// never replace it, and it goes with our last runtime.
#[test]
fn the_backup_is_taken_once_and_removed_with_us() {
    let backup = format!("{MAIN}{BACKUP_SUFFIX}");
    let original = "version = 2\n# the node's own\n";
    let mut host = MemoryHost::new().with(MAIN, original);
    let first = install(&mut host, C1, &[spin()], &Ownership::default());
    assert_eq!(first.backups.len(), 1);
    assert_eq!(host.files[Path::new(&backup)], original);

    let changed = RuntimeEntry {
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(false))]),
        ..spin()
    };
    let second = install(&mut host, C1, &[changed], &first.ownership);
    assert!(second.changed && second.backups.is_empty(), "{second:#?}");
    // Someone (gardener-node-agent) rewrites the file without our table: repaired, no backup.
    replace_in(&mut host, MAIN, "[plugins", "#[plugins");
    let repaired = install(&mut host, C1, &[spin()], &second.ownership);
    assert!(repaired.backups.is_empty());
    assert_eq!(host.files[Path::new(&backup)], original);

    let removed = uninstall(&mut host, C1, &repaired.ownership);
    assert!(removed.ownership.is_empty());
    assert!(
        !host.files.contains_key(Path::new(&backup)),
        "the backup is left"
    );
}

/// A shoot that switches from `delivery: osc` to `daemonset` leaves, until gardener-node-agent
/// applies its `op: remove`, the agent's table of the very shim in the main file: the installer
/// takes it over (in place on 1.x, by its drop-in on 2.x) rather than refusing it, so the
/// handler is served throughout. A table that points anywhere else stays someone else's.
#[test]
fn the_node_agents_table_of_the_same_shim_is_taken_over() {
    let crun = RuntimeEntry {
        node_agent_dir: Some(crate::desired_shims::node_agent_shim_dir("crun")),
        ..crun()
    };
    let table = |plugin: &str, binary: &str| {
        format!(
            "[plugins.\"{plugin}\".containerd.runtimes.crun]\n\
             runtime_type = \"io.containerd.runc.v2\"\n\
             [plugins.\"{plugin}\".containerd.runtimes.crun.options]\n\
             BinaryName = \"{binary}\"\nSystemdCgroup = true\n"
        )
    };
    let delivered = "/var/bin/containerruntimes/crun/1.23-0123456789ab/bin/crun";

    // containerd 1.x: edited in place; the table becomes ours and goes with our uninstall.
    let main = format!(
        "version = 2\n{}",
        table("io.containerd.grpc.v1.cri", delivered)
    );
    let mut host = MemoryHost::new().with(MAIN, main);
    let plan = install(
        &mut host,
        C1,
        std::slice::from_ref(&crun),
        &Ownership::default(),
    );
    assert!(plan.changed);
    let text = main_text(&host).to_string();
    assert!(
        text.contains(&crun.runtime_path) && !text.contains(delivered),
        "{text}"
    );
    assert_eq!(plan.ownership.handlers().count(), 1);
    uninstall(&mut host, C1, &plan.ownership);
    assert!(
        !main_text(&host).contains("runtimes.crun"),
        "{}",
        main_text(&host)
    );

    // containerd 2.x: the agent's file is not touched; our drop-in wins over its table.
    let main = format!(
        "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n{}",
        table("io.containerd.cri.v1.runtime", delivered)
    );
    let mut host = MemoryHost::new().with(MAIN, main.clone());
    install(
        &mut host,
        C2,
        std::slice::from_ref(&crun),
        &Ownership::default(),
    );
    assert_eq!(main_text(&host), main);
    assert!(
        host.files[Path::new(DROP_IN)].contains(&crun.runtime_path),
        "{:?}",
        host.files
    );

    // Another shim's directory, Gardener's own runtime extensions' flat layout, or a shim
    // entry without the node agent's directory: someone else's table.
    for (binary, entry) in [
        (
            "/var/bin/containerruntimes/crun-other/1.0-0/bin/crun",
            crun.clone(),
        ),
        ("/var/bin/containerruntimes/crun", crun.clone()),
        (
            delivered,
            RuntimeEntry {
                node_agent_dir: None,
                ..crun.clone()
            },
        ),
    ] {
        let main = format!(
            "version = 2\n{}",
            table("io.containerd.grpc.v1.cri", binary)
        );
        let host = MemoryHost::new().with(MAIN, main);
        let err = try_install(&host, C1, &[entry]).unwrap_err();
        assert!(
            matches!(err, ConfigError::ForeignRuntime { .. }),
            "{binary}: {err}"
        );
    }
}

/// Handing a handler edited in place to gardener-node-agent forgets its table (the agent's
/// values are in it now) and, with our last handler, the whole file record and its backup;
/// a drop-in stays recorded, for the uninstall to remove.
#[test]
fn a_hand_over_forgets_tables_edited_in_place_and_keeps_drop_ins() {
    let handed = std::collections::BTreeSet::from(["spin".to_string()]);

    let mut host = MemoryHost::new().with(MAIN, fixture("v2-debian.toml"));
    let both = install(&mut host, C1, &[spin(), gvisor()], &Ownership::default());
    let (kept, backups) = both.ownership.hand_over_in_place(&handed);
    assert!(backups.is_empty(), "gvisor is still ours in {MAIN}");
    let file = &kept.files[0];
    assert_eq!(
        file.handlers
            .iter()
            .map(|h| h.handler.as_str())
            .collect::<Vec<_>>(),
        ["runsc"]
    );
    let spin_table = ConfigVersion::V2.runtime_table("spin");
    assert!(
        !file
            .created_tables
            .iter()
            .any(|t| t.starts_with(&spin_table)),
        "{:?}",
        file.created_tables
    );
    assert!(file.backup);

    let mut host = MemoryHost::new().with(MAIN, fixture("v2-debian.toml"));
    let one = install(&mut host, C1, &[spin()], &Ownership::default());
    let (kept, backups) = one.ownership.hand_over_in_place(&handed);
    assert!(kept.is_empty(), "{kept:?}");
    assert_eq!(backups, [PathBuf::from(MAIN)]);

    let mut host = MemoryHost::new().with(
        MAIN,
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
    );
    let drop_in = install(&mut host, C2, &[spin()], &Ownership::default());
    assert_eq!(drop_in.ownership.files[0].path, Path::new(DROP_IN));
    let (kept, backups) = drop_in.ownership.hand_over_in_place(&handed);
    assert_eq!(kept, drop_in.ownership);
    assert!(backups.is_empty());
}
