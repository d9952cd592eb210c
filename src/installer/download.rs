//! HTTPS downloads of shim binaries: bounded size, a timeout per attempt, retries with
//! exponential backoff on transient failures (connection errors, timeouts, 5xx, 429), and the
//! sha256 computed while streaming to the host file. Client errors (4xx), a body over the size
//! bound and a checksum mismatch are not retried: they would fail the same way again.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};

use crate::installer::host::HostWriter;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Limits and trust of downloads.
#[derive(Clone, Debug)]
pub struct DownloadConfig {
    /// A body larger than this is refused.
    pub max_bytes: u64,
    /// Bound for one attempt (connect, headers and body).
    pub attempt_timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts after the first.
    pub retries: usize,
    /// First backoff delay (doubling, with jitter).
    pub min_delay: Duration,
    /// Additional trusted CA certificates (PEM), besides the system's.
    pub extra_roots_pem: Option<String>,
    /// Follow at most this many redirects.
    pub max_redirects: usize,
}

impl Default for DownloadConfig {
    fn default() -> Self {
        DownloadConfig {
            max_bytes: 512 * 1024 * 1024,
            attempt_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(15),
            retries: 4,
            min_delay: Duration::from_secs(1),
            extra_roots_pem: None,
            max_redirects: 5,
        }
    }
}

/// A finished download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Downloaded {
    pub sha256: String,
    pub bytes: u64,
}

/// Why a downloader could not be set up or a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("extra CA certificates: {0}")]
    ExtraRootsPem(#[source] rustls::pki_types::pem::Error),

    #[error("extra CA certificate: {0}")]
    ExtraRootRejected(#[source] rustls::Error),

    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),

    #[error("invalid URL {url}: {source}")]
    InvalidUrl {
        url: String,
        #[source]
        source: hyper::http::uri::InvalidUri,
    },

    #[error("{url} is not https")]
    NotHttps { url: String },

    #[error("request failed: {0:#}")]
    Request(#[source] hyper_util::client::legacy::Error),

    #[error("too many redirects")]
    TooManyRedirects,

    #[error("{status} without a Location")]
    RedirectWithoutLocation { status: hyper::StatusCode },

    #[error("server answered {status}")]
    Status { status: hyper::StatusCode },

    #[error("the file has {length} bytes, more than the limit of {max}")]
    TooLarge { length: u64, max: u64 },

    #[error("the body exceeds the limit of {max} bytes")]
    BodyTooLarge { max: u64 },

    #[error("reading the body: {0}")]
    Body(#[source] hyper::Error),

    #[error("timed out after {timeout:?}")]
    TimedOut { timeout: Duration },

    #[error("cannot create the file: {0}")]
    Create(#[source] std::io::Error),

    #[error("writing the file: {0}")]
    Write(#[source] std::io::Error),

    #[error("syncing the file: {0}")]
    Sync(#[source] std::io::Error),
}

impl DownloadError {
    /// Whether another attempt may help: the network and overloaded servers recover, a
    /// refused request, a body over the bound or a local file error would fail the same way.
    pub fn retryable(&self) -> bool {
        match self {
            DownloadError::Request(_) | DownloadError::Body(_) | DownloadError::TimedOut { .. } => {
                true
            }
            DownloadError::Status { status } => {
                status.is_server_error() || *status == hyper::StatusCode::TOO_MANY_REQUESTS
            }
            _ => false,
        }
    }
}

/// Downloads over HTTPS only.
#[derive(Clone)]
pub struct Downloader {
    client: HttpsClient,
    config: DownloadConfig,
}

impl Downloader {
    pub fn new(config: DownloadConfig) -> Result<Self, DownloadError> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            // A malformed system certificate must not disable all the others.
            let _ = roots.add(cert);
        }
        if let Some(pem) = &config.extra_roots_pem {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(DownloadError::ExtraRootsPem)?;
                roots.add(cert).map_err(DownloadError::ExtraRootRejected)?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(DownloadError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Downloader { client, config })
    }

    /// Streams `url` into files that `open` creates (one per attempt), returning the sha256 and
    /// size of the body. The caller compares the digest.
    pub async fn download(
        &self,
        url: &str,
        open: &(dyn Fn() -> std::io::Result<Box<dyn HostWriter>> + Send + Sync),
    ) -> Result<Downloaded, DownloadError> {
        let attempt = || async {
            let timeout = self.config.attempt_timeout;
            tokio::time::timeout(timeout, self.attempt(url, open))
                .await
                .unwrap_or(Err(DownloadError::TimedOut { timeout }))
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.config.min_delay)
            .with_max_times(self.config.retries)
            .with_jitter();
        attempt
            .retry(backoff)
            .when(DownloadError::retryable)
            .notify(|failure, delay| {
                tracing::warn!(url, error = %failure, ?delay, "download failed; retrying");
            })
            .await
    }

    async fn attempt(
        &self,
        url: &str,
        open: &(dyn Fn() -> std::io::Result<Box<dyn HostWriter>> + Send + Sync),
    ) -> Result<Downloaded, DownloadError> {
        let mut current = url.to_string();
        let mut redirects = 0;
        let response = loop {
            let uri: hyper::Uri = current
                .parse()
                .map_err(|source| DownloadError::InvalidUrl {
                    url: current.clone(),
                    source,
                })?;
            if uri.scheme_str() != Some("https") {
                return Err(DownloadError::NotHttps { url: current });
            }
            let response = self.client.get(uri).await.map_err(DownloadError::Request)?;
            let status = response.status();
            if status.is_redirection() {
                redirects += 1;
                if redirects > self.config.max_redirects {
                    return Err(DownloadError::TooManyRedirects);
                }
                let Some(location) = response
                    .headers()
                    .get(hyper::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                else {
                    return Err(DownloadError::RedirectWithoutLocation { status });
                };
                current = resolve_location(&current, location);
                continue;
            }
            if !status.is_success() {
                return Err(DownloadError::Status { status });
            }
            break response;
        };
        let max = self.config.max_bytes;
        if let Some(length) = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && length > max
        {
            return Err(DownloadError::TooLarge { length, max });
        }
        let mut writer = open().map_err(DownloadError::Create)?;
        let mut hasher = Sha256::new();
        let mut total: u64 = 0;
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(DownloadError::Body)?;
            let Some(chunk) = frame.data_ref() else {
                continue;
            };
            total += chunk.len() as u64;
            if total > max {
                return Err(DownloadError::BodyTooLarge { max });
            }
            hasher.update(chunk);
            writer.write_all(chunk).map_err(DownloadError::Write)?;
        }
        writer.finish().map_err(DownloadError::Sync)?;
        Ok(Downloaded {
            sha256: hex::encode(hasher.finalize()),
            bytes: total,
        })
    }
}

/// A redirect target: absolute as given, or a path on the same origin.
fn resolve_location(current: &str, location: &str) -> String {
    if location.starts_with('/') && !location.starts_with("//") {
        let origin_end = current
            .find("://")
            .and_then(|scheme| current[scheme + 3..].find('/').map(|at| scheme + 3 + at))
            .unwrap_or(current.len());
        format!("{}{location}", &current[..origin_end])
    } else {
        location.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_origin() {
        assert_eq!(
            resolve_location("https://a.example/x/y", "/z"),
            "https://a.example/z"
        );
        assert_eq!(
            resolve_location("https://a.example", "/z"),
            "https://a.example/z"
        );
        assert_eq!(
            resolve_location("https://a.example/x", "https://b.example/q"),
            "https://b.example/q"
        );
    }
}
