//! The containerd configuration engine over arbitrary host files: `locate`, `plan_install`,
//! `plan_uninstall` on a `MemoryHost`. Whatever the node holds, planning returns a plan or an
//! error, never a panic; and when it plans, the documented contract holds: installing again
//! writes nothing, and uninstalling gives every original file back byte for byte.
//!
//! Input: byte 0 picks the containerd release, byte 1 the distribution layout the files are put
//! in, byte 2 whether the second file exists; the rest is UTF-8 text split at NUL bytes into
//! the main config file, the second file, and two desired sets (installed in turn), one handler
//! a line: `handler|runtime_type|runtime_path|annotation,annotation|privileged|Key=value;...`
//! (values `true`/`false` are booleans, integers are integers, anything else a string; empty
//! fields take a default). `hack/fuzz.sh` seeds it with the repository's containerd fixtures.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gardener_extension_containerd_shim::desired_shims::OptionValue;
use gardener_extension_containerd_shim::installer::containerd::{
    ContainerdVersion, ManagedKey, MemoryHost, Ownership, RuntimeEntry, locate, plan_install,
    plan_uninstall,
};
use libfuzzer_sys::fuzz_target;

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
        0 => (
            "/etc/containerd/config.toml",
            "/etc/containerd/conf.d/10-foreign.toml",
        ),
        1 => (
            "/etc/containerd/config.toml",
            "/etc/containerd/conf.d/50-containerd-shim.toml",
        ),
        2 => (
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        ),
        3 => (
            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
            "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl",
        ),
        4 => (
            "/etc/k0s/containerd.toml",
            "/etc/k0s/containerd.d/foreign.toml",
        ),
        5 => (
            "/var/snap/microk8s/current/args/containerd-template.toml",
            "/var/snap/microk8s/current/args/containerd.toml",
        ),
        _ => (
            "/etc/containerd/other.toml",
            "/etc/containerd/config.toml.containerd-shim.bak",
        ),
    };
    let mut host = MemoryHost::new().with(main_path, main);
    if let Some(extra) = extra {
        host = host.with(extra_path, extra);
    }
    host
}

fn option(value: &str) -> OptionValue {
    match value {
        "true" => OptionValue::Bool(true),
        "false" => OptionValue::Bool(false),
        v => v
            .parse::<i64>()
            .map(OptionValue::Int)
            .unwrap_or_else(|_| OptionValue::String(v.to_string())),
    }
}

/// One handler a line, see the module documentation.
fn entries(spec: &str) -> Vec<RuntimeEntry> {
    spec.lines()
        .filter(|l| !l.is_empty())
        .take(6)
        .map(|line| {
            let mut f = line.split('|');
            let mut next = |default: &str| {
                f.next()
                    .filter(|v| !v.is_empty())
                    .unwrap_or(default)
                    .to_string()
            };
            let handler = next("spin");
            let runtime_type = next("io.containerd.spin.v2");
            let runtime_path = next("/opt/containerd-shim/bin/containerd-shim-spin-v2");
            let annotations = next("");
            // `1`: privileged; `2`, `3`: where the managed path goes (an OCI runtime's
            // `options.BinaryName`, or `runtime_type` for containerd 1.6.0 to 1.6.20).
            let flags = next("0");
            let privileged = flags == "1";
            let managed_key = match flags.as_str() {
                "2" => ManagedKey::BinaryName,
                "3" => ManagedKey::RuntimeType,
                _ => ManagedKey::RuntimePath,
            };
            let options = next("");
            RuntimeEntry {
                handler,
                runtime_type,
                runtime_path,
                managed_key,
                pod_annotations: annotations
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect(),
                privileged_without_host_devices: privileged,
                options: options
                    .split(';')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), option(v)))
                    .collect::<BTreeMap<_, _>>(),
                node_agent_dir: None,
            }
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

fuzz_target!(|data: &[u8]| {
    let [selector, layout, flags, rest @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let mut parts = text.split('\0');
    let main = parts.next().unwrap_or_default();
    let extra = parts.next().filter(|_| flags & 1 == 1);
    let first_set = entries(parts.next().unwrap_or("spin"));
    let second_set = entries(parts.next().unwrap_or_default());

    let containerd = containerd(*selector);
    let original = host(*layout, main, extra);
    let mut host = original.clone();
    let Ok(target) = locate(&host, containerd, None) else {
        return;
    };
    let Ok(first) = plan_install(&host, &target, &first_set, &Ownership::default()) else {
        return;
    };
    host.apply(&first);

    // Installing the same set again writes nothing.
    let again_target = locate(&host, containerd, None).expect("the installed host locates");
    let again = plan_install(&host, &again_target, &first_set, &first.ownership)
        .expect("installing the same set again plans");
    assert!(
        again.writes.is_empty() && again.deletes.is_empty(),
        "{again:?}"
    );
    assert_eq!(again.ownership, first.ownership);

    // Changing to the second set, then uninstalling, restores every original byte.
    let mut ownership = first.ownership.clone();
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
