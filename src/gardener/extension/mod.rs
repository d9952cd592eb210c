//! The `Extension` reconciler with Gardener's exact contract (gardener-contract.md §1):
//! operation annotations, finalizers, operation types, status, Cluster awareness.
//!
//! - [`actuator`]: the trait an extension implements;
//! - [`operation`], [`predicate`], [`status`]: the pure rules;
//! - [`reconciler`]: one reconcile of one object;
//! - [`controller`]: watches, event filtering, queue, concurrency.

pub mod actuator;
pub mod backlog;
pub mod context;
pub mod controller;
pub mod error;
pub mod events;
pub mod operation;
pub mod options;
pub mod predicate;
pub mod reconciler;
mod run;
pub mod status;

pub use actuator::{Actuator, ActuatorContext, ClusterInfo, Outcome};
pub use context::{Context, ControllerMetrics, NoObserver, OperationObserver, ReconcilerConfig};
pub use error::ReconcileError;
pub use predicate::TriggerMode;
