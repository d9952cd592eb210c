//! The `admission` subcommand as a process, without a garden: it answers AdmissionReviews over
//! TLS with its serving certificate, picks up a rotated certificate without a restart, serves
//! health on plain HTTP, refuses to start without a usable certificate, and stops cleanly on
//! SIGTERM. test/garden/admission.rs runs it behind the real Gardener API server.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::poll;
use crate::support::process::{BIN, free_port, http_get};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A CA and a serving certificate for 127.0.0.1 signed by it, as `<name>-ca.crt`,
/// `<name>.crt`, `<name>.key` in `dir`.
fn certificate(dir: &Path, name: &str) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is needed to make test certificates");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (ca_key, ca, key, csr, crt, ext) = (
        format!("{name}-ca.key"),
        format!("{name}-ca.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={name}-ca"),
        "-keyout",
        &ca_key,
        "-out",
        &ca,
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &crt,
    ]);
}

struct Server {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Server {
    fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- admission log ---\n{}", self.logs());
        }
    }
}

/// Polls until the server's process has exited (within `TIMEOUT`); `what` says what went wrong
/// otherwise.
async fn wait_for_exit(server: &mut Server, what: &str) -> std::process::ExitStatus {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}; log:\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn spawn(dir: &Path, port: u16, health: u16) -> Server {
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(BIN)
        .arg("admission")
        .arg(format!("--webhook-bind-address=127.0.0.1:{port}"))
        .arg(format!("--health-bind-address=127.0.0.1:{health}"))
        .arg(format!(
            "--tls-cert-file={}",
            dir.join("serving.crt").display()
        ))
        .arg(format!(
            "--tls-private-key-file={}",
            dir.join("serving.key").display()
        ))
        .arg("--log-format=text")
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    Server { child, log }
}

/// POSTs `body` to the webhook over TLS, trusting only `ca`: status and body.
async fn post(port: u16, ca: &Path, body: &str) -> Result<(u16, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).map_err(|e| e.to_string())?;
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let cert: rustls::pki_types::CertificateDer<'static> = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!(
        "POST /webhooks/validate-shoots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    tls.read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or(format!("no response: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(head.to_string())?;
    Ok((status, body.to_string()))
}

fn review(workers: &[&str]) -> String {
    let workers: Vec<Value> = workers.iter().map(|w| json!({"name": w})).collect();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0d5c3a9e",
        "kind": {"group": "core.gardener.cloud", "version": "v1beta1", "kind": "Shoot"},
        "operation": "CREATE",
        "object": {"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p"},
            "spec": {"kubernetes": {"version": "1.33.2"},
                     "provider": {"type": "local", "workers": workers},
                     "extensions": [{"type": "containerd-shim", "providerConfig": {
                        "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                        "kind": "ContainerdShimConfig",
                        "shims": [{"name": "crun", "workerPools": ["worker-a"]}]}}]}}}})
    .to_string()
}

#[tokio::test]
async fn admission_server_answers_over_tls_reloads_its_certificate_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path(), "first");
    std::fs::copy(dir.path().join("first.crt"), dir.path().join("serving.crt")).unwrap();
    std::fs::copy(dir.path().join("first.key"), dir.path().join("serving.key")).unwrap();
    let (port, health) = (free_port(), free_port());
    let mut server = spawn(dir.path(), port, health);
    poll::until("the admission server to be ready", TIMEOUT, || async {
        match http_get(health, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; log:\n{}", server.logs())),
        }
    })
    .await;

    let first_ca = dir.path().join("first-ca.crt");
    let (status, body) = post(port, &first_ca, &review(&["worker-b"])).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["uid"], "0d5c3a9e");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(
        answer["response"]["status"]["message"],
        "invalid containerd-shim configuration: spec.extensions[0].providerConfig.shims[0].workerPools[0]: \"worker-a\" is not a worker pool of the Shoot (pools: worker-b)"
    );
    let (_, body) = post(port, &first_ca, &review(&["worker-a"])).await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["response"]["allowed"],
        true
    );
    let (status, _) = post(port, &first_ca, "not a review").await.unwrap();
    assert_eq!(status, 400);

    // A rotated certificate (another CA) is served from the next handshake on.
    certificate(dir.path(), "second");
    std::fs::copy(
        dir.path().join("second.key"),
        dir.path().join("serving.key"),
    )
    .unwrap();
    std::fs::copy(
        dir.path().join("second.crt"),
        dir.path().join("serving.crt"),
    )
    .unwrap();
    let second_ca = dir.path().join("second-ca.crt");
    poll::until("the rotated certificate to be served", TIMEOUT, || async {
        post(port, &second_ca, &review(&["worker-a"])).await
    })
    .await;
    assert!(
        post(port, &first_ca, &review(&["worker-a"])).await.is_err(),
        "the old certificate is gone"
    );

    let (_, metrics) = http_get(health, "/metrics").await.unwrap();
    assert!(
        metrics.contains("containerd_shim_admission_reviews_total{outcome=\"refused\"} 1"),
        "{metrics}"
    );

    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_for_exit(&mut server, "no exit after SIGTERM").await;
    assert!(status.success(), "{status}; log:\n{}", server.logs());
}

#[tokio::test]
async fn admission_server_without_a_usable_certificate_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("serving.crt"), "not a certificate").unwrap();
    std::fs::write(dir.path().join("serving.key"), "").unwrap();
    let mut server = spawn(dir.path(), free_port(), free_port());
    let status = wait_for_exit(&mut server, "it keeps running").await;
    assert!(!status.success());
    let log = server.logs();
    assert!(log.contains("serving.crt"), "{log}");
}
