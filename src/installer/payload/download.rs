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

/// Why a download failed; `retryable` decides whether another attempt may help.
#[derive(Debug)]
struct Failure {
    message: String,
    retryable: bool,
}

impl Failure {
    fn transient(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            retryable: true,
        }
    }
    fn permanent(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            retryable: false,
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
    pub fn new(config: DownloadConfig) -> Result<Self, String> {
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
                let cert = cert.map_err(|err| format!("extra CA certificates: {err}"))?;
                roots
                    .add(cert)
                    .map_err(|err| format!("extra CA certificate: {err}"))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| format!("TLS configuration: {err}"))?
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
    ) -> Result<Downloaded, String> {
        let attempt = || async {
            match tokio::time::timeout(self.config.attempt_timeout, self.attempt(url, open)).await {
                Ok(result) => result,
                Err(_) => Err(Failure::transient(format!(
                    "timed out after {:?}",
                    self.config.attempt_timeout
                ))),
            }
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.config.min_delay)
            .with_max_times(self.config.retries)
            .with_jitter();
        attempt
            .retry(backoff)
            .when(|failure: &Failure| failure.retryable)
            .notify(|failure, delay| {
                tracing::warn!(url, error = %failure.message, ?delay, "download failed; retrying");
            })
            .await
            .map_err(|failure| failure.message)
    }

    async fn attempt(
        &self,
        url: &str,
        open: &(dyn Fn() -> std::io::Result<Box<dyn HostWriter>> + Send + Sync),
    ) -> Result<Downloaded, Failure> {
        let response = self.get_following_redirects(url).await?;
        let max = self.config.max_bytes;
        if let Some(length) = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && length > max
        {
            return Err(Failure::permanent(format!(
                "the file has {length} bytes, more than the limit of {max}"
            )));
        }
        write_body(response.into_body(), max, open).await
    }

    /// The successful response to a GET of `url`, after at most `max_redirects` redirects,
    /// each to https again.
    async fn get_following_redirects(
        &self,
        url: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Failure> {
        let mut current = url.to_string();
        let mut redirects = 0;
        loop {
            let uri: hyper::Uri = current
                .parse()
                .map_err(|err| Failure::permanent(format!("invalid URL {current}: {err}")))?;
            if uri.scheme_str() != Some("https") {
                return Err(Failure::permanent(format!("{current} is not https")));
            }
            let response = self
                .client
                .get(uri)
                .await
                .map_err(|err| Failure::transient(format!("request failed: {err:#}")))?;
            let status = response.status();
            if status.is_redirection() {
                redirects += 1;
                if redirects > self.config.max_redirects {
                    return Err(Failure::permanent("too many redirects"));
                }
                let Some(location) = response
                    .headers()
                    .get(hyper::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                else {
                    return Err(Failure::permanent(format!("{status} without a Location")));
                };
                current = resolve_location(&current, location);
                continue;
            }
            if status.is_server_error() || status == hyper::StatusCode::TOO_MANY_REQUESTS {
                return Err(Failure::transient(format!("server answered {status}")));
            }
            if !status.is_success() {
                return Err(Failure::permanent(format!("server answered {status}")));
            }
            return Ok(response);
        }
    }
}

/// Streams the body into the file `open` creates, hashing it and refusing more than `max`
/// bytes.
async fn write_body(
    mut body: hyper::body::Incoming,
    max: u64,
    open: &(dyn Fn() -> std::io::Result<Box<dyn HostWriter>> + Send + Sync),
) -> Result<Downloaded, Failure> {
    let mut writer =
        open().map_err(|err| Failure::permanent(format!("cannot create the file: {err}")))?;
    let mut hasher = Sha256::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| Failure::transient(format!("reading the body: {err}")))?;
        let Some(chunk) = frame.data_ref() else {
            continue;
        };
        total += chunk.len() as u64;
        if total > max {
            return Err(Failure::permanent(format!(
                "the body exceeds the limit of {max} bytes"
            )));
        }
        hasher.update(chunk);
        writer
            .write_all(chunk)
            .map_err(|err| Failure::permanent(format!("writing the file: {err}")))?;
    }
    writer
        .finish()
        .map_err(|err| Failure::permanent(format!("syncing the file: {err}")))?;
    Ok(Downloaded {
        sha256: hex::encode(hasher.finalize()),
        bytes: total,
    })
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
