//! Gardener's extension health checks: the conditions an extension reports on its
//! `Extension` (`SystemComponentsHealthy`, `ControlPlaneHealthy`, ...) and the controller that
//! keeps them current, with the semantics of Gardener's Go library
//! (`extensions/pkg/controller/healthcheck`). Nothing in here knows what is being checked.
//!
//! The pure parts decide everything: [`result`] aggregates the checks of a condition type,
//! [`verdict`] turns that into a condition status (with the progressing rule and hibernation),
//! and [`condition`] builds the condition with Gardener's rules for its times. The
//! [`controller`] only fetches, runs the checks and writes `status.conditions` when they
//! changed.
//!
//! The process runtime starts it with [`run`]:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use gardener_extension_containerd_shim::gardener::healthcheck::*;
//! # async fn example(client: kube::Client, caches: gardener_extension_containerd_shim::gardener::cache::SharedCaches) {
//! let config = HealthCheckConfig::new("containerd-shim")
//!     .register("SystemComponentsHealthy", vec![Arc::new(ManagedResourceCheck::new("extension-containerd-shim"))]);
//! let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
//! let shutdown = async { let _ = tokio::signal::ctrl_c().await; };
//! run(client, caches, config, shutdown, move || { let _ = ready_tx.send(()); }).await
//!     .expect("valid configuration");
//! # drop(ready_rx);
//! # }
//! ```

mod backlog;
mod bookkeeping;
pub mod check;
pub mod condition;
pub mod config;
pub mod controller;
pub mod error;
pub mod managed_resource;
pub mod options;
mod reconcile;
pub mod result;
mod triggers;
pub mod verdict;

pub use check::{CheckContext, HealthCheck};
pub use condition::{ConditionUpdate, build_condition, merge_conditions};
pub use config::{ConditionRegistration, DEFAULT_PERIOD, HealthCheckConfig};
pub use controller::run;
pub use error::HealthCheckError;
pub use managed_resource::{
    ManagedResourceCheck, is_configuration_problem, managed_resource_result,
};
pub use result::{Aggregate, AggregateHealth, CheckResult, aggregate};
