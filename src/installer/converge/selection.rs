//! Which shims this node must have, decided from its labels alone, and the hashes that tell a
//! later run whether anything about them changed. Pure: nothing here touches the host.

use std::collections::BTreeMap;

use crate::desired_shims::{Arch, DesiredShim, DesiredShims, Mode};
use crate::installer::digest::sha256_hex;
use crate::installer::error::InstallerError;
use crate::installer::state::State;

/// The label Gardener puts on every node with its worker pool's name.
pub const WORKER_POOL_LABEL: &str = "worker.gardener.cloud/pool";
/// The label with the node's CPU architecture.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";

/// Whether a shim applies to a node with these labels.
pub fn selects(shim: &DesiredShim, labels: &BTreeMap<String, String>) -> bool {
    let selector = shim
        .node_selector
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    let pool = shim.worker_pools.is_empty()
        || labels
            .get(WORKER_POOL_LABEL)
            .is_some_and(|pool| shim.worker_pools.contains(pool));
    selector && pool
}

/// The shims this node must have.
pub fn select<'a>(
    desired: &'a DesiredShims,
    labels: &BTreeMap<String, String>,
) -> Vec<&'a DesiredShim> {
    if desired.mode == Mode::Uninstall {
        return Vec::new();
    }
    desired
        .shims
        .iter()
        .filter(|shim| selects(shim, labels))
        .collect()
}

/// The node's architecture: its label, else the one this binary runs on.
pub fn node_arch(labels: &BTreeMap<String, String>) -> Result<Arch, InstallerError> {
    if let Some(value) = labels.get(ARCH_LABEL) {
        return Arch::from_label(value).ok_or_else(|| {
            InstallerError::Cluster(format!("node label {ARCH_LABEL}={value} is not supported"))
        });
    }
    match std::env::consts::ARCH {
        "x86_64" => Ok(Arch::Amd64),
        "aarch64" => Ok(Arch::Arm64),
        other => Err(InstallerError::Cluster(format!(
            "the node has no {ARCH_LABEL} label and {other} is not a supported architecture"
        ))),
    }
}

/// A shim's description for one architecture in one hash: what "verified" refers to, so any
/// change of the description makes the node verify again.
fn shim_hash(shim: &DesiredShim, arch: Arch) -> String {
    let json = serde_json::to_string(shim).unwrap_or_default();
    sha256_hex(format!("{}\n{json}", arch.as_str()).as_bytes())
}

/// The node's desired state in one hash (mode, architecture, selected shims).
fn node_hash(mode: Mode, selected: &[(&DesiredShim, String)], arch: Arch) -> String {
    let mut text = format!("{mode:?}\n{}\n", arch.as_str());
    for (shim, hash) in selected {
        text.push_str(&format!("{}={hash}\n", shim.name));
    }
    sha256_hex(text.as_bytes())
}

/// This node's share of the desired set.
pub(super) struct Selection<'a> {
    pub desired: &'a DesiredShims,
    pub arch: Arch,
    /// The selected shims, each with the hash of its description.
    pub shims: Vec<(&'a DesiredShim, String)>,
    /// A failure is recorded against this: the same desired set is not retried, a new one is.
    pub node_hash: String,
}

impl<'a> Selection<'a> {
    pub fn new(
        desired: &'a DesiredShims,
        labels: &BTreeMap<String, String>,
    ) -> Result<Self, InstallerError> {
        let arch = node_arch(labels)?;
        let shims: Vec<(&DesiredShim, String)> = select(desired, labels)
            .into_iter()
            .map(|shim| (shim, shim_hash(shim, arch)))
            .collect();
        let node_hash = node_hash(desired.mode, &shims, arch);
        Ok(Selection {
            desired,
            arch,
            shims,
            node_hash,
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.shims.iter().any(|(shim, _)| shim.name == name)
    }

    pub fn find(&self, name: &str) -> Option<&(&'a DesiredShim, String)> {
        self.shims.iter().find(|(shim, _)| shim.name == name)
    }

    /// Whether this exact desired set already failed on this node.
    pub fn failed_before(&self, state: &State) -> bool {
        state
            .failure
            .as_ref()
            .is_some_and(|failure| failure.node_hash == self.node_hash)
    }

    /// A shim's runtime handler: as desired when it is selected, else as recorded (a shim that
    /// is gone is known only from the state file).
    pub fn handler_of(&self, name: &str, state: &State) -> Option<String> {
        self.find(name)
            .map(|(shim, _)| shim.handler.clone())
            .or_else(|| state.shims.get(name).map(|s| s.handler.clone()))
    }
}
