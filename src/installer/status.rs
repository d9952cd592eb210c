//! The node's verification status: written by the daemon after every run into the pod's
//! in-memory status directory, read by `containerd-shim-installer probe` (the readiness probe).
//! The pod is ready only when this node's desired shims are verified (or, with nothing to
//! install, when everything of ours is removed), so a bad version stops the DaemonSet rollout on
//! the first node it breaks.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::desired_shims::{FAILURE_MESSAGE_MAX, Mode, NODE_FAILURE};

use super::state::Phase;

/// Why the readiness probe fails; its message is what the kubelet records for the probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("not ready: {message}")]
    NotReady { message: String },

    #[error("the desired shim set changed; not verified yet")]
    DesiredChanged,
}

/// File name of the status file in the status directory.
pub const STATUS_FILE: &str = "status.json";

/// One shim's status on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShimStatus {
    pub name: String,
    pub handler: String,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<jiff::Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the probe decides on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub ready: bool,
    pub mode: Mode,
    /// sha256 of the desired-set file this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_file_sha256: Option<String>,
    pub message: String,
    #[serde(default)]
    pub shims: Vec<ShimStatus>,
    /// Version directories kept only because running shims execute them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retained_in_use: Vec<String>,
    /// The run failed before it could decide per shim (`message` says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run_failed: bool,
    /// A removed shim's files stay for pods of its handler that still run: the daemon looks
    /// again soon rather than a check period later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_pods: bool,
    pub updated_at: jiff::Timestamp,
}

impl NodeStatus {
    /// A not-ready status with an error message (the run failed before deciding).
    pub fn error(mode: Mode, message: String) -> Self {
        NodeStatus {
            ready: false,
            mode,
            desired_file_sha256: None,
            message,
            shims: Vec::new(),
            retained_in_use: Vec::new(),
            run_failed: true,
            waiting_for_pods: false,
            updated_at: jiff::Timestamp::now(),
        }
    }

    /// Writes the status file atomically (a probe never reads half a file).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let temp = super::host::temp_sibling(path);
        std::fs::write(&temp, text)?;
        std::fs::rename(&temp, path)
    }

    /// What failed on this node, for [`crate::desired_shims::FAILURES_ANNOTATION`]: shim name
    /// to message, or the run's error under [`NODE_FAILURE`] when no shim got that far.
    /// Empty when nothing failed.
    pub fn failures(&self) -> BTreeMap<String, String> {
        let cut = |message: &str| -> String {
            match message.char_indices().nth(FAILURE_MESSAGE_MAX) {
                Some((at, _)) => format!("{}...", &message[..at]),
                None => message.to_string(),
            }
        };
        let mut failures: BTreeMap<String, String> = self
            .shims
            .iter()
            .filter(|shim| shim.phase == Phase::Failed)
            .map(|shim| {
                let message = shim.error.as_deref().unwrap_or(&self.message);
                (shim.name.clone(), cut(message))
            })
            .collect();
        if self.run_failed {
            failures.insert(NODE_FAILURE.to_string(), cut(&self.message));
        }
        failures
    }

    pub fn read(path: &Path) -> Result<NodeStatus, ProbeError> {
        let bytes = std::fs::read(path).map_err(|source| ProbeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|source| ProbeError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The readiness decision: ready, and computed from the desired set that is mounted now (a
/// status of an older set does not count).
pub fn probe(status_file: &Path, desired_file: &Path) -> Result<String, ProbeError> {
    let status = NodeStatus::read(status_file)?;
    if !status.ready {
        return Err(ProbeError::NotReady {
            message: status.message,
        });
    }
    let current = std::fs::read(desired_file)
        .map(|bytes| super::digest::sha256_hex(&bytes))
        .map_err(|source| ProbeError::Read {
            path: desired_file.to_path_buf(),
            source,
        })?;
    if status.desired_file_sha256.as_deref() != Some(current.as_str()) {
        return Err(ProbeError::DesiredChanged);
    }
    Ok(status.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_needs_a_ready_status_of_the_current_desired_set() {
        let dir = tempfile::tempdir().unwrap();
        let status_file = dir.path().join("run/status.json");
        let desired = dir.path().join("desired.json");
        std::fs::write(&desired, "{}").unwrap();
        assert!(matches!(
            probe(&status_file, &desired),
            Err(ProbeError::Read { path, .. }) if path == status_file
        ));

        let mut status = NodeStatus::error(Mode::Install, "boom".into());
        status.write(&status_file).unwrap();
        assert_eq!(
            probe(&status_file, &desired).unwrap_err().to_string(),
            "not ready: boom"
        );

        status.ready = true;
        status.message = "2 shims verified".into();
        status.desired_file_sha256 = Some(super::super::digest::sha256_hex(b"{}"));
        status.write(&status_file).unwrap();
        assert_eq!(probe(&status_file, &desired).unwrap(), "2 shims verified");

        std::fs::write(&desired, "{ }").unwrap();
        let err = probe(&status_file, &desired).unwrap_err();
        assert!(matches!(err, ProbeError::DesiredChanged), "{err}");
        assert!(err.to_string().contains("changed"), "{err}");
    }
}

#[cfg(test)]
mod failure_tests {
    use super::*;

    #[test]
    fn failures_name_the_failed_shims_or_the_node() {
        let mut status = NodeStatus::error(Mode::Install, "the CRI plugin is disabled".into());
        assert_eq!(
            status.failures(),
            BTreeMap::from([(
                NODE_FAILURE.to_string(),
                "the CRI plugin is disabled".into()
            )])
        );
        status.run_failed = false;
        status.shims = vec![
            ShimStatus {
                name: "crun".into(),
                handler: "crun".into(),
                phase: Phase::Active,
                version: None,
                verified_at: None,
                error: None,
            },
            ShimStatus {
                name: "broken".into(),
                handler: "broken".into(),
                phase: Phase::Failed,
                version: None,
                verified_at: None,
                error: Some("x".repeat(FAILURE_MESSAGE_MAX + 10)),
            },
        ];
        let failures = status.failures();
        assert_eq!(failures.keys().collect::<Vec<_>>(), ["broken"]);
        assert_eq!(failures["broken"].chars().count(), FAILURE_MESSAGE_MAX + 3);
        status.shims.pop();
        assert!(status.failures().is_empty());
    }
}
