//! A tiny HTTPS server on 127.0.0.1 for download tests: a CA and a server certificate made
//! with the `openssl` command, fixed responses by path, and a request counter per path.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server answers on a path.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this body.
    Body(Vec<u8>),
    /// `status` for the first `times` requests, then the body.
    FailThen {
        status: u16,
        times: usize,
        body: Vec<u8>,
    },
    /// A status without a body.
    Status(u16),
    /// 200 announcing a body of this length (not sent).
    Announce(u64),
    /// A redirect to another path of this server.
    Redirect(String),
}

pub struct Server {
    pub base: String,
    /// The CA certificate (PEM) clients must trust.
    pub ca_pem: String,
    hits: Arc<Mutex<BTreeMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl is required for HTTPS tests: {e}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Starts a server answering `routes`.
pub async fn serve(routes: BTreeMap<String, Reply>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
    ]);
    openssl(d, &ca);
    let mut leaf = vec!["req"];
    leaf.extend(ec);
    leaf.extend([
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(d, &leaf);
    std::fs::write(
        d.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "1",
            "-extfile",
            "ext",
        ],
    );
    let ca_pem = std::fs::read_to_string(d.join("ca.pem")).unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(d.join("leaf.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(d.join("leaf.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let hits: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let counters: Arc<Mutex<BTreeMap<String, Arc<AtomicUsize>>>> = Arc::default();
    let routes = Arc::new(routes);
    let task_hits = hits.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let routes = routes.clone();
            let hits = task_hits.clone();
            let counters = counters.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                *hits.lock().unwrap().entry(path.clone()).or_default() += 1;
                let count = counters
                    .lock()
                    .unwrap()
                    .entry(path.clone())
                    .or_default()
                    .fetch_add(1, Ordering::SeqCst);
                let (head, body) = match routes.get(&path) {
                    None => ("404 Not Found".to_string(), Vec::new()),
                    Some(Reply::Body(body)) => ("200 OK".to_string(), body.clone()),
                    Some(Reply::FailThen {
                        status,
                        times,
                        body,
                    }) if count < *times => (format!("{status} Failing"), Vec::new()),
                    Some(Reply::FailThen { body, .. }) => ("200 OK".to_string(), body.clone()),
                    Some(Reply::Status(status)) => (format!("{status} Status"), Vec::new()),
                    Some(Reply::Announce(length)) => {
                        let response = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
                        );
                        let _ = tls.write_all(response.as_bytes()).await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                    Some(Reply::Redirect(to)) => {
                        let response = format!(
                            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                        let _ = tls.write_all(response.as_bytes()).await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                };
                let response = format!(
                    "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    // The certificates live in memory from here on.
    drop(dir);
    Server {
        base,
        ca_pem,
        hits,
        task,
    }
}
