//! The `Extension` reconciler with Gardener's exact contract (gardener-contract.md §1):
//! operation annotations, finalizers, operation types, status, Cluster awareness.
//!
//! - [`actuator`]: the trait an extension implements;
//! - [`operation`], [`predicate`], [`status`]: the pure rules;
//! - [`reconciler`]: one reconcile of one object;
//! - [`controller`]: watches, event filtering, queue, concurrency.

pub mod actuator;
pub mod controller;
pub mod error;
pub mod events;
pub mod operation;
pub mod options;
pub mod predicate;
pub mod reconciler;
pub mod status;

pub use actuator::{Actuator, ActuatorContext, ClusterInfo, Outcome};
pub use error::ReconcileError;
pub use predicate::TriggerMode;
pub use reconciler::{Context, ControllerMetrics, NoObserver, OperationObserver, ReconcilerConfig};
