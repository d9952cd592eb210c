//! HTTPS downloads of shim binaries against a local HTTPS server: the checksum is mandatory and
//! checked while streaming, transient failures are retried with backoff, permanent ones are
//! not, the size is bounded, and a failed download leaves the host untouched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gardener_extension_containerd_shim::desired_shims::{
    Arch, Binary, BinarySource, UrlArtifact, ready_label,
};
use gardener_extension_containerd_shim::installer::InstallerError;
use gardener_extension_containerd_shim::installer::converge::{Installer, Settings};
use gardener_extension_containerd_shim::installer::digest::sha256_hex;
use gardener_extension_containerd_shim::installer::host::{Host, TestHost};
use gardener_extension_containerd_shim::installer::payload::{
    DownloadConfig, DownloadError, Downloader,
};

use crate::support::https::{Reply, Server, serve};
use crate::support::installer::{STATE_DIR, TestNode, corpus, desired, diff, spin};

const BINARY: &[u8] = b"\x7fELF pretend shim binary";

fn downloader(server: &Server, max_bytes: u64) -> Downloader {
    Downloader::new(DownloadConfig {
        max_bytes,
        retries: 3,
        min_delay: Duration::from_millis(10),
        attempt_timeout: Duration::from_secs(10),
        extra_roots_pem: Some(server.ca_pem.clone()),
        ..DownloadConfig::default()
    })
    .unwrap()
}

async fn routes() -> Server {
    serve(BTreeMap::from([
        ("/shim".to_string(), Reply::Body(BINARY.to_vec())),
        (
            "/flaky".to_string(),
            Reply::FailThen {
                status: 503,
                times: 2,
                body: BINARY.to_vec(),
            },
        ),
        ("/gone".to_string(), Reply::Status(404)),
        ("/huge".to_string(), Reply::Announce(10 * 1024 * 1024)),
        ("/moved".to_string(), Reply::Redirect("/shim".into())),
    ]))
    .await
}

/// Downloads into a file of a test host and returns (result, file content).
async fn fetch(
    server: &Server,
    path: &str,
    max: u64,
) -> (Result<String, DownloadError>, Option<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let host = TestHost::new(dir.path(), "/nonexistent");
    let file = std::path::Path::new("/download");
    let open = || host.create_file(file, 0o755);
    let result = downloader(server, max)
        .download(&format!("{}{path}", server.base), &open)
        .await
        .map(|done| done.sha256);
    (result, std::fs::read(host.path(file)).ok())
}

#[tokio::test]
async fn downloads_verify_retry_and_stay_bounded() {
    let server = routes().await;
    let (result, content) = fetch(&server, "/shim", 1024).await;
    assert_eq!(result.unwrap(), sha256_hex(BINARY));
    assert_eq!(content.as_deref(), Some(BINARY));

    // Transient 503s are retried.
    let (result, _) = fetch(&server, "/flaky", 1024).await;
    assert_eq!(result.unwrap(), sha256_hex(BINARY));
    assert_eq!(server.hits("/flaky"), 3);

    // A 404 is not retried.
    let (result, _) = fetch(&server, "/gone", 1024).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, DownloadError::Status { status } if status.as_u16() == 404),
        "{err}"
    );
    assert!(err.to_string().contains("404"), "{err}");
    assert_eq!(server.hits("/gone"), 1);

    // Too large: refused from the announced length, not retried.
    let (result, _) = fetch(&server, "/huge", 1024).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, DownloadError::TooLarge { max: 1024, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("more than the limit of 1024"),
        "{err}"
    );
    assert_eq!(server.hits("/huge"), 1);
    // A body over the bound (without an announced length check passing) is refused too.
    let (result, _) = fetch(&server, "/shim", 8).await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            DownloadError::TooLarge { max: 8, .. } | DownloadError::BodyTooLarge { max: 8 }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("limit of 8"), "{err}");

    // Redirects are followed.
    let (result, _) = fetch(&server, "/moved", 1024).await;
    assert_eq!(result.unwrap(), sha256_hex(BINARY));

    // A server we do not trust is refused.
    let dir = tempfile::tempdir().unwrap();
    let host = TestHost::new(dir.path(), "/nonexistent");
    let open = || host.create_file(std::path::Path::new("/x"), 0o644);
    let untrusted = Downloader::new(DownloadConfig {
        retries: 0,
        ..DownloadConfig::default()
    })
    .unwrap();
    let err = untrusted
        .download(&format!("{}/shim", server.base), &open)
        .await
        .unwrap_err();
    assert!(matches!(err, DownloadError::Request(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("certificate") || text.contains("request failed"),
        "{text}"
    );
}

fn url_shim(
    server: &Server,
    path: &str,
    sha256: &str,
) -> gardener_extension_containerd_shim::desired_shims::DesiredShim {
    let mut shim = spin("v0.22.0");
    shim.binaries = vec![Binary {
        name: "containerd-shim-spin-v2".into(),
        source: BinarySource::Url {
            artifacts: BTreeMap::from([(
                Arch::Amd64,
                UrlArtifact {
                    url: format!("{}{path}", server.base),
                    sha256: sha256.into(),
                },
            )]),
        },
    }];
    shim
}

fn installer_for(
    node: &TestNode,
    server: &Server,
) -> Installer<gardener_extension_containerd_shim::installer::cluster::MemoryCluster> {
    Installer::new(
        node.host.clone() as Arc<dyn Host>,
        node.cluster.clone(),
        Settings::new(STATE_DIR, &node.staging),
        Some(downloader(server, 1024)),
    )
}

#[tokio::test]
async fn a_url_shim_installs_and_a_checksum_mismatch_changes_nothing() {
    let server = routes().await;
    for major in [1, 2] {
        // Mismatch: the download is discarded, nothing else happened.
        let node = TestNode::new(major, Some(&corpus("v2-gardener.toml")));
        let mut installer = installer_for(&node, &server);
        let before = node.snapshot();
        let wrong = "0".repeat(64);
        let err = installer
            .run(&desired(vec![url_shim(&server, "/shim", &wrong)]))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InstallerError::ChecksumMismatch { .. }),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&server.base) && message.contains(&wrong),
            "{message}"
        );
        let after = node.snapshot();
        assert!(before == after, "{}", diff(&before, &after));
        assert_eq!(node.host.restarts(), 0);

        // The right digest: installed, verified, labelled.
        let outcome = installer
            .run(&desired(vec![url_shim(
                &server,
                "/shim",
                &sha256_hex(BINARY),
            )]))
            .await
            .unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
        assert_eq!(
            std::fs::read(node.path(&format!(
                "{STATE_DIR}/current/spin/bin/containerd-shim-spin-v2"
            )))
            .unwrap(),
            BINARY
        );
        assert!(node.cluster.labels().contains_key(&ready_label("spin")));
    }
}
