//! One reconcile of one Extension: the operation-annotation wrapper (§1.5), the decision
//! procedure (§1.6) and the per-path steps (§1.8), with the status writes of §1.9.
//!
//! Order of work: fetch facts (cache, live read on a cache miss) → decide (pure,
//! [`super::operation::decide`]) → write finalizer and Processing → actuator → write Error or
//! Success → finalizer and annotation clean-up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::gardener::api::{
    Cluster, Extension, OperationType, SHOOT_ROLE_LABEL, SHOOT_ROLE_VALUE, operation,
};
use crate::gardener::error_codes::CodedError;
use crate::gardener::runtime::metrics::{Operation, OperationResult};

use super::actuator::{Actuator, ActuatorContext, ClusterInfo, Outcome};
use super::context::Context;
use super::error::ReconcileError;
use super::events::EventOutcome;
use super::operation::{ClusterFacts, Decision, decide, operation_annotation};
pub use super::run::FIELD_MANAGER;
use super::run::{InFlight, Run, extensions_api, patch_params};
use super::status::{self, descriptions as d};

/// Reconciles one Extension under the configured deadline. Never panics on real input: every
/// failure is a [`ReconcileError`] that the controller retries with backoff.
pub async fn reconcile<A: Actuator>(
    ext: Arc<Extension>,
    ctx: Arc<Context<A>>,
) -> Result<Action, ReconcileError> {
    let key = ObjectRef::from_obj(&*ext);
    let in_flight: Mutex<Option<InFlight>> = Mutex::new(None);
    let result =
        tokio::time::timeout(ctx.config.timeout, reconcile_once(&ext, &ctx, &in_flight)).await;
    match result {
        Ok(Ok(action)) => {
            ctx.reset_failures(&key);
            Ok(action)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let running = in_flight.lock().ok().and_then(|g| *g);
            let after = ctx.config.timeout;
            if let Some(op) = running {
                // The actuator's future has been dropped, which cancels it. Record the timeout so
                // the status never stays Processing with nobody working on it.
                let cause = format!("reconciliation timed out after {after:?}");
                let body = status::error(
                    op.operation,
                    op.error_description,
                    &cause,
                    &[],
                    op.generation,
                    &status::now(),
                );
                let api = extensions_api(&ctx.client, &ext);
                let (name, params, patch) = (ext.name_any(), patch_params(), Patch::Merge(&body));
                let write = tokio::time::timeout(
                    Duration::from_secs(10),
                    api.patch_status(&name, &params, &patch),
                )
                .await;
                if !matches!(write, Ok(Ok(_))) {
                    tracing::error!(object = %key, "could not record the timeout in the status");
                }
            }
            Err(ReconcileError::Timeout {
                operation: running.map(|r| r.operation),
                object: key.to_string(),
                after,
            })
        }
    }
}

/// Which actuator method a path calls.
#[derive(Clone, Copy)]
enum Call {
    Reconcile,
    Delete,
    ForceDelete,
    Migrate,
    Restore,
}

/// The texts and steps that differ between the four paths that call the actuator.
#[derive(Clone, Copy)]
struct Path {
    processing: &'static str,
    error: &'static str,
    success: &'static str,
    metric: Operation,
    call: Call,
}

async fn reconcile_once<A: Actuator>(
    ext: &Extension,
    ctx: &Context<A>,
    in_flight: &Mutex<Option<InFlight>>,
) -> Result<Action, ReconcileError> {
    let namespace = ext.namespace().unwrap_or_default();
    let mut run = Run {
        ctx,
        api: extensions_api(&ctx.client, ext),
        ext: ext.clone(),
        object: format!("{namespace}/{}", ext.name_any()),
        in_flight,
    };

    // The operation-annotation wrapper.
    let reconcile_requested = match operation_annotation(&run.ext) {
        Some(operation::WAIT_FOR_STATE) => {
            tracing::debug!(object = %run.object, "waiting for gardenlet to restore the state");
            return Ok(Action::await_change());
        }
        Some(operation::RECONCILE) => true,
        _ => false,
    };

    let cluster = lookup_cluster(ctx, &namespace).await?;
    let facts = match &cluster {
        None => ClusterFacts::NotShootNamespace,
        Some(info) => ClusterFacts::Found(info.shoot.as_ref()),
    };
    let decision = decide(&run.ext, &facts);
    tracing::debug!(object = %run.object, ?decision, "decided");
    // Removed before the actuator runs ("remove as soon as you begin"); on the paths that add
    // our finalizer first, in the same request as the finalizer.
    let adds_finalizer = matches!(decision, Decision::Reconcile(_) | Decision::Restore);
    if reconcile_requested && !adds_finalizer {
        run.remove_reconcile_annotation().await?;
    }

    let cluster = cluster.as_ref();
    match decision {
        Decision::SkipFailedShoot => {
            Ok(run.skip("Skipping the reconciliation of Extension of failed shoot"))
        }
        Decision::SkipMigrated => Ok(run.skip("Skipping the operation of a migrated Extension")),
        Decision::Delete { force: false } => run.delete(cluster).await,
        Decision::Delete { force: true } => run.force_delete(cluster).await,
        Decision::Migrate => run.migrate(cluster).await,
        Decision::Restore => run.restore(cluster, reconcile_requested).await,
        Decision::Reconcile(op) => run.reconcile(op, cluster, reconcile_requested).await,
    }
}

/// The operation paths, one method each as in Gardener's extension reconciler (the writes
/// they make are in [`super::run`]).
impl<A: Actuator> Run<'_, A> {
    fn skip(&self, why: &'static str) -> Action {
        let started = Instant::now();
        tracing::info!(object = %self.object, "{why}");
        self.ctx.observer.operation(
            Operation::Reconcile,
            OperationResult::Skipped,
            started.elapsed(),
        );
        Action::await_change()
    }

    async fn delete(&mut self, cluster: Option<&ClusterInfo>) -> Result<Action, ReconcileError> {
        self.delete_with(cluster, Call::Delete, Operation::Delete)
            .await
    }

    async fn force_delete(
        &mut self,
        cluster: Option<&ClusterInfo>,
    ) -> Result<Action, ReconcileError> {
        self.delete_with(cluster, Call::ForceDelete, Operation::ForceDelete)
            .await
    }

    async fn delete_with(
        &mut self,
        cluster: Option<&ClusterInfo>,
        call: Call,
        metric: Operation,
    ) -> Result<Action, ReconcileError> {
        // Without our finalizer the object was never ours to clean up (or already is).
        if !self.has_finalizer(&self.ctx.config.finalizer()) {
            return Ok(Action::await_change());
        }
        let path = Path {
            processing: d::DELETE_PROCESSING,
            error: d::DELETE_ERROR,
            success: d::DELETE_SUCCESS,
            metric,
            call,
        };
        if let Some(action) = self
            .run_actuator(OperationType::Delete, path, cluster)
            .await?
        {
            return Ok(action);
        }
        self.remove_own_finalizer().await?;
        Ok(Action::await_change())
    }

    async fn migrate(&mut self, cluster: Option<&ClusterInfo>) -> Result<Action, ReconcileError> {
        let path = Path {
            processing: d::MIGRATE_PROCESSING,
            error: d::MIGRATE_ERROR,
            success: d::MIGRATE_SUCCESS,
            metric: Operation::Migrate,
            call: Call::Migrate,
        };
        if let Some(action) = self
            .run_actuator(OperationType::Migrate, path, cluster)
            .await?
        {
            return Ok(action);
        }
        // The object leaves this seed: nothing may hold it here any more, foreign finalizers
        // included.
        self.remove_all_finalizers().await?;
        self.remove_operation_annotation().await?;
        Ok(Action::await_change())
    }

    async fn restore(
        &mut self,
        cluster: Option<&ClusterInfo>,
        reconcile_requested: bool,
    ) -> Result<Action, ReconcileError> {
        self.ensure_finalizer(reconcile_requested).await?;
        let path = Path {
            processing: d::RESTORE_PROCESSING,
            error: d::RESTORE_ERROR,
            success: d::RESTORE_SUCCESS,
            metric: Operation::Restore,
            call: Call::Restore,
        };
        if let Some(action) = self
            .run_actuator(OperationType::Restore, path, cluster)
            .await?
        {
            return Ok(action);
        }
        self.remove_operation_annotation().await?;
        Ok(Action::await_change())
    }

    async fn reconcile(
        &mut self,
        op: OperationType,
        cluster: Option<&ClusterInfo>,
        reconcile_requested: bool,
    ) -> Result<Action, ReconcileError> {
        self.ensure_finalizer(reconcile_requested).await?;
        let path = Path {
            processing: d::RECONCILE_PROCESSING,
            error: d::RECONCILE_ERROR,
            success: d::RECONCILE_SUCCESS,
            metric: if op == OperationType::Create {
                Operation::Create
            } else {
                Operation::Reconcile
            },
            call: Call::Reconcile,
        };
        if let Some(action) = self.run_actuator(op, path, cluster).await? {
            return Ok(action);
        }
        let resync = self.ctx.config.resync;
        Ok(if resync.is_zero() {
            Action::await_change()
        } else {
            Action::requeue(resync)
        })
    }

    /// Processing → actuator → Error or Success. Returns `Some(action)` when the operation is
    /// still in progress and nothing after Success may run yet.
    async fn run_actuator(
        &mut self,
        op: OperationType,
        path: Path,
        cluster: Option<&ClusterInfo>,
    ) -> Result<Option<Action>, ReconcileError> {
        let started = Instant::now();
        // Processing is written before the actuator runs; if it cannot be written, the actuator
        // does not run.
        self.patch_status(
            "write the Processing status of",
            status::processing(op, path.processing, &self.status_time()),
        )
        .await?;
        self.set_in_flight(Some(InFlight {
            operation: op,
            error_description: path.error,
            generation: self.generation(),
        }));
        tracing::info!(object = %self.object, operation = op.as_str(), "starting");
        let result = self.call_actuator(path.call, cluster).await;
        self.set_in_flight(None);
        match result {
            Err(e) => Err(self.record_failure(op, path, started, &e).await),
            Ok(Outcome::InProgress {
                description,
                requeue_after,
            }) => {
                self.patch_status(
                    "write the progress of",
                    status::processing(op, &description, &self.status_time()),
                )
                .await?;
                let observer = &self.ctx.observer;
                observer.operation(path.metric, OperationResult::InProgress, started.elapsed());
                tracing::info!(object = %self.object, operation = op.as_str(), progress = %description, "in progress");
                Ok(Some(Action::requeue(requeue_after)))
            }
            Ok(Outcome::Done) => {
                self.record_success(op, path, started).await?;
                Ok(None)
            }
        }
    }

    /// Tells the deadline in [`reconcile`] which operation to record when it cuts this one off.
    fn set_in_flight(&self, running: Option<InFlight>) {
        if let Ok(mut slot) = self.in_flight.lock() {
            *slot = running;
        }
    }

    async fn call_actuator(
        &self,
        call: Call,
        cluster: Option<&ClusterInfo>,
    ) -> Result<Outcome, A::Error> {
        let actuator = &self.ctx.actuator;
        let ctx = ActuatorContext {
            extension: &self.ext,
            cluster,
            caches: &self.ctx.caches,
        };
        match call {
            Call::Reconcile => actuator.reconcile(&ctx).await,
            Call::Delete => actuator.delete(&ctx).await,
            Call::ForceDelete => actuator.force_delete(&ctx).await,
            Call::Migrate => actuator.migrate(&ctx).await,
            Call::Restore => actuator.restore(&ctx).await,
        }
    }

    async fn record_failure(
        &mut self,
        op: OperationType,
        path: Path,
        started: Instant,
        e: &A::Error,
    ) -> ReconcileError {
        let codes = status::dedup_codes(e.codes());
        let message = e.to_string();
        let body = status::error(
            op,
            path.error,
            &message,
            &codes,
            self.generation(),
            &self.status_time(),
        );
        // As in Gardener, a failure to record the error does not hide the error itself.
        if let Err(write) = self.patch_status("write the Error status of", body).await {
            tracing::error!(object = %self.object, error = %write, "could not record the error in the status");
        }
        let observer = &self.ctx.observer;
        observer.operation(path.metric, OperationResult::Error, started.elapsed());
        tracing::error!(object = %self.object, operation = op.as_str(), error = %message, "operation failed");
        if let Some(events) = &self.ctx.events {
            events.record(&self.ext, op, EventOutcome::Failed(&message));
        }
        ReconcileError::Actuator {
            operation: op,
            object: self.object.clone(),
            message,
            codes,
        }
    }

    async fn record_success(
        &mut self,
        op: OperationType,
        path: Path,
        started: Instant,
    ) -> Result<(), ReconcileError> {
        self.patch_status(
            "write the Success status of",
            status::success(op, path.success, self.generation(), &self.status_time()),
        )
        .await?;
        let observer = &self.ctx.observer;
        observer.operation(path.metric, OperationResult::Succeeded, started.elapsed());
        tracing::info!(object = %self.object, operation = op.as_str(), "succeeded");
        if let Some(events) = &self.ctx.events {
            events.record(&self.ext, op, EventOutcome::Succeeded(path.success));
        }
        Ok(())
    }
}

/// `IsShootNamespace` + `GetCluster`, from the caches; on a cache miss the API server is asked,
/// because a cache can lag behind an object created a moment ago.
async fn lookup_cluster<A>(
    ctx: &Context<A>,
    namespace: &str,
) -> Result<Option<ClusterInfo>, ReconcileError> {
    let shoot_namespace = if ctx.caches.is_shoot_namespace(namespace) {
        true
    } else {
        let ns = Api::<Namespace>::all(ctx.client.clone())
            .get_metadata(namespace)
            .await
            .map_err(|source| ReconcileError::Namespace {
                namespace: namespace.to_string(),
                source,
            })?;
        ns.labels().get(SHOOT_ROLE_LABEL).map(String::as_str) == Some(SHOOT_ROLE_VALUE)
    };
    if !shoot_namespace {
        return Ok(None);
    }
    let cluster = match ctx.caches.cluster(namespace) {
        Some(c) => c,
        None => {
            let live = Api::<Cluster>::all(ctx.client.clone())
                .get_opt(namespace)
                .await
                .map_err(|source| ReconcileError::ClusterRead {
                    namespace: namespace.to_string(),
                    source,
                })?;
            match live {
                Some(mut c) => {
                    crate::gardener::cache::trim_cluster(&mut c);
                    Arc::new(c)
                }
                None => {
                    return Err(ReconcileError::ClusterMissing {
                        namespace: namespace.to_string(),
                    });
                }
            }
        }
    };
    let shoot = cluster.shoot()?;
    Ok(Some(ClusterInfo { cluster, shoot }))
}
