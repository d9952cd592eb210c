//! Runs a seed webhook: keeps the certificate Secret current, writes the serving certificate
//! where the HTTPS listener reads it, registers the webhook configuration with the CA, and
//! serves until stopped. Every replica serves (the API server may call any of them behind
//! the Service); any replica may renew, and the Secret's resourceVersion decides a race.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::certs::{self, CertBundle, CertError, TLS_CERT_KEY, TLS_KEY_KEY};
use super::registration::Endpoint;
use super::tls::{CertFiles, ReloadingCert, TlsError, TlsListener, server_config};
use crate::gardener::runtime::RuntimeError;
use crate::gardener::runtime::http::bind;
use crate::gardener::runtime::options::BindAddress;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("webhook certificate Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the serving certificate to {path}: {source}")]
    Files {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("registering MutatingWebhookConfiguration {name}: {source}")]
    Register {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Bind(#[from] RuntimeError),
    #[error("the webhook server has no bind address")]
    NoAddress,
    #[error("serving the webhook on {address}: {source}")]
    Serve {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where the webhook listens, how it is reached, where its certificate lives.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    pub bind_address: BindAddress,
    pub endpoint: Endpoint,
    /// The certificate Secret, in the extension's namespace.
    pub secret_namespace: String,
    pub secret_name: String,
    /// Where the serving certificate is written for the listener.
    pub cert_dir: PathBuf,
    /// How often the certificate is checked for renewal and the configuration re-applied.
    pub resync_period: Duration,
    /// Field manager of the configuration's server-side apply.
    pub field_manager: String,
}

/// Serves `routes` until `stop` is cancelled. `configuration` renders the webhook
/// configuration for a CA bundle.
pub async fn serve(
    client: Client,
    settings: ServerSettings,
    routes: axum::Router,
    configuration: impl Fn(&str) -> MutatingWebhookConfiguration + Send + Sync + 'static,
    stop: CancellationToken,
) -> Result<(), WebhookError> {
    // An API server that does not answer yet must not stop the process (and with it the
    // controllers beside the webhook): retry until the first certificate is in place.
    let mut delay = Duration::from_secs(1);
    let bundle = loop {
        match sync_once(&client, &settings, &configuration).await {
            Ok(bundle) => break bundle,
            Err(e) => {
                tracing::warn!(error = %e, retryIn = ?delay, "Webhook certificate or configuration not synced");
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    };
    let cert = Arc::new(ReloadingCert::new(cert_files(&settings.cert_dir))?);
    let listener = bind("webhook", &settings.bind_address)
        .await?
        .ok_or(WebhookError::NoAddress)?;
    let address = listener
        .local_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    let listener =
        TlsListener::new(listener, server_config(cert)?, stop.clone()).map_err(|source| {
            WebhookError::Serve {
                address: address.clone(),
                source,
            }
        })?;
    tracing::info!(%address, serverCertificateNotAfter = bundle.server_not_after(), "Serving webhook");

    let resync = {
        let stop = stop.clone();
        async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(settings.resync_period) => {}
                }
                if let Err(e) = sync_once(&client, &settings, &configuration).await {
                    tracing::warn!(error = %e, "Webhook certificate or configuration not synced; retrying next period");
                }
            }
        }
    };
    let server = async move {
        axum::serve(listener, routes)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .map_err(|source| WebhookError::Serve { address, source })
    };
    let (served, ()) = tokio::join!(server, resync);
    served
}

fn cert_files(dir: &Path) -> CertFiles {
    CertFiles {
        cert: dir.join(TLS_CERT_KEY),
        key: dir.join(TLS_KEY_KEY),
    }
}

/// The current bundle (renewed when due), written to the files and registered.
async fn sync_once(
    client: &Client,
    settings: &ServerSettings,
    configuration: &impl Fn(&str) -> MutatingWebhookConfiguration,
) -> Result<CertBundle, WebhookError> {
    let bundle = current_bundle(client, settings).await?;
    write_files(&settings.cert_dir, &bundle)?;
    let now = jiff::Timestamp::now().as_second();
    let config = configuration(&bundle.ca_bundle(now));
    let name = config.metadata.name.clone().unwrap_or_default();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(&settings.field_manager).force(),
            &Patch::Apply(&config),
        )
        .await
        .map_err(|source| WebhookError::Register { name, source })?;
    Ok(bundle)
}

async fn current_bundle(
    client: &Client,
    settings: &ServerSettings,
) -> Result<CertBundle, WebhookError> {
    let secrets = Api::<Secret>::namespaced(client.clone(), &settings.secret_namespace);
    let secret_error = |source| WebhookError::Secret {
        namespace: settings.secret_namespace.clone(),
        name: settings.secret_name.clone(),
        source,
    };
    let names = settings.endpoint.certificate_names();
    // Two rounds: a lost race re-reads the winner's Secret and uses it.
    for _ in 0..2 {
        let existing = secrets
            .get_opt(&settings.secret_name)
            .await
            .map_err(secret_error)?;
        let stored = existing.as_ref().and_then(|s| {
            let data: BTreeMap<String, Vec<u8>> = s
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            CertBundle::from_secret_data(&data)
                .inspect_err(
                    |e| tracing::warn!(error = %e, "Replacing the webhook certificate Secret"),
                )
                .ok()
        });
        let now = jiff::Timestamp::now().as_second();
        let Some(renewed) = certs::renew(stored.as_ref(), &names, now)? else {
            if let Some(stored) = stored {
                return Ok(stored);
            }
            continue;
        };
        let data = renewed
            .to_secret_data()
            .into_iter()
            .map(|(k, v)| (k, ByteString(v.into_bytes())))
            .collect();
        let written = match existing {
            Some(mut secret) => {
                secret.data = Some(data);
                secrets
                    .replace(&settings.secret_name, &PostParams::default(), &secret)
                    .await
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.secret_name.clone()),
                        namespace: Some(settings.secret_namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    data: Some(data),
                    type_: Some("Opaque".into()),
                    ..Secret::default()
                };
                secrets.create(&PostParams::default(), &secret).await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %settings.secret_name, "Webhook certificate issued");
                return Ok(renewed);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(source) => return Err(secret_error(source)),
        }
    }
    Err(secret_error(kube::Error::Api(
        kube::core::Status::failure("another replica keeps replacing the Secret", "Conflict")
            .with_code(409)
            .boxed(),
    )))
}

/// Writes the key first and the certificate last, each by rename: the listener reloads when
/// both changed and keeps the previous pair when they do not match yet.
fn write_files(dir: &Path, bundle: &CertBundle) -> Result<(), WebhookError> {
    let files = cert_files(dir);
    let write = |path: &Path, text: &str| -> Result<(), WebhookError> {
        let error = |source| WebhookError::Files {
            path: path.display().to_string(),
            source,
        };
        if std::fs::read_to_string(path).is_ok_and(|current| current == text) {
            return Ok(());
        }
        std::fs::create_dir_all(dir).map_err(error)?;
        let temp = path.with_extension("tmp");
        std::fs::write(&temp, text).map_err(error)?;
        std::fs::rename(&temp, path).map_err(error)
    };
    write(&files.key, &bundle.server_key)?;
    write(&files.cert, &bundle.server_cert)
}
