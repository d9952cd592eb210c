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

#[cfg(test)]
mod tests {
    use super::super::test_support::{desired, labels, recorded, shim};
    use super::*;
    use crate::installer::state::Failure;

    #[test]
    fn a_shim_applies_where_its_selector_and_pools_match() {
        let mut gpu = shim("gpu", "gpu");
        gpu.node_selector = BTreeMap::from([("gpu".into(), "true".into())]);
        gpu.worker_pools = vec!["pool-a".into(), "pool-b".into()];
        let plain = shim("spin", "spin");

        let both = labels(&[(WORKER_POOL_LABEL, "pool-b"), ("gpu", "true")]);
        assert!(selects(&gpu, &both));
        assert!(selects(&plain, &both));
        assert!(!selects(
            &gpu,
            &labels(&[(WORKER_POOL_LABEL, "pool-c"), ("gpu", "true")])
        ));
        assert!(!selects(
            &gpu,
            &labels(&[(WORKER_POOL_LABEL, "pool-a"), ("gpu", "no")])
        ));
        assert!(!selects(&gpu, &labels(&[("gpu", "true")])), "no pool label");
        assert!(selects(&plain, &BTreeMap::new()));

        let set = desired(vec![plain, gpu]);
        let names =
            |list: Vec<&DesiredShim>| list.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(select(&set, &both)), ["spin", "gpu"]);
        assert_eq!(names(select(&set, &BTreeMap::new())), ["spin"]);
        let mut uninstall = set.clone();
        uninstall.mode = Mode::Uninstall;
        assert!(select(&uninstall, &both).is_empty());
    }

    #[test]
    fn the_arch_comes_from_the_label_else_from_this_binary() {
        assert_eq!(
            node_arch(&labels(&[(ARCH_LABEL, "arm64")])).unwrap(),
            Arch::Arm64
        );
        let err = node_arch(&labels(&[(ARCH_LABEL, "s390x")])).unwrap_err();
        assert!(err.to_string().contains("s390x"), "{err}");
        let own = node_arch(&BTreeMap::new());
        match std::env::consts::ARCH {
            "x86_64" => assert_eq!(own.unwrap(), Arch::Amd64),
            "aarch64" => assert_eq!(own.unwrap(), Arch::Arm64),
            _ => assert!(own.is_err()),
        }
    }

    #[test]
    fn hashes_change_with_the_description_the_arch_and_the_mode() {
        let spin = shim("spin", "spin");
        let mut changed = spin.clone();
        changed.version = "v2".into();
        assert_eq!(shim_hash(&spin, Arch::Amd64), shim_hash(&spin, Arch::Amd64));
        assert_ne!(
            shim_hash(&spin, Arch::Amd64),
            shim_hash(&changed, Arch::Amd64)
        );
        assert_ne!(shim_hash(&spin, Arch::Amd64), shim_hash(&spin, Arch::Arm64));

        let hash = shim_hash(&spin, Arch::Amd64);
        let one = [(&spin, hash.clone())];
        assert_eq!(
            node_hash(Mode::Install, &one, Arch::Amd64),
            node_hash(Mode::Install, &one, Arch::Amd64)
        );
        assert_ne!(
            node_hash(Mode::Install, &one, Arch::Amd64),
            node_hash(Mode::Install, &[], Arch::Amd64)
        );
        assert_ne!(
            node_hash(Mode::Install, &[], Arch::Amd64),
            node_hash(Mode::Uninstall, &[], Arch::Amd64)
        );
    }

    #[test]
    fn a_failure_counts_only_for_the_set_it_was_recorded_for() {
        let set = desired(vec![shim("spin", "spin")]);
        let selection = Selection::new(&set, &labels(&[(ARCH_LABEL, "amd64")])).unwrap();
        assert_eq!(selection.shims.len(), 1);
        assert!(selection.contains("spin") && !selection.contains("wasm"));

        let mut state = State::new();
        assert!(!selection.failed_before(&state));
        state.failure = Some(Failure {
            node_hash: selection.node_hash.clone(),
            error: "boom".into(),
            at: jiff::Timestamp::UNIX_EPOCH,
        });
        assert!(selection.failed_before(&state));
        let other = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let other = Selection::new(&other, &labels(&[(ARCH_LABEL, "amd64")])).unwrap();
        assert!(!other.failed_before(&state));
    }

    #[test]
    fn a_gone_shim_is_known_by_its_recorded_handler() {
        let set = desired(vec![shim("spin", "spin-handler")]);
        let selection = Selection::new(&set, &labels(&[(ARCH_LABEL, "amd64")])).unwrap();
        let mut state = State::new();
        state
            .shims
            .insert("old".into(), recorded("old-handler", "h"));
        assert_eq!(
            selection.handler_of("spin", &state).as_deref(),
            Some("spin-handler")
        );
        assert_eq!(
            selection.handler_of("old", &state).as_deref(),
            Some("old-handler")
        );
        assert_eq!(selection.handler_of("none", &state), None);
    }
}
