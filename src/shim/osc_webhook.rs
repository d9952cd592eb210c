//! The seed webhook that delivers shims through the worker pools' OperatingSystemConfigs
//! (`delivery: osc`): served by every controller replica, registered as a
//! `MutatingWebhookConfiguration` with the controller's own CA. The decision is
//! [`crate::shim::osc::admit`]; this module reads its facts from the shared caches and runs
//! the server.
//!
//! Registration, and why:
//! - only namespaces labelled `extensions.gardener.cloud/containerd-shim=true` (gardenlet
//!   labels a shoot's namespace for each extension type the shoot uses), only OSCs whose
//!   `spec.purpose` is `reconcile` (a match condition: the `provision` OSC only bootstraps the
//!   node agent);
//! - `failurePolicy: Fail`: gardenlet rewrites an OSC's spec on every shoot reconcile, so an
//!   OSC admitted without our mutation would hand the node agent a config without our files,
//!   and the agent deletes files that leave the OSC while it keeps the plugin tables that
//!   point at them. Refusing makes gardenlet retry; the nodes keep what they run;
//! - `timeoutSeconds: 10` (Gardener's default for seed webhooks): the decision reads caches
//!   only;
//! - `sideEffects: None`, `reinvocationPolicy: IfNeeded` (the mutation is idempotent).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::FutureExt;

use crate::admission::review::{API_VERSION, KIND, ReviewRequest, ReviewResponse};
use crate::gardener::cache::SharedCaches;
use crate::gardener::imagevector::ImageVector;
use crate::gardener::runtime::options::{BindAddress, parse_duration};
use crate::gardener::runtime::{Manager, RuntimeError};
use crate::gardener::webhook::registration::{
    Endpoint, MutatingWebhookSpec, mutating_configuration,
};
use crate::gardener::webhook::server::{ServerSettings, serve};
use crate::shim::config::Catalog;
use crate::shim::identity::{COMPONENT, EXTENSION_TYPE};
use crate::shim::osc::admit::{AdmitOutcome, Facts, OSC_GROUP, admit};
use crate::shim::plan::Plan;

/// The controller name of the webhook server (`--controllers`, `--disable-controllers`).
pub const OSC_WEBHOOK: &str = "osc-webhook";
/// The path the API server posts reviews to.
pub const PATH: &str = "/webhooks/mutate-operatingsystemconfigs";
/// The `MutatingWebhookConfiguration`'s name.
pub const CONFIGURATION: &str = "gardener-extension-containerd-shim-osc";
/// The webhook's name in it.
pub const WEBHOOK: &str = "osc.containerd-shim.extensions.gardener.cloud";
/// The label gardenlet puts on the namespace of every shoot that uses the extension.
pub const NAMESPACE_LABEL: &str = "extensions.gardener.cloud/containerd-shim";
/// The CEL condition that leaves other OSCs alone without a call.
pub const PURPOSE_CONDITION: &str =
    "has(object.spec.purpose) && object.spec.purpose == 'reconcile'";
/// Reviews are a few kilobytes; an OSC with inline files can reach a megabyte.
const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// Why the webhook could not be added.
#[derive(Debug, thiserror::Error)]
pub enum OscWebhookError {
    #[error("invalid flag: {0}")]
    Flag(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// How the webhook is reached and where its certificate lives.
#[derive(Clone, Debug, clap::Args)]
pub struct OscWebhookOptions {
    /// The namespace of the certificate Secret and of the Service (the controller's own). The
    /// webhook runs only when it is set.
    #[arg(long, env = "WEBHOOK_CONFIG_NAMESPACE", value_name = "NAMESPACE")]
    pub webhook_config_namespace: Option<String>,

    /// How the API server reaches the webhook: `service` or `url`.
    #[arg(long, value_name = "MODE", default_value = "service", value_parser = ["service", "url"])]
    pub webhook_config_mode: String,

    /// `host:port` the API server calls in `url` mode.
    #[arg(long, value_name = "HOST:PORT")]
    pub webhook_config_url: Option<String>,

    /// The Service in front of the replicas, in `service` mode.
    #[arg(long, value_name = "NAME", default_value = COMPONENT)]
    pub webhook_config_service_name: String,

    /// The Service's port.
    #[arg(long, value_name = "PORT", default_value_t = 443)]
    pub webhook_config_service_port: i32,

    /// Where the webhook server listens.
    #[arg(long, value_name = "[HOST]:PORT", default_value = ":10250")]
    pub webhook_bind_address: BindAddress,

    /// Where the serving certificate is written for the server.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/tmp/containerd-shim-webhook-certs"
    )]
    pub webhook_cert_dir: PathBuf,

    /// How often the certificate is checked for renewal and the configuration re-applied.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub webhook_resync_period: Duration,
}

impl OscWebhookOptions {
    fn settings(&self) -> Result<Option<ServerSettings>, String> {
        let Some(namespace) = self.webhook_config_namespace.clone() else {
            return Ok(None);
        };
        let endpoint = match (self.webhook_config_mode.as_str(), &self.webhook_config_url) {
            ("url", Some(host_port)) => Endpoint::Url {
                host_port: host_port.clone(),
            },
            ("url", None) => {
                return Err("--webhook-config-mode=url needs --webhook-config-url".into());
            }
            _ => Endpoint::Service {
                namespace: namespace.clone(),
                name: self.webhook_config_service_name.clone(),
                port: self.webhook_config_service_port,
            },
        };
        Ok(Some(ServerSettings {
            bind_address: self.webhook_bind_address.clone(),
            endpoint,
            secret_namespace: namespace,
            secret_name: format!("{COMPONENT}-webhook-certs"),
            cert_dir: self.webhook_cert_dir.clone(),
            resync_period: self.webhook_resync_period,
            field_manager: COMPONENT.to_string(),
        }))
    }
}

/// The webhook's configuration for a CA bundle.
pub fn configuration(
    endpoint: &Endpoint,
    ca_bundle: &str,
) -> k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration {
    let spec = MutatingWebhookSpec {
        configuration: CONFIGURATION,
        webhook: WEBHOOK,
        path: PATH,
        group: OSC_GROUP,
        version: "v1alpha1",
        resource: "operatingsystemconfigs",
        namespace_labels: BTreeMap::from([(NAMESPACE_LABEL.to_string(), "true".to_string())]),
        conditions: vec![("purpose-reconcile", PURPOSE_CONDITION)],
        failure_policy: "Fail",
        timeout_seconds: 10,
    };
    let labels = BTreeMap::from([("app.kubernetes.io/name".to_string(), COMPONENT.to_string())]);
    mutating_configuration(&spec, endpoint, ca_bundle, labels)
}

struct Webhook {
    catalog: Arc<Catalog>,
    images: Arc<ImageVector>,
    caches: SharedCaches,
}

/// Adds the webhook server to the manager; it runs on every replica, leader or not.
pub fn add_osc_webhook(
    manager: &mut Manager,
    options: &OscWebhookOptions,
    catalog: Arc<Catalog>,
    images: Arc<ImageVector>,
    caches: SharedCaches,
) -> Result<(), OscWebhookError> {
    let settings = match options.settings() {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            tracing::info!(
                "OperatingSystemConfig webhook off: no --webhook-config-namespace (delivery osc needs it)"
            );
            return Ok(());
        }
        Err(message) => return Err(OscWebhookError::Flag(message)),
    };
    let routes = routes(catalog, images, caches);
    Ok(manager.add_controller(OSC_WEBHOOK, move |ctx| {
        let endpoint = settings.endpoint.clone();
        async move {
            let result = serve(
                ctx.client.clone(),
                settings,
                routes,
                move |ca| configuration(&endpoint, ca),
                ctx.shutdown.clone(),
            )
            .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "OperatingSystemConfig webhook stopped");
                // The manager stops when a controller ends before shutdown.
            }
        }
        .boxed()
    })?)
}

/// The webhook's HTTP routes.
pub fn routes(catalog: Arc<Catalog>, images: Arc<ImageVector>, caches: SharedCaches) -> Router {
    let webhook = Arc::new(Webhook {
        catalog,
        images,
        caches,
    });
    Router::new()
        .route(PATH, post(review))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(webhook)
}

async fn review(State(webhook): State<Arc<Webhook>>, body: Bytes) -> Response {
    let review: ReviewRequest = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not an AdmissionReview: {e}"),
            )
                .into_response();
        }
    };
    let request = match (
        review.api_version == API_VERSION && review.kind == KIND,
        review.request,
    ) {
        (true, Some(request)) => request,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                format!("want an {API_VERSION} {KIND} with a request"),
            )
                .into_response();
        }
    };
    let extension = webhook
        .caches
        .extensions
        .in_namespace(&request.namespace)
        .into_iter()
        .find(|e| e.spec.type_ == EXTENSION_TYPE);
    let cluster = webhook.caches.cluster(&request.namespace);
    let shoot = match cluster.as_deref().map(|c| c.shoot()) {
        Some(Ok(shoot)) => Ok(shoot),
        Some(Err(e)) => Err(e.to_string()),
        None => Ok(None),
    };
    let facts = Facts {
        extension: extension.as_deref(),
        shoot: shoot.as_ref().map(Option::as_ref).map_err(Clone::clone),
    };
    let plan = Plan {
        catalog: &webhook.catalog,
        images: &webhook.images,
    };
    let (response, outcome) = admit(&request, &facts, &plan);
    match &outcome {
        AdmitOutcome::Refused => tracing::warn!(
            namespace = %request.namespace, name = %request.name,
            message = response.status.as_ref().map(|s| s.message.as_str()).unwrap_or_default(),
            "OperatingSystemConfig refused"
        ),
        other => {
            tracing::debug!(namespace = %request.namespace, name = %request.name, outcome = ?other, "OperatingSystemConfig reviewed")
        }
    }
    axum::Json(ReviewResponse {
        api_version: API_VERSION,
        kind: KIND,
        response,
    })
    .into_response()
}
