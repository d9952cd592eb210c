//! The interface a health check implements, and what it gets to look at.

use std::borrow::Cow;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::{Client, ResourceExt};
use tokio::sync::broadcast;

use super::result::CheckResult;
use crate::gardener::api::{Cluster, Extension, Shoot};
use crate::gardener::cache::SharedCaches;

/// One health check of an Extension.
///
/// Checks of a reconcile run in parallel, each in its own task and with the controller's
/// period as timeout; a check that times out or panics counts as a check that could not be
/// executed. Report trouble reading state as [`CheckResult::Failed`], not as unhealthy.
pub trait HealthCheck: Send + Sync {
    /// A short name for logs and for the message of a check that timed out.
    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(std::any::type_name::<Self>())
    }

    /// Looks at the Extension's world and says how healthy it is. (A boxed future, because a
    /// native `async fn` would make the trait unusable as `dyn HealthCheck`.)
    ///
    /// The controller checks again when the Extension's generation, its Cluster or a
    /// ManagedResource of its namespace changes, and every period. A check that reads other
    /// inputs should watch them and report their changes in [`HealthCheck::changes`], and
    /// answer from memory while they have not changed: a steady state then costs no request.
    fn check<'a>(&'a self, ctx: &'a CheckContext) -> BoxFuture<'a, CheckResult>;

    /// The namespaces in which an input this check watches itself changed; the controller
    /// checks the Extensions there again.
    fn changes(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The Extension(s) of `namespace` are not checked any more for now (deleted, being
    /// deleted or migrated, hibernated): whatever the check keeps for it can go.
    fn release(&self, _namespace: &str) {}
}

/// What a health check gets to look at.
#[derive(Clone)]
pub struct CheckContext {
    /// The Extension as the controller last saw it.
    pub extension: Arc<Extension>,
    /// The Cluster of the Extension's namespace, for shoot-class Extensions.
    pub cluster: Option<Arc<Cluster>>,
    /// The Shoot embedded in that Cluster, decoded; `None` for other classes or when gardenlet
    /// left it empty.
    pub shoot: Option<Arc<Shoot>>,
    /// The watched caches; prefer them to API calls.
    pub caches: SharedCaches,
    /// A client for the seed (the cluster the Extension lives in).
    pub client: Client,
}

impl CheckContext {
    /// The namespace of the Extension (the shoot's control-plane namespace for shoot class).
    pub fn namespace(&self) -> String {
        self.extension.namespace().unwrap_or_default()
    }
}
