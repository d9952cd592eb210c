//! The containerd configuration engine of the node installer: where containerd's config is, how
//! to add our runtime handlers to it safely, how to take exactly them out again, and how to prove
//! with the node's containerd that the result works.
//!
//! Everything here is pure: it reads host files through [`HostFs`] and returns a [`Plan`] (files
//! to write and delete, a backup, a validation, the new [`Ownership`] record). The installer
//! daemon applies the plan, runs the validation command and restarts containerd only when
//! [`Plan::changed`].
//!
//! Typical use:
//!
//! ```text
//! let containerd = ContainerdVersion::parse(&output_of("containerd --version"))?;
//! let host = HostRoot::new("/host");
//! let target = locate(&host, containerd, None)?;
//! let runtimes = shims.map(|s| RuntimeEntry::from_desired(s, symlink, config_dir, bin_dir));
//! let plan = plan_install(&host, &target, &runtimes, &state.ownership)?;
//! apply(plan) → validate (plan.validation.command / check) → store plan.ownership → restart if plan.changed
//! ```
//!
//! Write strategy (see [`WriteStrategy`], decided by [`locate`]):
//!
//! | config | containerd 1.x | containerd ≥ 2.0 |
//! |---|---|---|
//! | `/etc/containerd/config.toml` (or `--containerd-config`) | edit in place, backup | drop-in in a directory an import glob covers; else our drop-in plus one `imports` entry naming exactly it |
//! | no config file | create it with our tables | create it importing our drop-in |
//!
//! Distribution layouts (k3s, rke2, k0s, microk8s) are out of scope (see [`locate`]).
//!
//! Why: containerd 1.x replaces whole plugin tables from imported files, so a drop-in holding
//! only our runtime would wipe the CRI settings; 2.0+ deep-merges, and a drop-in of our own
//! keeps every byte of the main file untouched (gardener-node-agent re-renders that file). A
//! drop-in declares the main file's `version`, because containerd migrates each file by its own
//! declared version. When nothing imports a drop-in directory we add exactly our file's path:
//! adding a glob could activate stale files someone left in that directory. One drop-in holds
//! all our handlers ([`DROP_IN_NAME`]), so a change of the set is one write and one validation.

mod config_version;
mod daemon_version;
mod dump;
mod edit;
mod effective;
mod error;
mod file_editors;
mod glob;
mod host;
mod imports;
mod key_path;
mod locate;
#[cfg(any(test, feature = "test-util"))]
mod memory_host;
mod ownership;
mod plan;
mod runtime;
mod sources;
mod style;
mod text;
mod toml_value;
mod validation;

#[cfg(test)]
mod foreign_docs;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use config_version::ConfigVersion;
pub use daemon_version::ContainerdVersion;
pub use dump::{DumpOutput, ExpectedRuntime, check_dump, dump_command};
pub use effective::{EffectiveConfig, KeptRuntime, Ours, differences, ensure_only_ours_changed};
pub use error::ConfigError;
pub use host::{HostFs, HostRoot};
pub use imports::DROP_IN_NAME;
pub use key_path::KeyPath;
pub use locate::{DEFAULT_CONFIG, Distro, Target, WriteStrategy, locate};
#[cfg(any(test, feature = "test-util"))]
pub use memory_host::MemoryHost;
pub use ownership::{FileRole, KeptHandler, OwnedFile, OwnedHandler, Ownership};
pub use plan::{
    BACKUP_SUFFIX, BASELINE_SUFFIX, Backup, FileDelete, FileWrite, Plan, SCRATCH_SUFFIX,
    plan_install, plan_install_keeping, plan_uninstall,
};
pub use runtime::{ManagedKey, RuntimeEntry, validate_handler};
pub use sources::{node_agent_table, node_agent_values_in};
pub use validation::{ScratchFile, Validation};
