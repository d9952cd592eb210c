//! Support for the node installer's tests: real containerd binaries, a temporary host root with
//! a test host and an in-memory cluster, desired sets, and snapshots of the host tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use gardener_extension_containerd_shim::desired_shims::{
    Arch, Binary, BinarySource, ConfigFile, DesiredShim, DesiredShims, Mode, OptionValue, Rollout,
    SCHEMA,
};
use gardener_extension_containerd_shim::installer::cluster::MemoryCluster;
use gardener_extension_containerd_shim::installer::containerd::ContainerdVersion;
use gardener_extension_containerd_shim::installer::converge::{Installer, Settings};
use gardener_extension_containerd_shim::installer::host::{Host, TestHost};

/// The host path of the installer's state directory.
pub const STATE_DIR: &str = "/var/lib/containerd-shim-installer";
/// How to get the containerd binaries.
pub const PROVIDE: &str = "run `make tools` (or `hack/tools/build.sh containerd containerd1`)";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A config of the containerd corpus (`test/fixtures/containerd/input`).
pub fn corpus(name: &str) -> String {
    let path = repo().join("test/fixtures/containerd/input").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A version pinned in hack/tools/versions.env (`KEY=value`).
pub fn pinned_version(key: &str) -> String {
    let path = repo().join("hack/tools/versions.env");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    text.lines()
        .find_map(|line| line.trim().strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{} has no {key}", path.display()))
}

fn pinned_containerd2() -> String {
    pinned_version("CONTAINERD_VERSION")
}

/// The gvisor payload's files for one architecture (`amd64`, `arm64`), as
/// `hack/tools/build.sh gvisor` builds them: the directory that holds runsc and
/// containerd-shim-runsc-v1.
pub fn gvisor_payload(arch: &str) -> PathBuf {
    tools_cache()
        .join(format!("gvisor-{}", pinned_version("GVISOR_VERSION")))
        .join(format!("linux-{arch}"))
        .join("payload")
}

/// The crun payload's file tree for one architecture, as `hack/tools/build.sh crun` builds it:
/// the directory that holds crun.
pub fn crun_payload(arch: &str) -> PathBuf {
    tools_cache()
        .join(format!("crun-{}-payload", pinned_version("CRUN_VERSION")))
        .join(format!("linux-{arch}"))
        .join("payload")
}

fn tools_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONTAINERD_SHIM_TOOLS_CACHE") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .expect("neither XDG_CACHE_HOME nor HOME is set");
    cache.join("gardener-extension-containerd-shim/tools")
}

/// The real containerd binary of a major version, checked to be that major.
pub fn containerd(major: u64) -> PathBuf {
    let (variable, default) = match major {
        1 => ("CONTAINERD1_BIN", PathBuf::from("/usr/bin/containerd")),
        _ => (
            "CONTAINERD2_BIN",
            tools_cache()
                .join(format!("containerd-{}", pinned_containerd2()))
                .join("containerd"),
        ),
    };
    let path = std::env::var_os(variable).map_or(default, PathBuf::from);
    assert!(
        path.is_file(),
        "containerd {major}.x is missing at {} (set {variable}, or {PROVIDE})",
        path.display()
    );
    let output = Command::new(&path)
        .arg("--version")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {} --version: {err}", path.display()));
    let version = ContainerdVersion::parse(&String::from_utf8_lossy(&output.stdout))
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    assert_eq!(
        version.major(),
        major,
        "{} is containerd {version}",
        path.display()
    );
    path
}

/// A shim whose binaries come from an image (staged by the test, see [`TestNode::stage`]).
pub fn image_shim(name: &str, handler: &str, version: &str, binaries: &[&str]) -> DesiredShim {
    DesiredShim {
        name: name.into(),
        handler: handler.into(),
        runtime_type: format!("io.containerd.{handler}.v2"),
        version: version.into(),
        oci_runtime: false,
        binaries: binaries
            .iter()
            .map(|binary| Binary {
                name: binary.to_string(),
                source: BinarySource::Image {
                    image: format!("example.com/{name}:{version}"),
                    path: format!("/{binary}"),
                    sha256: BTreeMap::new(),
                },
            })
            .collect(),
        options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        config_files: vec![],
        node_selector: BTreeMap::new(),
        worker_pools: vec![],
    }
}

/// Spin as the catalog installs it.
pub fn spin(version: &str) -> DesiredShim {
    image_shim("spin", "spin", version, &["containerd-shim-spin-v2"])
}

/// A gVisor-like shim: two binaries, a config file and options pointing at both.
pub fn gvisor(version: &str) -> DesiredShim {
    let mut shim = image_shim(
        "gvisor",
        "runsc",
        version,
        &["containerd-shim-runsc-v1", "runsc"],
    );
    shim.runtime_type = "io.containerd.runsc.v1".into();
    shim.options = BTreeMap::from([
        (
            "TypeUrl".into(),
            OptionValue::String("io.containerd.runsc.v1.options".into()),
        ),
        (
            "ConfigPath".into(),
            OptionValue::String("{{configDir}}/runsc.toml".into()),
        ),
    ]);
    shim.config_files = vec![ConfigFile {
        name: "runsc.toml".into(),
        content: "[runsc_config]\n  binary = \"{{binDir}}/runsc\"\n".into(),
    }];
    shim
}

pub fn desired(shims: Vec<DesiredShim>) -> DesiredShims {
    DesiredShims {
        schema: SCHEMA,
        mode: Mode::Install,
        delivery: Default::default(),
        shims,
        rollout: Rollout {
            max_concurrent_restarts: 1,
        },
    }
}

pub fn uninstall() -> DesiredShims {
    DesiredShims::uninstall(Rollout {
        max_concurrent_restarts: 1,
    })
}

/// Labels of a Gardener worker node.
pub fn node_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "kubernetes.io/arch".to_string(),
            Arch::Amd64.as_str().to_string(),
        ),
        ("worker.gardener.cloud/pool".to_string(), pool.to_string()),
    ])
}

/// One simulated node: a temporary host root, its staging directory, a test host whose
/// containerd is the real binary of `major`, and an in-memory cluster.
pub struct TestNode {
    pub dir: tempfile::TempDir,
    pub host: Arc<TestHost>,
    pub cluster: MemoryCluster,
    pub installer: Installer<MemoryCluster>,
    pub staging: PathBuf,
    pub major: u64,
}

impl TestNode {
    /// A node whose `/etc/containerd/config.toml` is `config` (none when `None`), with
    /// containerd started on it.
    pub fn new(major: u64, config: Option<&str>) -> TestNode {
        Self::with_settings(major, config, |_| {})
    }

    pub fn with_settings(
        major: u64,
        config: Option<&str>,
        adjust: impl FnOnce(&mut Settings),
    ) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
        std::fs::create_dir_all(root.join(&STATE_DIR[1..])).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        if let Some(config) = config {
            std::fs::write(root.join("etc/containerd/config.toml"), config).unwrap();
        }
        let host = Arc::new(TestHost::new(&root, containerd(major)));
        host.start_containerd()
            .unwrap_or_else(|err| panic!("the node's containerd does not start: {err}"));
        let cluster = MemoryCluster::new("node-a", node_labels("pool-a"));
        let mut settings = Settings::new(STATE_DIR, &staging);
        adjust(&mut settings);
        let installer = Installer::new(
            host.clone() as Arc<dyn Host>,
            cluster.clone(),
            settings,
            None,
        );
        TestNode {
            dir,
            host,
            cluster,
            installer,
            staging,
            major,
        }
    }

    /// Puts a binary where an init container would have staged it.
    pub fn stage(&self, shim: &str, binary: &str, content: &[u8]) {
        let dir = self.staging.join(shim);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(binary), content).unwrap();
    }

    /// Stages every binary of a shim with content derived from its name and version.
    pub fn stage_shim(&self, shim: &DesiredShim) {
        for binary in &shim.binaries {
            self.stage(
                &shim.name,
                &binary.name,
                &binary_content(shim, &binary.name),
            );
        }
    }

    /// A host path's location in the tree.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.host.path(host_path)
    }

    pub fn read(&self, host_path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(host_path)).ok()
    }

    pub fn write(&self, host_path: &str, content: &str) {
        let path = self.path(host_path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Every file, directory and symlink below the host root.
    pub fn snapshot(&self) -> BTreeMap<String, Entry> {
        snapshot(self.host.root())
    }

    /// The snapshot with run-dependent values (timestamps) in the state file blanked.
    pub fn normalized(&self) -> BTreeMap<String, Entry> {
        let mut tree = self.snapshot();
        let key = format!("{STATE_DIR}/state.json");
        if let Some(Entry::File(bytes)) = tree.get(&key) {
            let mut value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            blank_timestamps(&mut value);
            tree.insert(key, Entry::File(serde_json::to_vec_pretty(&value).unwrap()));
        }
        tree
    }

    /// The directory the stable symlink of a shim points at.
    pub fn current(&self, shim: &str) -> Option<PathBuf> {
        std::fs::read_link(self.path(&format!("{STATE_DIR}/current/{shim}"))).ok()
    }

    pub fn versions(&self, shim: &str) -> Vec<String> {
        let dir = self.path(&format!("{STATE_DIR}/versions/{shim}"));
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    pub fn state(&self) -> Option<serde_json::Value> {
        self.read(&format!("{STATE_DIR}/state.json"))
            .map(|text| serde_json::from_str(&text).unwrap())
    }
}

/// Deterministic binary content of a shim version.
pub fn binary_content(shim: &DesiredShim, binary: &str) -> Vec<u8> {
    format!("#!/bin/false\n# {} {} {binary}\n", shim.name, shim.version).into_bytes()
}

fn blank_timestamps(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if matches!(
                    key.as_str(),
                    "verifiedAt" | "lastRestart" | "startedAt" | "at"
                ) {
                    *value = serde_json::Value::String("<time>".into());
                } else {
                    blank_timestamps(value);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(blank_timestamps),
        _ => {}
    }
}

/// One node of a host tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir,
    File(Vec<u8>),
    Symlink(PathBuf),
}

/// The tree below `root`, by host path.
pub fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let host = format!("/{}", path.strip_prefix(root).unwrap().display());
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            out.insert(host, Entry::Symlink(std::fs::read_link(&path).unwrap()));
        } else if meta.is_dir() {
            out.insert(host, Entry::Dir);
            walk(root, &path, out);
        } else {
            out.insert(host, Entry::File(std::fs::read(&path).unwrap()));
        }
    }
}

/// A readable difference of two snapshots, for assertion messages.
pub fn diff(before: &BTreeMap<String, Entry>, after: &BTreeMap<String, Entry>) -> String {
    let mut lines = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => lines.push(format!("- {path}")),
            Some(other) if other != entry => {
                let show = |e: &Entry| match e {
                    Entry::File(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                lines.push(format!(
                    "~ {path}\n  before: {}\n  after:  {}",
                    show(entry),
                    show(other)
                ));
            }
            _ => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            lines.push(format!("+ {path}"));
        }
    }
    lines.join("\n")
}
