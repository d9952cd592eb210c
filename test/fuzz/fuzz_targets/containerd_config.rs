//! The containerd configuration engine over arbitrary host files: `locate`, `plan_install`,
//! `plan_uninstall` on a `MemoryHost`. Whatever the node holds, planning returns a plan or an
//! error, never a panic; and when it plans, the documented contract holds: installing again
//! changes nothing, and uninstalling gives every original file back byte for byte.
//!
//! Input (structured with `arbitrary`): the containerd release, which distribution layout the
//! files are put in, the file texts, and the handlers to install.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use gardener_extension_containerd_shim::desired_shims::OptionValue;
use gardener_extension_containerd_shim::installer::containerd::{
    ContainerdVersion, MemoryHost, Ownership, RuntimeEntry, locate, plan_install, plan_uninstall,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Opt {
    Bool(bool),
    Int(i64),
    Str(String),
}

#[derive(Arbitrary, Debug)]
struct Runtime {
    handler: u8,
    raw_handler: Option<String>,
    runtime_type: u8,
    path: Option<String>,
    pod_annotations: Vec<String>,
    privileged: bool,
    options: Vec<(String, Opt)>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    containerd: u8,
    layout: u8,
    main: String,
    extra: Option<String>,
    runtimes: Vec<Runtime>,
    second: Vec<Runtime>,
}

const HANDLERS: [&str; 6] = ["spin", "wasmtime", "runc", "kata-qemu", "a", "nvidia"];
const TYPES: [&str; 4] = [
    "io.containerd.spin.v2",
    "io.containerd.wasmtime.v1",
    "io.containerd.runc.v2",
    "io.containerd.kata-qemu.v2",
];

fn containerd(selector: u8) -> ContainerdVersion {
    match selector % 6 {
        0 => ContainerdVersion::new(1, 6, 20),
        1 => ContainerdVersion::new(1, 7, 27),
        2 => ContainerdVersion::new(2, 0, 5),
        3 => ContainerdVersion::new(2, 2, 1),
        4 => ContainerdVersion::new(2, 3, 7),
        _ => ContainerdVersion::new(u64::from(selector), 0, 0),
    }
}

/// The host files: `main` (and `extra`) where a distribution keeps them.
fn host(layout: u8, main: &str, extra: Option<&str>) -> MemoryHost {
    let (main_path, extra_path): (&str, &str) = match layout % 7 {
        0 => ("/etc/containerd/config.toml", "/etc/containerd/conf.d/10-foreign.toml"),
        1 => ("/etc/containerd/config.toml", "/etc/containerd/conf.d/50-containerd-shim.toml"),
        2 => (
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        ),
        3 => (
            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
            "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl",
        ),
        4 => ("/etc/k0s/containerd.toml", "/etc/k0s/containerd.d/foreign.toml"),
        5 => (
            "/var/snap/microk8s/current/args/containerd-template.toml",
            "/var/snap/microk8s/current/args/containerd.toml",
        ),
        _ => ("/etc/containerd/other.toml", "/etc/containerd/config.toml.containerd-shim.bak"),
    };
    let mut host = MemoryHost::new().with(main_path, main);
    if let Some(extra) = extra {
        host = host.with(extra_path, extra);
    }
    host
}

fn entries(runtimes: &[Runtime]) -> Vec<RuntimeEntry> {
    runtimes
        .iter()
        .take(4)
        .map(|r| RuntimeEntry {
            handler: r
                .raw_handler
                .clone()
                .unwrap_or_else(|| HANDLERS[usize::from(r.handler) % HANDLERS.len()].to_string()),
            runtime_type: TYPES[usize::from(r.runtime_type) % TYPES.len()].to_string(),
            runtime_path: r
                .path
                .clone()
                .unwrap_or_else(|| "/opt/containerd-shim/bin/containerd-shim-x".to_string()),
            pod_annotations: r.pod_annotations.iter().take(4).cloned().collect(),
            privileged_without_host_devices: r.privileged,
            options: r
                .options
                .iter()
                .take(8)
                .map(|(k, v)| {
                    let v = match v {
                        Opt::Bool(b) => OptionValue::Bool(*b),
                        Opt::Int(i) => OptionValue::Int(*i),
                        Opt::Str(s) => OptionValue::String(s.clone()),
                    };
                    (k.clone(), v)
                })
                .collect::<BTreeMap<_, _>>(),
        })
        .collect()
}

/// Files other than our backups, which an uninstall may leave behind on purpose.
fn without_backups(host: &MemoryHost) -> BTreeMap<PathBuf, String> {
    host.files
        .iter()
        .filter(|(p, _)| !p.to_string_lossy().ends_with(".containerd-shim.bak"))
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect()
}

fuzz_target!(|input: Input| {
    let containerd = containerd(input.containerd);
    let original = host(input.layout, &input.main, input.extra.as_deref());
    let mut host = original.clone();
    let Ok(target) = locate(&host, containerd, None) else {
        return;
    };
    let first_set = entries(&input.runtimes);
    let Ok(first) = plan_install(&host, &target, &first_set, &Ownership::default()) else {
        return;
    };
    host.apply(&first);

    // Installing the same set again is a no-op.
    let again_target = locate(&host, containerd, None).expect("the installed host locates");
    let again = plan_install(&host, &again_target, &first_set, &first.ownership)
        .expect("installing the same set again plans");
    assert!(again.writes.is_empty() && again.deletes.is_empty(), "{again:?}");
    assert_eq!(again.ownership, first.ownership);

    // Changing to a second set, then uninstalling, restores every original byte.
    let mut ownership = first.ownership.clone();
    let second_set = entries(&input.second);
    if let Ok(second) = plan_install(&host, &again_target, &second_set, &first.ownership) {
        host.apply(&second);
        ownership = second.ownership;
    }
    let removal = plan_uninstall(&host, containerd, &ownership).expect("uninstall plans");
    host.apply(&removal);
    let before = without_backups(&original);
    let after = without_backups(&host);
    for (path, text) in &before {
        assert_eq!(
            after.get(path),
            Some(text),
            "{} changed by install + uninstall",
            path.display()
        );
    }
    let leftovers: Vec<&Path> = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .map(PathBuf::as_path)
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
});
