//! One run of the reconciler: the working copy of the Extension and every write to it. Each
//! write's response becomes the working copy, so later writes carry the current
//! resourceVersion and generation.

use std::sync::Mutex;

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::gardener::api::{Extension, OPERATION_ANNOTATION, OperationType, TIMESTAMP_ANNOTATION};

use super::context::Context;
use super::error::ReconcileError;
use super::operation::operation_annotation;
use super::status;

/// Field manager recorded for every write of the reconciler.
pub const FIELD_MANAGER: &str = "gardener-extension";

/// The operation running when a reconcile hit its deadline, so the timeout can be recorded.
#[derive(Clone, Copy)]
pub(super) struct InFlight {
    pub operation: OperationType,
    pub error_description: &'static str,
    pub generation: i64,
}

pub(super) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

pub(super) fn extensions_api(client: &Client, ext: &Extension) -> Api<Extension> {
    Api::namespaced(client.clone(), &ext.namespace().unwrap_or_default())
}

/// The per-reconcile working state: the latest version of the object, updated from the
/// response of every write so later writes carry the current resourceVersion and generation.
pub(super) struct Run<'a, A> {
    pub ctx: &'a Context<A>,
    pub api: Api<Extension>,
    pub ext: Extension,
    pub object: String,
    /// Read by the deadline in [`super::reconciler::reconcile`] when it cuts the actuator off.
    pub in_flight: &'a Mutex<Option<InFlight>>,
}

impl<A> Run<'_, A> {
    fn name(&self) -> String {
        self.ext.name_any()
    }

    fn kube_error(&self, action: &'static str, source: kube::Error) -> ReconcileError {
        ReconcileError::Kube {
            action,
            object: self.object.clone(),
            source,
        }
    }

    async fn patch_meta(
        &mut self,
        action: &'static str,
        body: serde_json::Value,
    ) -> Result<(), ReconcileError> {
        self.patch(Subresource::None, action, body).await
    }

    pub(super) async fn patch_status(
        &mut self,
        action: &'static str,
        body: serde_json::Value,
    ) -> Result<(), ReconcileError> {
        self.patch(Subresource::Status, action, body).await
    }

    /// A JSON merge patch; the response becomes the working copy, so later writes carry the
    /// current resourceVersion and generation.
    async fn patch(
        &mut self,
        target: Subresource,
        action: &'static str,
        body: serde_json::Value,
    ) -> Result<(), ReconcileError> {
        let (name, params, patch) = (self.name(), patch_params(), Patch::Merge(&body));
        let result = match target {
            Subresource::None => self.api.patch(&name, &params, &patch).await,
            Subresource::Status => self.api.patch_status(&name, &params, &patch).await,
        };
        match result {
            Ok(updated) => {
                self.ext = updated;
                Ok(())
            }
            Err(e) => Err(self.kube_error(action, e)),
        }
    }

    pub(super) fn has_finalizer(&self, finalizer: &str) -> bool {
        self.ext.finalizers().iter().any(|f| f == finalizer)
    }

    /// Adds our finalizer with optimistic locking: a concurrent change of the list makes the
    /// patch fail with a conflict and the reconcile is retried, so no finalizer is lost. With
    /// `remove_reconcile`, gardenlet's `reconcile` annotation goes in the same request (a first
    /// reconcile then costs one metadata write instead of two).
    pub(super) async fn ensure_finalizer(
        &mut self,
        remove_reconcile: bool,
    ) -> Result<(), ReconcileError> {
        let finalizer = self.ctx.config.finalizer();
        if self.has_finalizer(&finalizer) {
            return if remove_reconcile {
                self.remove_reconcile_annotation().await
            } else {
                Ok(())
            };
        }
        let mut finalizers = self.ext.finalizers().to_vec();
        finalizers.push(finalizer);
        let mut metadata =
            json!({"finalizers": finalizers, "resourceVersion": self.ext.resource_version()});
        if remove_reconcile {
            metadata["annotations"] = json!({OPERATION_ANNOTATION: null});
        }
        self.patch_meta("add the finalizer to", json!({"metadata": metadata}))
            .await
    }

    /// Removes gardenlet's `reconcile` annotation, without a lock: nothing else is in the patch.
    pub(super) async fn remove_reconcile_annotation(&mut self) -> Result<(), ReconcileError> {
        let body = json!({"metadata": {"annotations": {OPERATION_ANNOTATION: null}}});
        self.patch_meta("remove the reconcile annotation from", body)
            .await
    }

    pub(super) async fn remove_own_finalizer(&mut self) -> Result<(), ReconcileError> {
        let finalizer = self.ctx.config.finalizer();
        if !self.has_finalizer(&finalizer) {
            return Ok(());
        }
        let finalizers: Vec<&String> = self
            .ext
            .finalizers()
            .iter()
            .filter(|f| **f != finalizer)
            .collect();
        let body = json!({"metadata": {"finalizers": finalizers, "resourceVersion": self.ext.resource_version()}});
        ignore_not_found(self.patch_meta("remove the finalizer from", body).await)
    }

    pub(super) async fn remove_all_finalizers(&mut self) -> Result<(), ReconcileError> {
        ignore_not_found(
            self.patch_meta(
                "remove all finalizers from",
                json!({"metadata": {"finalizers": null}}),
            )
            .await,
        )
    }

    pub(super) async fn remove_operation_annotation(&mut self) -> Result<(), ReconcileError> {
        if operation_annotation(&self.ext).is_none() {
            return Ok(());
        }
        let body = json!({"metadata": {"annotations": {OPERATION_ANNOTATION: null}}});
        ignore_not_found(
            self.patch_meta("remove the operation annotation from", body)
                .await,
        )
    }

    /// See [`status::status_time`].
    pub(super) fn status_time(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        status::status_time(
            self.ext
                .annotations()
                .get(TIMESTAMP_ANNOTATION)
                .map(String::as_str),
        )
    }

    pub(super) fn generation(&self) -> i64 {
        self.ext.metadata.generation.unwrap_or(0)
    }
}

fn ignore_not_found(result: Result<(), ReconcileError>) -> Result<(), ReconcileError> {
    match result {
        Err(ReconcileError::Kube {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => Ok(()),
        other => other,
    }
}

/// The object itself or its status subresource.
#[derive(Clone, Copy)]
enum Subresource {
    None,
    Status,
}
