//! The installer's loop: converge on start, then whenever the mounted desired set changes, the
//! Node's labels change, or the check period passes (drift repair). After each run the status
//! file tells the readiness probe whether this node is verified.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::desired_shims::{DesiredShims, Mode};

use super::cluster::Cluster;
use super::converge::Installer;
use super::error::InstallerError;
use super::payload::spec::sha256_hex;
use super::status::NodeStatus;

/// How often the desired file is looked at for changes (kubelet swaps the ConfigMap's files
/// atomically; polling its content is simpler and cheaper than inotify).
const DESIRED_POLL: Duration = Duration::from_secs(2);

/// Where the daemon reads and writes.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub desired_file: PathBuf,
    pub status_file: PathBuf,
    pub check_period: Duration,
}

/// The desired set and the sha256 of the file it came from.
pub fn read_desired(path: &Path) -> Result<(DesiredShims, String), InstallerError> {
    let bytes = std::fs::read(path).map_err(|err| InstallerError::Desired {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let desired = DesiredShims::from_json(&text).map_err(|err| InstallerError::Desired {
        path: path.to_path_buf(),
        message: err.to_string(),
    })?;
    Ok((desired, sha256_hex(&bytes)))
}

fn file_hash(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes))
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
    let (desired, file_sha) = match read_desired(&config.desired_file) {
        Ok(read) => read,
        Err(err) => {
            tracing::error!(error = %err, "cannot read the desired shim set");
            let status = NodeStatus::error(Mode::Install, err.to_string());
            write_status(config, &status);
            return status;
        }
    };
    let mut status = match installer.run(&desired).await {
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

/// Runs until `shutdown` resolves.
pub async fn run<C: Cluster>(
    installer: &mut Installer<C>,
    config: DaemonConfig,
    mut labels_changed: watch::Receiver<u64>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut poll = tokio::time::interval(DESIRED_POLL);
    let mut labels_open = true;
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let seen = file_hash(&config.desired_file);
        labels_changed.borrow_and_update();
        run_once(installer, &config).await;
        let next_check = tokio::time::sleep(config.check_period);
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
                _ = poll.tick() => {
                    if file_hash(&config.desired_file) != seen {
                        tracing::info!("the desired shim set changed");
                        break;
                    }
                }
            }
        }
    }
}
