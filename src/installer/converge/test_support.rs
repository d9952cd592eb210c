//! Fixtures for the phases' tests: desired shims, labels, recorded shims, and an installer on a
//! temporary host root with an in-memory cluster. The host's containerd binary does not exist,
//! so a test that needs a restart or a verification scripts its outcome.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::desired_shims::{
    Binary, BinarySource, DesiredShim, DesiredShims, Mode, Rollout, SCHEMA,
};
use crate::installer::cluster::MemoryCluster;
use crate::installer::containerd::{FileRole, OwnedFile, Ownership, Plan};
use crate::installer::host::{Host, TestHost};
use crate::installer::payload::{MANIFEST, PayloadSpec};
use crate::installer::state::{ConfigTxn, Phase, STATE_FILE, ShimState, State, TxnPhase};

use super::facts::Facts;
use super::run_state::Run;
use super::selection::{ARCH_LABEL, Selection};
use super::{Installer, Settings};

pub const STATE_DIR: &str = "/var/lib/containerd-shim-installer";

pub fn shim(name: &str, handler: &str) -> DesiredShim {
    DesiredShim {
        name: name.into(),
        handler: handler.into(),
        runtime_type: format!("io.containerd.{handler}.v2"),
        version: "v1".into(),
        oci_runtime: false,
        binaries: vec![Binary {
            name: format!("containerd-shim-{handler}-v2"),
            source: BinarySource::Image {
                image: format!("example.com/{name}:v1"),
                path: format!("/containerd-shim-{handler}-v2"),
                sha256: BTreeMap::new(),
            },
        }],
        options: BTreeMap::new(),
        pod_annotations: vec![],
        privileged_without_host_devices: false,
        config_files: vec![],
        node_selector: BTreeMap::new(),
        worker_pools: vec![],
    }
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

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// The labels of an amd64 node, plus these.
pub fn node(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut labels = labels(extra);
    labels.insert(ARCH_LABEL.into(), "amd64".into());
    labels
}

/// A run of `desired` on an amd64 node with these labels, starting from `state`.
pub fn run_of<'a>(
    desired: &'a DesiredShims,
    state: State,
    node_labels: &[(&str, &str)],
) -> Run<'a> {
    let labels = node(node_labels);
    Run::new(Selection::new(desired, &labels).unwrap(), state, labels)
}

/// An engine plan that changes nothing.
pub fn config_plan(changed: bool) -> Plan {
    Plan {
        target: None,
        backups: vec![],
        writes: vec![],
        deletes: vec![],
        validation: None,
        ownership: Ownership::default(),
        changed,
    }
}

/// Facts for the run's selected shims, each needing the version directory `dir`, with an
/// engine plan that changes nothing.
pub fn facts_for(run: &Run<'_>, dir: &str, gone: &[&str]) -> Facts {
    Facts {
        specs: run
            .selection
            .shims
            .iter()
            .map(|(shim, _)| PayloadSpec {
                shim: shim.name.clone(),
                version: shim.version.clone(),
                dir: dir.into(),
                files: vec![],
            })
            .collect(),
        runtimes: vec![],
        config: config_plan(false),
        gone: gone.iter().map(|name| name.to_string()).collect(),
    }
}

/// A shim the state file records as verified with `hash`.
pub fn recorded(handler: &str, hash: &str) -> ShimState {
    ShimState {
        handler: handler.into(),
        desired_hash: hash.into(),
        phase: Phase::Active,
        active: None,
        previous: Vec::new(),
        verified_hash: Some(hash.into()),
        verified_at: Some(jiff::Timestamp::UNIX_EPOCH),
        last_error: None,
    }
}

/// A record of owning a file we created (enough to make the record non-empty).
pub fn owned(path: &str) -> Ownership {
    Ownership {
        files: vec![OwnedFile {
            created: true,
            ..OwnedFile::new(path, FileRole::Config)
        }],
    }
}

/// A journaled config change that touched nothing yet.
pub fn txn() -> ConfigTxn {
    ConfigTxn {
        phase: TxnPhase::Writing,
        started_at: jiff::Timestamp::UNIX_EPOCH,
        rollback: Vec::new(),
        created_dirs: Vec::new(),
        symlinks: BTreeMap::new(),
        ownership_before: Ownership::default(),
        ownership_after: Ownership::default(),
        validation: None,
        runtimes: Vec::new(),
        shims: Vec::new(),
    }
}

/// An installer on a temporary host root.
pub struct Bed {
    pub dir: tempfile::TempDir,
    pub host: Arc<TestHost>,
    pub cluster: MemoryCluster,
    pub installer: Installer<MemoryCluster>,
}

impl Bed {
    pub fn new(node_labels: BTreeMap<String, String>) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join(&STATE_DIR[1..])).unwrap();
        let host = Arc::new(TestHost::new(&root, "/nonexistent/containerd"));
        let cluster = MemoryCluster::new("node-a", node_labels);
        let settings = Settings::new(STATE_DIR, dir.path().join("staging"));
        let installer = Installer::new(
            host.clone() as Arc<dyn Host>,
            cluster.clone(),
            settings,
            None,
        );
        Bed {
            dir,
            host,
            cluster,
            installer,
        }
    }

    /// Where a host path lies in the temporary tree.
    pub fn path(&self, host_path: &str) -> PathBuf {
        self.host.path(host_path)
    }

    pub fn write(&self, host_path: &str, content: &str) {
        let path = self.path(host_path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn read(&self, host_path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(host_path)).ok()
    }

    /// Creates `versions/<shim>/<dir>` with one file and an empty manifest: complete for a
    /// spec without files.
    pub fn version(&self, shim: &str, dir: &str) {
        let dir = format!("{STATE_DIR}/versions/{shim}/{dir}");
        self.write(&format!("{dir}/bin/shim"), "binary");
        self.write(&format!("{dir}/{MANIFEST}"), r#"{"files":[]}"#);
    }

    /// Every path below the host root, sorted (to show that a phase changed nothing).
    pub fn tree(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                out.push(path.strip_prefix(root).unwrap().display().to_string());
                if path.is_dir() && !path.is_symlink() {
                    walk(&path, root, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.host.root(), self.host.root(), &mut out);
        out.sort();
        out
    }

    /// The state file as stored, `None` when there is none.
    pub fn stored(&self) -> Option<State> {
        let path = Path::new(STATE_DIR).join(STATE_FILE);
        self.host
            .path(&path)
            .exists()
            .then(|| State::load(&*self.host, &path).unwrap())
    }

    /// Points `current/<shim>` at a version directory.
    pub fn link(&self, shim: &str, dir: &str) {
        let link = self.path(&format!("{STATE_DIR}/current/{shim}"));
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(format!("../versions/{shim}/{dir}"), link).unwrap();
    }
}
