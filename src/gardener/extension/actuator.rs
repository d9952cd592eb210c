//! The contract between the generic reconciler and an extension's own logic.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::gardener::api::{Cluster, Extension, ManagedResource, Shoot};
use crate::gardener::cache::SharedCaches;
use crate::gardener::error_codes::CodedError;

/// What an actuator gets for one operation.
pub struct ActuatorContext<'a> {
    /// The Extension as it is after the reconciler's own writes (finalizer, Processing status).
    pub extension: &'a Extension,
    /// The Cluster of the shoot namespace; `None` outside shoot namespaces (seed/garden class).
    pub cluster: Option<&'a ClusterInfo>,
    /// The controllers' watch caches: what an actuator reads from them costs no request (like
    /// the cache-backed client Gardener's actuators are given). A cached object can be a
    /// moment behind the API server; writes from it carry its resourceVersion and fail with a
    /// conflict rather than overwrite a newer state.
    pub caches: &'a SharedCaches,
}

/// A Cluster with its decoded Shoot.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    pub cluster: Arc<Cluster>,
    /// `None` when gardenlet left the Shoot empty.
    pub shoot: Option<Shoot>,
}

impl ActuatorContext<'_> {
    /// The decoded Shoot, if this is a shoot namespace and gardenlet embedded one.
    pub fn shoot(&self) -> Option<&Shoot> {
        self.cluster.and_then(|c| c.shoot.as_ref())
    }

    /// A ManagedResource of this extension (its `origin` label) in `namespace`, as the watch
    /// cache holds it: `None` when the cache holds none by that name.
    pub fn cached_managed_resource(&self, namespace: &str, name: &str) -> Option<ManagedResource> {
        self.caches
            .managed_resource(namespace, name)
            .map(|mr| mr.as_ref().clone())
    }
}

/// How an operation ended when it did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Finished: the reconciler records success.
    Done,
    /// Still under way (for example: waiting for nodes to uninstall). The reconciler keeps
    /// `lastOperation` in Processing with this description and asks again after `requeue_after`,
    /// instead of holding a worker for minutes.
    InProgress {
        description: String,
        requeue_after: Duration,
    },
}

/// An extension's logic for the five operations of Gardener's extension contract. The
/// reconciler decides which one runs, writes the status around it and manages finalizers and
/// annotations; the actuator only changes the world.
///
/// Every method must be idempotent: after a crash or timeout the same operation runs again.
pub trait Actuator: Send + Sync + 'static {
    /// The actuator's error; its codes end up in `lastError.codes`.
    type Error: CodedError + Send + Sync + 'static;

    /// Create or update everything the Extension asks for.
    fn reconcile(
        &self,
        ctx: &ActuatorContext<'_>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Clean up everything, waiting until the cleanup has finished.
    fn delete(
        &self,
        ctx: &ActuatorContext<'_>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Unblock a forced shoot deletion: remove what the extension owns without waiting for
    /// anything external. Should succeed even if resources are orphaned.
    fn force_delete(
        &self,
        ctx: &ActuatorContext<'_>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Control-plane migration away from this seed: save state, remove seed-side objects,
    /// never touch shoot-side state.
    fn migrate(
        &self,
        ctx: &ActuatorContext<'_>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;

    /// Control-plane migration onto this seed: restore from `status.state`, then reconcile.
    fn restore(
        &self,
        ctx: &ActuatorContext<'_>,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;
}
