//! Names, labels and paths shared by the shoot bundle and the node installer's command line.

use std::collections::BTreeMap;

/// Namespace of the installer in the shoot.
pub const NAMESPACE: &str = "kube-system";
/// Name of the installer's ServiceAccount, Role and RoleBinding, and the prefix of its
/// DaemonSets and ConfigMaps.
pub const INSTALLER: &str = "containerd-shim-installer";

/// Label on an installer DaemonSet and its pods: the worker pool it serves.
pub const POOL_LABEL: &str = "containerd-shim.extensions.gardener.cloud/pool";

/// The installer DaemonSet of a worker pool (Gardener's pool names are DNS labels of at most
/// 15 characters, so the name stays well within the limits).
pub fn daemon_set(pool: &str) -> String {
    format!("{INSTALLER}-{pool}")
}
/// Name of the installer's ClusterRole and ClusterRoleBinding (Gardener's naming convention for
/// global resources of an extension).
pub const CLUSTER_ROLE: &str = "extensions.gardener.cloud:containerd-shim:installer";
/// Name of the admission policy (and its binding) that confines the installer's node writes.
pub const NODE_POLICY: &str = "containerd-shim-installer-node-labels.extensions.gardener.cloud";
/// Name of the admission policy (and its binding) that limits which Leases the installer creates.
pub const LEASE_POLICY: &str = "containerd-shim-installer-leases.extensions.gardener.cloud";
pub use crate::desired_shims::restart_lease;

/// Priority class of the installer: it keeps a node's container runtime configured.
pub const PRIORITY_CLASS: &str = "system-node-critical";

/// Pod-template annotation holding the sha256 of the desired set: a change rolls the DaemonSet.
pub const DESIRED_HASH_ANNOTATION: &str =
    "containerd-shim.extensions.gardener.cloud/desired-shims-sha256";

/// gardener-resource-manager's garbage collector deletes a ConfigMap with this label once no
/// workload refers to it (by a [`reference_annotation`]); until then, dropping it from the
/// bundle does not delete it, so pods of an older revision keep their desired set.
pub const GARBAGE_COLLECTABLE_LABEL: &str =
    "resources.gardener.cloud/garbage-collectable-reference";

/// The annotation by which a workload declares that it uses a ConfigMap, in the form
/// gardener-resource-manager's garbage collector reads: `reference.resources.gardener.cloud/
/// configmap-<first 8 hex digits of the name's sha256>: <name>`.
pub fn reference_annotation(config_map: &str) -> (String, String) {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(config_map.as_bytes()));
    (
        format!(
            "reference.resources.gardener.cloud/configmap-{}",
            &digest[..8]
        ),
        config_map.to_string(),
    )
}

/// Label every object of the bundle carries.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`MANAGED_BY_LABEL`] and the ManagedResource's origin.
pub const MANAGED_BY: &str = crate::shim::identity::COMPONENT;
/// Value of [`PART_OF_LABEL`].
pub const PART_OF: &str = "containerd-shim";

/// The labels of a bundle object of the given component (`installer`, `runtime-class`, ...).
pub fn labels(component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), INSTALLER.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (PART_OF_LABEL.to_string(), PART_OF.to_string()),
        (COMPONENT_LABEL.to_string(), component.to_string()),
    ])
}

/// A pool's DaemonSet's selector: stable across versions (a selector is immutable).
pub fn selector(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), INSTALLER.to_string()),
        (POOL_LABEL.to_string(), pool.to_string()),
    ])
}

/// Paths inside the installer pod: shared with the installer through [`crate::desired_shims`].
pub use crate::desired_shims::pod_paths as paths;
