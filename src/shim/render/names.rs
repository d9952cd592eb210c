//! Names, labels and paths shared by the shoot bundle and the node installer's command line.

use std::collections::BTreeMap;

/// Namespace of the installer in the shoot.
pub const NAMESPACE: &str = "kube-system";
/// Name of the installer's ServiceAccount, DaemonSet, ConfigMap, Role and RoleBinding.
pub const INSTALLER: &str = "containerd-shim-installer";
/// Name of the installer's ClusterRole and ClusterRoleBinding (Gardener's naming convention for
/// global resources of an extension).
pub const CLUSTER_ROLE: &str = "extensions.gardener.cloud:containerd-shim:installer";
/// Name of the admission policy (and its binding) that confines the installer's node writes.
pub const NODE_POLICY: &str = "containerd-shim-installer-node-labels.extensions.gardener.cloud";
/// The restart-budget Lease of slot `i` (created by the installer in [`NAMESPACE`]).
pub fn restart_lease(slot: u32) -> String {
    format!("containerd-shim-restart-{slot}")
}

/// Priority class of the installer: it keeps a node's container runtime configured.
pub const PRIORITY_CLASS: &str = "system-node-critical";

/// Pod-template annotation holding the sha256 of the desired set: a change rolls the DaemonSet.
pub const DESIRED_HASH_ANNOTATION: &str = "containerd-shim.extensions.gardener.cloud/desired-shims-sha256";

/// Label every object of the bundle carries.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`MANAGED_BY_LABEL`] and the ManagedResource's origin.
pub const MANAGED_BY: &str = "gardener-extension-containerd-shim";
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

/// The DaemonSet's selector: stable across versions (a selector is immutable).
pub fn selector() -> BTreeMap<String, String> {
    BTreeMap::from([(NAME_LABEL.to_string(), INSTALLER.to_string())])
}

/// Paths inside the installer pod, and the installer's command line. The installer binary
/// defines the same defaults; both sides use these constants.
pub mod paths {
    /// The ConfigMap with the desired set.
    pub const DESIRED_DIR: &str = "/etc/containerd-shim-installer";
    /// The host's root file system parts the installer touches are mounted below this.
    pub const HOST_ROOT: &str = "/host";
    /// Host directory with the installer's state, versioned binaries and config files.
    pub const HOST_STATE_DIR: &str = "/var/lib/containerd-shim-installer";
    /// Host directory with containerd's configuration.
    pub const HOST_CONTAINERD_DIR: &str = "/etc/containerd";
    /// emptyDir shared by the init containers that stage binaries and the installer.
    pub const STAGING_DIR: &str = "/staging";
    /// The installer binary copied into the staging volume, runnable in any image.
    pub const STAGED_INSTALLER: &str = "/staging/bin/containerd-shim-installer";
    /// emptyDir with the node's verification status, read by the readiness probe.
    pub const STATUS_DIR: &str = "/run/containerd-shim-installer";
    /// The installer binary in its own image.
    pub const INSTALLER_BINARY: &str = "/containerd-shim-installer";
}
