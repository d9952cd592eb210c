//! Delivering shims through the `OperatingSystemConfig` (OSC): what a mutating webhook adds to
//! a worker pool's OSC so that gardener-node-agent installs the pool's shims, instead of the
//! installer DaemonSet.
//!
//! Pure: [`mutate`] takes the OSC, the desired set and returns the mutated OSC. Per handler it
//! writes a `criConfig.containerd.plugins` entry with the values the installer writes into
//! `runtimes.<handler>`, and the shim's binaries (`content.imageRef`) and config files (inline)
//! as OSC files in a version-stamped directory below
//! [`crate::desired_shims::NODE_AGENT_RUNTIMES_DIR`].
//!
//! What we delivered before is recorded on the OSC itself, in [`DELIVERED_ANNOTATION`]
//! ([`Delivered`]): it is how our entries are told from everyone else's (which are never
//! touched), and how a handler that is no longer wanted gets its `op: remove` entry (the node
//! agent leaves a plugin table in place when its entry merely disappears).
//!
//! Files of a replaced version (an upgrade, a removed handler) stay one generation: they are
//! dropped at the next change of the delivered file set, not at the change that replaced them.
//! Pods started before an upgrade keep running on the old binary; containerd's runc shim runs
//! an OCI runtime (crun) again for `kill` and `delete` of those pods, and containerd runs a
//! shim binary's `delete` to clean up after a shim that died, so removing the file at once
//! would leave such pods unstoppable.

pub mod admit;
mod delivered;
mod files;
mod layout;
mod mutate;
mod plugins;

#[cfg(test)]
mod tests;

pub use delivered::{DELIVERED_ANNOTATION, Delivered};
pub use layout::VersionDir;
pub use mutate::mutate;
pub use plugins::{CRI_RUNTIMES_PATH, runtime_path};

/// Why an OSC cannot carry the pool's shims.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OscError {
    #[error(
        "OperatingSystemConfig {osc}: label {label} is missing, so its worker pool is unknown",
        label = crate::gardener::api::operating_system_config::POOL_LABEL
    )]
    NoPool { osc: String },
    #[error(
        "OperatingSystemConfig {osc}: spec.criConfig.name is {name:?}; shims need \"containerd\""
    )]
    NotContainerd { osc: String, name: String },
    #[error(
        "shim {shim}: binary {binary} is downloaded from a URL; the OperatingSystemConfig delivers files from images only"
    )]
    UrlBinary { shim: String, binary: String },
    #[error(
        "shim {shim}: nodeSelector selects nodes within a worker pool; the OperatingSystemConfig is the same for every node of the pool"
    )]
    NodeSelector { shim: String },
    #[error(
        "OperatingSystemConfig {osc}: spec.criConfig.containerd.plugins already has an entry for runtime handler {handler:?} that this extension did not write"
    )]
    ForeignPlugin { osc: String, handler: String },
    #[error(
        "OperatingSystemConfig {osc}: spec.files already has {path} that this extension did not write"
    )]
    ForeignFile { osc: String, path: String },
    #[error(
        "OperatingSystemConfig {osc}: annotation {annotation} is not valid: {reason}",
        annotation = DELIVERED_ANNOTATION
    )]
    Annotation { osc: String, reason: String },
}
