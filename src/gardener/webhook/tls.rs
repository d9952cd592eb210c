//! HTTPS for a webhook: the serving certificate from files (a mounted Secret), picked up
//! again when the files change so that a rotated certificate needs no restart, and a listener
//! that completes TLS handshakes off the accept loop (a slow or silent client cannot stall the
//! others).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// How long a client has to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in flight at once; more connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("{path}: {detail}")]
    Pem { path: String, detail: String },
    #[error("{path}: unsupported private key: {detail}")]
    Key { path: String, detail: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate and key files the webhook serves.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    fn stamp(&self) -> Stamp {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some((modified(&self.cert)?, modified(&self.key)?))
    }

    /// Reads and parses both files.
    pub fn load(&self) -> Result<CertifiedKey, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let cert_path = self.cert.display().to_string();
        let key_path = self.key.display().to_string();
        let certs = CertificateDer::pem_slice_iter(&read(&self.cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem {
                path: cert_path.clone(),
                detail: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate { path: cert_path });
        }
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)?).map_err(|e| TlsError::Pem {
            path: key_path.clone(),
            detail: e.to_string(),
        })?;
        let key =
            rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| TlsError::Key {
                path: key_path,
                detail: e.to_string(),
            })?;
        Ok(CertifiedKey::new(certs, key))
    }
}

/// The files' modification times when they were read last.
type Stamp = Option<(SystemTime, SystemTime)>;

/// Serves the files' certificate, reloading it when their modification times change. A
/// reload that fails (a half-written rotation) keeps the previous certificate.
#[derive(Debug)]
pub struct ReloadingCert {
    files: CertFiles,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    /// Loads the files now: a webhook without a usable certificate does not start.
    pub fn new(files: CertFiles) -> Result<Self, TlsError> {
        let stamp = files.stamp();
        let key = Arc::new(files.load()?);
        Ok(ReloadingCert {
            files,
            current: Mutex::new((stamp, key)),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = self.files.stamp();
        if stamp.is_some() && stamp != current.0 {
            match self.files.load() {
                Ok(key) => {
                    tracing::info!(cert = %self.files.cert.display(), "Serving certificate reloaded");
                    *current = (stamp, Arc::new(key));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Serving certificate not reloaded, keeping the previous one")
                }
            }
        }
        current.1.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The server side of TLS with our certificate, HTTP/1.1 only.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepted connections with their handshake done, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` until `stop` is cancelled.
    pub fn new(
        listener: TcpListener,
        config: rustls::ServerConfig,
        stop: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let (tcp, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "Accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop stopped (shutdown): nothing more will come; the server's graceful
            // shutdown ends the serve loop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
