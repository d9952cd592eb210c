//! The real nodes of a control plane started with `--nodes` (hack/nodes/lib.sh): machines with
//! systemd, containerd and a kubelet, joined to the shoot. Tests look at them through the API
//! and on the node itself: its files (the machine's root file system is a directory here),
//! commands run inside it (`nsenter` into the machine's namespaces), its journal and the OCI
//! runtimes' own state. Every image a node runs comes from the control plane's registry
//! ([`Registry`]), named by digest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;

use super::Env;

/// How to start what these tests need, named in every failure.
pub const NODES_HINT: &str = "run them with `make test`, or start a control plane with real nodes: \
     hack/nodes/images.sh .local/images && hack/control-plane.sh up --nodes containerd1,containerd17,containerd2 --node-images .local/images";

/// The nodes of the running control plane.
#[derive(Clone, Debug)]
pub struct RealNodes {
    pub nodes: Vec<RealNode>,
    /// The worker pool every node belongs to.
    pub pool: String,
    /// The image references of `hack/nodes/images.sh` (`INSTALLER_IMAGE`, `WORKLOAD_IMAGE`, ...).
    pub images: BTreeMap<String, String>,
    /// The directory with the images (OCI layouts) and the image-vector overwrite.
    pub images_dir: PathBuf,
    /// The registry the nodes pull from.
    pub registry: Registry,
}

/// The release before this build (hack/previous-release.env), built from its own sources.
#[derive(Clone, Debug)]
pub struct PreviousRelease {
    pub commit: String,
    /// Its controller binary.
    pub controller: PathBuf,
    /// The `IMAGEVECTOR_OVERWRITE` that points its controller at its own installer image.
    pub image_vector_overwrite: PathBuf,
    /// Its installer image, by digest.
    pub installer_image: String,
}

/// The control plane's OCI registry, which every node pulls its images from. Tests stop and
/// start it through the launcher (`hack/control-plane.sh stop-registry` / `start-registry`).
#[derive(Clone, Debug)]
pub struct Registry {
    /// `host:port`, as image references name it.
    pub address: String,
    dir: PathBuf,
}

/// The registry stopped; dropping it (also when the test fails) starts the registry again, so
/// that the tests after this one find it serving.
#[must_use = "the registry starts again when the outage is dropped"]
pub struct Outage {
    registry: Registry,
    ended: bool,
}

impl Registry {
    fn launcher(&self, subcommand: &str) -> Output {
        let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/control-plane.sh");
        Command::new(launcher)
            .args([subcommand, "--dir"])
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {launcher}: {e}"))
    }

    /// Stops the registry process (its storage stays).
    pub fn stop(&self) -> Outage {
        let output = self.launcher("stop-registry");
        assert!(
            output.status.success(),
            "stop-registry failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Outage {
            registry: self.clone(),
            ended: false,
        }
    }

    /// What the registry logged so far (its access log included), across restarts.
    pub fn log(&self) -> String {
        let file = self.dir.join("logs").join("registry.log");
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
    }

    /// The repository (path in the registry) of a reference into this registry.
    pub fn repository<'a>(&self, reference: &'a str) -> &'a str {
        let path = reference
            .strip_prefix(&format!("{}/", self.address))
            .unwrap_or_else(|| panic!("{reference} is not in the registry {}", self.address));
        path.split(['@', ':']).next().unwrap_or(path)
    }
}

impl Outage {
    /// Starts the registry again and waits until it serves.
    pub fn end(mut self) {
        self.ended = true;
        let output = self.registry.launcher("start-registry");
        assert!(
            output.status.success(),
            "start-registry failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.ended {
            let output = self.registry.launcher("start-registry");
            if !output.status.success() {
                eprintln!(
                    "starting the registry again failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

/// One node: a machine of the control plane.
#[derive(Clone, Debug)]
pub struct RealNode {
    pub name: String,
    dir: PathBuf,
}

impl RealNodes {
    /// Every node's containerd configuration files ([`RealNode::containerd_config`]), in node
    /// order: what a test compares the nodes with after a change.
    pub fn containerd_configs(&self) -> Vec<BTreeMap<String, Vec<u8>>> {
        self.nodes.iter().map(RealNode::containerd_config).collect()
    }

    /// Reads the control plane's env file; fails the test, naming the command that starts real
    /// nodes, when there are none.
    pub fn load(env: &Env) -> RealNodes {
        let file = env.dir.join("env");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {NODES_HINT}", file.display()));
        let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let names: Vec<&str> = vars
            .get("NODES")
            .map(|n| n.split(',').filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        assert!(
            !names.is_empty(),
            "the control plane in {} has no real nodes; {NODES_HINT}",
            env.dir.display()
        );
        let images_dir = PathBuf::from(vars.get("NODE_IMAGES").copied().unwrap_or_default());
        let images_env = images_dir.join("images.env");
        let images: BTreeMap<String, String> = std::fs::read_to_string(&images_env)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {NODES_HINT}", images_env.display()))
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let address = vars
            .get("REGISTRY")
            .unwrap_or_else(|| panic!("{} names no REGISTRY; {NODES_HINT}", file.display()))
            .to_string();
        assert_eq!(
            images.get("REGISTRY"),
            Some(&address),
            "the images in {} were built for another registry; {NODES_HINT}",
            images_dir.display()
        );
        RealNodes {
            nodes: names
                .iter()
                .map(|name| RealNode {
                    name: name.to_string(),
                    dir: env.dir.join("nodes").join(name),
                })
                .collect(),
            pool: vars.get("NODE_POOL").unwrap_or(&"worker-a").to_string(),
            images,
            images_dir,
            registry: Registry {
                address,
                dir: env.dir.clone(),
            },
        }
    }

    /// An image reference from `images.env`.
    pub fn image(&self, key: &str) -> &str {
        self.images
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {}", self.images_dir.display()))
    }

    /// The `IMAGEVECTOR_OVERWRITE` file that points the controller at the imported images.
    pub fn image_vector_overwrite(&self) -> PathBuf {
        self.images_dir.join("images-overwrite.yaml")
    }

    /// The previous release's build (hack/nodes/previous-release.sh, which hack/nodes/images.sh
    /// runs unless told `--without-previous-release`).
    pub fn previous_release(&self) -> PreviousRelease {
        let key = |k: &str| {
            self.images.get(k).cloned().unwrap_or_else(|| {
                panic!(
                    "no {k} in {}/images.env: build the images with the previous release: hack/nodes/images.sh {}",
                    self.images_dir.display(),
                    self.images_dir.display()
                )
            })
        };
        PreviousRelease {
            commit: key("PREVIOUS_RELEASE_COMMIT"),
            controller: PathBuf::from(key("PREVIOUS_CONTROLLER_BIN")),
            image_vector_overwrite: self.images_dir.join("images-overwrite-previous.yaml"),
            installer_image: key("PREVIOUS_INSTALLER_IMAGE"),
        }
    }

    /// The `SHIM_CATALOG_OVERLAY` file that offers the locally built test shims.
    pub fn catalog_overlay(&self) -> PathBuf {
        self.images_dir.join("catalog-overlay.yaml")
    }

    pub fn node(&self, name: &str) -> &RealNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// The node running containerd of this major version.
    pub fn with_containerd(&self, major: u32) -> &RealNode {
        self.nodes
            .iter()
            .find(|n| n.containerd_major() == major)
            .unwrap_or_else(|| panic!("no node with containerd {major}.x; {NODES_HINT}"))
    }
}

/// A message of a unit in a node's journal.
#[derive(Clone, Debug)]
pub struct JournalEntry {
    /// Microseconds since the epoch.
    pub at_us: u64,
    pub message: String,
}

/// One containerd restart as systemd logged it: from "Stopping" to "Started".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart {
    pub stopping_us: u64,
    pub started_us: u64,
}

impl Restart {
    pub fn overlaps(&self, other: &Restart) -> bool {
        self.stopping_us <= other.started_us && other.stopping_us <= self.started_us
    }
}

impl RealNode {
    /// The machine's init: commands enter its namespaces.
    fn leader(&self) -> String {
        let file = self.dir.join("leader");
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {NODES_HINT}", file.display()))
            .trim()
            .to_string()
    }

    /// A command that runs inside the node, to spawn when it must outlive the call (a probe
    /// that runs while something else happens).
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["-t", &self.leader(), "-m", "-u", "-i", "-n", "-p", "--"])
            .args(argv);
        command
    }

    /// Runs a command inside the node.
    pub fn exec(&self, argv: &[&str]) -> Output {
        self.command(argv)
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter for {}: {e}", self.name))
    }

    /// Runs a command inside the node and returns its stdout; fails the test when it fails.
    pub fn run(&self, argv: &[&str]) -> String {
        let output = self.exec(argv);
        assert!(
            output.status.success(),
            "{} on {}: {}\n{}",
            argv.join(" "),
            self.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A file of the node's root file system (not /run or /tmp, which are the machine's own
    /// memory file systems: use [`RealNode::run`] with `cat` for those).
    pub fn path(&self, path: &str) -> PathBuf {
        self.dir.join("rootfs").join(path.trim_start_matches('/'))
    }

    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(path)).ok()
    }

    pub fn exists(&self, path: &str) -> bool {
        self.path(path).symlink_metadata().is_ok()
    }

    /// Every file below a directory of the node, with its content, by path relative to it.
    pub fn tree(&self, dir: &str) -> BTreeMap<String, Vec<u8>> {
        let root = self.path(dir);
        let mut out = BTreeMap::new();
        walk(&root, &root, &mut out);
        out
    }

    /// The major version of the node's containerd.
    pub fn containerd_major(&self) -> u32 {
        let flavour = std::fs::read_to_string(self.dir.join("flavour")).unwrap_or_default();
        match flavour.trim() {
            "containerd1" | "containerd17" => 1,
            "containerd2" => 2,
            other => panic!("{}: unknown node flavour {other:?}", self.name),
        }
    }

    /// Messages of a unit since a point in time (microseconds since the epoch).
    pub fn journal(&self, unit: &str, since_us: u64) -> Vec<JournalEntry> {
        #[derive(Deserialize)]
        struct Line {
            #[serde(rename = "__REALTIME_TIMESTAMP")]
            at: String,
            #[serde(rename = "MESSAGE", default)]
            message: serde_json::Value,
        }
        let since = format!("@{}.{:06}", since_us / 1_000_000, since_us % 1_000_000);
        let text = self.run(&[
            "journalctl",
            "--no-pager",
            "-o",
            "json",
            "-u",
            unit,
            "--since",
            &since,
        ]);
        text.lines()
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
            .filter_map(|l| {
                Some(JournalEntry {
                    at_us: l.at.parse().ok()?,
                    message: l.message.as_str().unwrap_or_default().to_string(),
                })
            })
            .collect()
    }

    /// containerd's restarts since a point in time, from systemd's own messages.
    pub fn containerd_restarts(&self, since_us: u64) -> Vec<Restart> {
        let mut restarts = Vec::new();
        let mut stopping = None;
        for entry in self.journal("containerd.service", since_us) {
            if entry.message.starts_with("Stopping containerd") {
                stopping = Some(entry.at_us);
            } else if entry.message.starts_with("Started containerd")
                && let Some(stopping_us) = stopping.take()
            {
                restarts.push(Restart {
                    stopping_us,
                    started_us: entry.at_us,
                });
            }
        }
        restarts
    }

    /// Container IDs an OCI runtime lists in containerd's CRI state directory.
    pub fn oci_containers(&self, runtime: &str) -> Vec<String> {
        let text = self.run(&[
            runtime,
            "--root",
            "/run/containerd/runc/k8s.io",
            "list",
            "-q",
        ]);
        text.split_whitespace().map(str::to_string).collect()
    }

    /// Whether containerd's CRI image store has this image (a digest reference names exactly
    /// one).
    pub fn has_image(&self, reference: &str) -> bool {
        self.exec(&["crictl", "inspecti", "-q", reference])
            .status
            .success()
    }

    /// Removes an image from containerd's CRI image store, so that the next pod needing it
    /// pulls it.
    pub fn remove_image(&self, reference: &str) {
        if self.has_image(reference) {
            self.run(&["crictl", "rmi", reference]);
        }
        assert!(
            !self.has_image(reference),
            "{}: {reference} is still there",
            self.name
        );
    }

    /// The containerd config files as they are now: every file below /etc/containerd.
    pub fn containerd_config(&self) -> BTreeMap<String, Vec<u8>> {
        self.tree("/etc/containerd")
    }
}

/// Now, in microseconds since the epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or_default()
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, out);
        } else {
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            let content = if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .map(|t| format!("-> {}", t.display()).into_bytes())
                    .unwrap_or_default()
            } else {
                std::fs::read(&path).unwrap_or_default()
            };
            out.insert(relative, content);
        }
    }
}
