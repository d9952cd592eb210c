//! Typed views of the Gardener resources an extension reads and writes.
//!
//! The CRDs are Gardener's (installed from the gardener module, never generated from these
//! types), so every struct here is a client-side view: fields we do not use are not modelled
//! and are ignored on read. We never write whole objects back; writes are patches of the
//! fields we own.

pub mod cluster;
pub mod common;
pub mod extension;
pub mod managed_resource;

pub use cluster::{Cluster, ClusterSpec, Shoot, WorkerPool};
pub use common::{
    Condition, ConditionStatus, ErrorCode, LastError, LastOperation, OperationState, OperationType,
};
pub use extension::{Extension, ExtensionSpec, ExtensionStatus};
pub use managed_resource::{ManagedResource, ManagedResourceSpec, ManagedResourceStatus};

/// Annotation that asks an extension to act (`reconcile`, `migrate`, `restore`, `wait-for-state`).
pub const OPERATION_ANNOTATION: &str = "gardener.cloud/operation";
/// Freshness marker gardenlet writes with each request; never removed by extensions.
pub const TIMESTAMP_ANNOTATION: &str = "gardener.cloud/timestamp";
/// Operation annotation values.
pub mod operation {
    pub const RECONCILE: &str = "reconcile";
    pub const MIGRATE: &str = "migrate";
    pub const RESTORE: &str = "restore";
    pub const WAIT_FOR_STATE: &str = "wait-for-state";
}
/// Namespace label that marks a shoot's control-plane namespace in the seed.
pub const SHOOT_ROLE_LABEL: &str = "gardener.cloud/role";
/// Value of [`SHOOT_ROLE_LABEL`] on shoot namespaces.
pub const SHOOT_ROLE_VALUE: &str = "shoot";
/// Shoot annotation that confirms a forced deletion.
pub const FORCE_DELETION_ANNOTATION: &str = "confirmation.gardener.cloud/force-deletion";
/// Annotation gardenlet sets before deleting extension resources.
pub const DELETION_CONFIRMATION_ANNOTATION: &str = "confirmation.gardener.cloud/deletion";
