//! The admission process: the webhook over HTTPS, `/healthz`, `/readyz` and `/metrics` over
//! plain HTTP on another port (kubelet probes and Prometheus need no certificate), stopped
//! gracefully on SIGTERM or SIGINT: in-flight reviews are answered, then both servers close.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::review::{Outcome, answer};
use crate::gardener::runtime::error::RuntimeError;
use crate::gardener::runtime::http::bind;
use crate::gardener::runtime::options::{BindAddress, LogFormat, LogLevel};
use crate::gardener::webhook::tls::{
    CertFiles, ReloadingCert, TlsError, TlsListener, server_config,
};
use crate::shim::config::Catalog;
use crate::shim::controllers::{CatalogOptions, SetupError, load_catalog};

/// The path the webhook configuration points the API server to.
pub const WEBHOOK_PATH: &str = "/webhooks/validate-shoots";

/// Two Shoots (old and new) of up to etcd's 1.5 MiB each, with room to spare.
const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// The flags of `gardener-extension-containerd-shim admission`.
#[derive(Clone, Debug, clap::Args)]
pub struct AdmissionOptions {
    /// Where the webhook listens for the API server (HTTPS).
    #[arg(long, value_name = "[HOST]:PORT", default_value = ":10250")]
    pub webhook_bind_address: BindAddress,

    /// The serving certificate (PEM, the chain from the leaf); reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: PathBuf,

    /// The serving certificate's private key (PEM); reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: PathBuf,

    /// Where `/healthz`, `/readyz` and `/metrics` are served (plain HTTP), or 0 for nowhere.
    #[arg(long, value_name = "[HOST]:PORT", default_value = ":8081")]
    pub health_bind_address: BindAddress,

    /// Minimum level of the log events written.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Format of the log events.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// The catalog and custom-shim rules: give the admission the same values as the seed
    /// controller, or it admits what the seed refuses (or the reverse).
    #[command(flatten)]
    pub catalog: CatalogOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("serving certificate: {0}")]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("the webhook address must not be 0: the admission has nothing else to serve")]
    NoWebhookAddress,
    #[error("{server} server on {address} stopped: {source}")]
    Serve {
        server: &'static str,
        address: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// What the webhook handler shares.
struct Webhook {
    catalog: Catalog,
    reviews: Family<OutcomeLabels, Counter>,
}

/// Runs until SIGTERM or SIGINT.
pub async fn run(options: AdmissionOptions) -> Result<(), AdmissionError> {
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("Shutting down");
        on_signal.cancel();
    });
    serve(options, stop).await
}

/// Serves until `stop` is cancelled; binds and loads everything before serving anything.
pub async fn serve(
    options: AdmissionOptions,
    stop: CancellationToken,
) -> Result<(), AdmissionError> {
    let catalog = load_catalog(&options.catalog)?;
    let cert = Arc::new(ReloadingCert::new(CertFiles {
        cert: options.tls_cert_file.clone(),
        key: options.tls_private_key_file.clone(),
    })?);
    let tls = server_config(cert)?;
    let webhook_listener = bind("webhook", &options.webhook_bind_address)
        .await?
        .ok_or(AdmissionError::NoWebhookAddress)?;
    let health_listener = bind("health", &options.health_bind_address).await?;

    let mut registry = Registry::default();
    let reviews = Family::<OutcomeLabels, Counter>::default();
    registry.register(
        "containerd_shim_admission_reviews",
        "AdmissionReviews answered, by outcome",
        reviews.clone(),
    );
    let webhook = Arc::new(Webhook { catalog, reviews });
    let webhook_routes = Router::new()
        .route(WEBHOOK_PATH, post(validate))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(webhook);
    let registry = Arc::new(registry);
    let health_routes = Router::new()
        .route("/healthz", get(ok))
        .route("/readyz", get(ok))
        .route("/metrics", get(metrics))
        .with_state(registry);

    let address = webhook_listener
        .local_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    let listener = TlsListener::new(webhook_listener, tls, stop.clone()).map_err(|source| {
        AdmissionError::Serve {
            server: "webhook",
            address: address.clone(),
            source,
        }
    })?;
    tracing::info!(server = "webhook", address = %address, path = WEBHOOK_PATH, "Serving");
    let webhook_stop = stop.clone();
    let webhook_server = async move {
        axum::serve(listener, webhook_routes)
            .with_graceful_shutdown(async move { webhook_stop.cancelled().await })
            .await
            .map_err(|source| AdmissionError::Serve {
                server: "webhook",
                address,
                source,
            })
    };
    let health_server = async move {
        let Some(listener) = health_listener else {
            return Ok(());
        };
        let address = listener
            .local_addr()
            .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
        tracing::info!(server = "health", address = %address, "Serving");
        axum::serve(listener, health_routes)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .map_err(|source| AdmissionError::Serve {
                server: "health",
                address,
                source,
            })
    };
    let (webhook, health) = tokio::join!(webhook_server, health_server);
    webhook.and(health)
}

async fn validate(State(webhook): State<Arc<Webhook>>, body: Bytes) -> Response {
    match answer(&body, &webhook.catalog) {
        Ok((review, outcome)) => {
            let label = match &outcome {
                Outcome::Allowed => "allowed",
                Outcome::AllowedUnchanged(_) => "allowed_unchanged",
                Outcome::Refused(_) => "refused",
                Outcome::NotOurs => "not_ours",
                Outcome::Undecodable => "undecodable",
            };
            webhook
                .reviews
                .get_or_create(&OutcomeLabels { outcome: label })
                .inc();
            tracing::info!(uid = %review.response.uid, outcome = ?outcome, "Shoot reviewed");
            match serde_json::to_vec(&review) {
                Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
                Err(e) => {
                    tracing::error!(error = %e, "Cannot encode the AdmissionReview");
                    StatusCode::INTERNAL_SERVER_ERROR.into_response()
                }
            }
        }
        Err(e) => {
            webhook
                .reviews
                .get_or_create(&OutcomeLabels {
                    outcome: "bad_request",
                })
                .inc();
            tracing::warn!(error = %e, "Not an AdmissionReview");
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
    }
}

async fn ok() -> &'static str {
    "ok\n"
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "Cannot watch SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
