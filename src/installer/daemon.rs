//! The installer's loop: converge on start, then whenever the Node's labels change, containerd's
//! configuration changes or containerd restarts ([`super::host_watch`]), or the check period
//! passes (the safety net for drift the watches miss). After each run the status file tells the
//! readiness probe whether this node is verified.
//!
//! The desired set never changes under a running pod: it is an immutable ConfigMap named by
//! its content, and a new set comes with a new pod (the DaemonSet rollout). The installer
//! checks that the mounted set is the one its pod was created for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::desired_shims::{Delivery, DesiredShims, Mode};

use super::cluster::Cluster;
use super::converge::Installer;
use super::digest::sha256_hex;
use super::error::InstallerError;
use super::status::NodeStatus;

/// Where the daemon reads and writes.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub desired_file: PathBuf,
    /// The sha256 of the desired set this pod was created for (from its pod template); a
    /// mounted set with another digest is refused.
    pub expected_sha256: Option<String>,
    pub status_file: PathBuf,
    pub check_period: Duration,
    /// How soon a node looks again while a removed shim waits for its pods to end; doubled
    /// after each such run, up to [`POD_RECHECK_MAX`].
    pub pod_recheck_period: Duration,
}

/// The desired set and the sha256 of the file it came from. With `expected`, a file of
/// another digest is refused.
pub fn read_desired(
    path: &Path,
    expected: Option<&str>,
) -> Result<(DesiredShims, String), InstallerError> {
    let bytes = std::fs::read(path).map_err(|err| InstallerError::Desired {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let sha256 = sha256_hex(&bytes);
    if let Some(expected) = expected
        && expected != sha256
    {
        return Err(InstallerError::Desired {
            path: path.to_path_buf(),
            message: format!(
                "its sha256 is {sha256}, but this pod was created for the desired set {expected}; \
                 refusing it (a new set reaches a node only with the pod the DaemonSet rollout \
                 creates for it)"
            ),
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let desired = DesiredShims::from_json(&text).map_err(|err| InstallerError::Desired {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    Ok((desired, sha256))
}

/// Watches this node and bumps the counter whenever its labels change.
pub fn watch_node_labels(nodes: Api<Node>, node: &str) -> watch::Receiver<u64> {
    let (sender, receiver) = watch::channel(0u64);
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    tokio::spawn(async move {
        let mut last = None;
        let mut stream = watcher(nodes, config).boxed();
        while let Some(event) = stream.next().await {
            let node = match event {
                Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => node,
                Ok(_) => continue,
                Err(err) => {
                    tracing::warn!(error = %err, "watching the node failed; retrying");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            };
            let labels = node.metadata.labels.unwrap_or_default();
            if last.as_ref() != Some(&labels) {
                last = Some(labels);
                sender.send_modify(|n| *n += 1);
            }
        }
    });
    receiver
}

/// One run: read the desired file, converge, write the status. Returns the status.
pub async fn run_once<C: Cluster>(
    installer: &mut Installer<C>,
    config: &DaemonConfig,
) -> NodeStatus {
    let (desired, file_sha) =
        match read_desired(&config.desired_file, config.expected_sha256.as_deref()) {
            Ok(read) => read,
            Err(err) => {
                tracing::error!(error = %err, "cannot read the desired shim set");
                let status = NodeStatus::error(Mode::Install, err.to_string());
                write_status(config, &status);
                return status;
            }
        };
    // Shims the node agent delivers are only verified and labelled here; an uninstall is
    // always the installer's own (it removes what it installed, if anything, and the labels).
    let converged = match (desired.delivery, desired.mode) {
        (Delivery::Osc, Mode::Install) => installer.follow(&desired).await,
        _ => installer.run(&desired).await,
    };
    let mut status = match converged {
        Ok(outcome) => {
            tracing::info!(
                ready = outcome.status.ready,
                restarted = outcome.restarted,
                steps = ?outcome.steps,
                message = %outcome.status.message,
                "converged"
            );
            outcome.status
        }
        Err(err) => {
            tracing::error!(error = %err, "converging the node failed");
            NodeStatus::error(desired.mode, err.to_string())
        }
    };
    status.desired_file_sha256 = Some(file_sha);
    write_status(config, &status);
    status
}

fn write_status(config: &DaemonConfig, status: &NodeStatus) {
    if let Err(err) = status.write(&config.status_file) {
        tracing::error!(error = %err, file = %config.status_file.display(), "cannot write the status file");
    }
}

/// Publishes what failed on this node (the Node annotation the health check reads) when it
/// differs from what was published last; the first run always publishes, which also clears an
/// annotation an earlier pod left.
pub async fn publish_failures<C: Cluster>(
    installer: &Installer<C>,
    status: &NodeStatus,
    published: &mut Option<Option<String>>,
) {
    let failures = status.failures();
    let value =
        (!failures.is_empty()).then(|| serde_json::to_string(&failures).unwrap_or_default());
    if published.as_ref() == Some(&value) {
        return;
    }
    match installer.cluster().publish_failures(value.clone()).await {
        Ok(()) => *published = Some(value),
        Err(err) => tracing::warn!(error = %err, "cannot publish the node's failures"),
    }
}

/// Runs until `shutdown` resolves.
pub async fn run<C: Cluster>(
    installer: &mut Installer<C>,
    config: DaemonConfig,
    mut labels_changed: watch::Receiver<u64>,
    mut host_changed: watch::Receiver<u64>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut labels_open = true;
    let mut host_open = true;
    let mut published = None;
    let mut recheck = config.pod_recheck_period;
    loop {
        labels_changed.borrow_and_update();
        host_changed.borrow_and_update();
        let status = run_once(installer, &config).await;
        publish_failures(installer, &status, &mut published).await;
        // While a removal waits for pods, the CRI is asked again soon, so that the removal
        // follows the last pod within seconds, not a check period. The pause grows a little
        // while pods stay: a pod of a removed class may run for days.
        let period = next_period(status.waiting_for_pods, &mut recheck, &config);
        let next_check = tokio::time::sleep(period);
        tokio::pin!(next_check);
        loop {
            tokio::select! {
                () = &mut shutdown => {
                    tracing::info!("shutting down; the node keeps its configuration");
                    return;
                }
                () = &mut next_check => break,
                changed = labels_changed.changed(), if labels_open => {
                    if changed.is_ok() {
                        tracing::info!("node labels changed");
                        break;
                    }
                    labels_open = false;
                }
                changed = host_changed.changed(), if host_open => {
                    if changed.is_ok() {
                        tracing::info!("containerd's configuration changed or containerd restarted");
                        break;
                    }
                    host_open = false;
                }
            }
        }
    }
}

/// The longest pause while a removal waits for pods: a run (one `crictl pods`, a look at the
/// state directory and `/proc`) every few seconds costs little even for days, and a pod deleted
/// any time later is followed within this.
pub const POD_RECHECK_MAX: Duration = Duration::from_secs(5);

/// The pause before the next run: the check period, or while a removal waits for pods the
/// recheck pause, which doubles up to [`POD_RECHECK_MAX`] until the waiting ends.
fn next_period(waiting: bool, recheck: &mut Duration, config: &DaemonConfig) -> Duration {
    if !waiting {
        *recheck = config.pod_recheck_period;
        return config.check_period;
    }
    let cap = POD_RECHECK_MAX
        .max(config.pod_recheck_period)
        .min(config.check_period);
    let period = (*recheck).min(cap);
    *recheck = recheck.saturating_mul(2).min(cap);
    period
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_removal_looks_again_soon_then_less_often() {
        let config = DaemonConfig {
            desired_file: PathBuf::new(),
            expected_sha256: None,
            status_file: PathBuf::new(),
            check_period: Duration::from_secs(60),
            pod_recheck_period: Duration::from_secs(1),
        };
        let mut recheck = config.pod_recheck_period;
        let waiting: Vec<u64> = (0..8)
            .map(|_| next_period(true, &mut recheck, &config).as_secs())
            .collect();
        assert_eq!(waiting, [1, 2, 4, 5, 5, 5, 5, 5]);
        assert_eq!(next_period(false, &mut recheck, &config).as_secs(), 60);
        assert_eq!(next_period(true, &mut recheck, &config).as_secs(), 1);
    }

    #[test]
    fn a_desired_set_the_pod_was_not_created_for_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("desired-shims.json");
        let json = DesiredShims::uninstall(crate::desired_shims::Rollout {
            max_concurrent_restarts: 1,
        })
        .to_json();
        std::fs::write(&file, &json).unwrap();
        let digest = sha256_hex(json.as_bytes());
        let (_, read) = read_desired(&file, Some(&digest)).unwrap();
        assert_eq!(read, digest);
        read_desired(&file, None).unwrap();
        let err = read_desired(&file, Some("0000")).unwrap_err().to_string();
        assert!(
            err.contains("this pod was created for the desired set 0000"),
            "{err}"
        );
    }
}
