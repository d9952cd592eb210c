//! `extensions.gardener.cloud/v1alpha1` `Cluster` and a typed view of the Shoot it embeds.
//!
//! gardenlet embeds whole `core.gardener.cloud/v1beta1` objects (Shoot, Seed, CloudProfile) as
//! raw JSON. We decode only the Shoot fields an extension needs; everything else is ignored,
//! so a newer Gardener with more fields decodes fine.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::FORCE_DELETION_ANNOTATION;
use super::common::{LastOperation, OperationState};

/// `Cluster.spec`: the embedded garden objects, as gardenlet wrote them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default)]
    pub cloud_profile: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<serde_json::Value>,
    #[serde(default)]
    pub shoot: serde_json::Value,
}

/// Why the embedded Shoot could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode the Shoot embedded in Cluster {cluster}: {source}")]
pub struct ShootDecodeError {
    pub cluster: String,
    #[source]
    pub source: serde_json::Error,
}

impl Cluster {
    /// The embedded Shoot. `Ok(None)` when gardenlet left it empty (as `GetCluster` does for an
    /// empty raw part); an error when it is present but malformed.
    pub fn shoot(&self) -> Result<Option<Shoot>, ShootDecodeError> {
        match &self.spec.shoot {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::Object(map) if map.is_empty() => Ok(None),
            value => Shoot::deserialize(value)
                .map(Some)
                .map_err(|source| ShootDecodeError {
                    cluster: kube::ResourceExt::name_any(self),
                    source,
                }),
        }
    }
}

/// The Shoot fields an extension reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shoot {
    #[serde(default)]
    pub metadata: ShootMeta,
    #[serde(default)]
    pub spec: ShootSpec,
    #[serde(default)]
    pub status: ShootStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShootMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShootSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<Hibernation>,
    #[serde(default)]
    pub kubernetes: ShootKubernetes,
    #[serde(default)]
    pub provider: ShootProvider,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hibernation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShootKubernetes {
    #[serde(default)]
    pub version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShootProvider {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub workers: Vec<WorkerPool>,
}

/// A worker pool (`spec.provider.workers[]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri: Option<Cri>,
    /// Labels Gardener puts on the pool's nodes (in addition to its own pool labels).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub machine: Machine,
}

/// Label Gardener puts on every node with the name of its worker pool.
pub const WORKER_POOL_LABEL: &str = "worker.gardener.cloud/pool";

/// The only CRI Gardener supports today; a pool without `cri` uses it too.
pub const CRI_CONTAINERD: &str = "containerd";

impl WorkerPool {
    /// Whether the pool's nodes run containerd (an absent `cri` defaults to containerd).
    pub fn runs_containerd(&self) -> bool {
        self.cri
            .as_ref()
            .is_none_or(|cri| cri.name == CRI_CONTAINERD)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cri {
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShootStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    #[serde(default)]
    pub is_hibernated: bool,
    #[serde(default, rename = "technicalID")]
    pub technical_id: String,
}

impl Shoot {
    /// `IsShootFailed`: the shoot's last operation failed; extensions leave it alone.
    pub fn is_failed(&self) -> bool {
        self.status
            .last_operation
            .as_ref()
            .is_some_and(|op| op.state == OperationState::Failed)
    }

    /// `ShootNeedsForceDeletion`: the force-deletion annotation parses as true
    /// (Go's `strconv.ParseBool`).
    pub fn needs_force_deletion(&self) -> bool {
        self.metadata
            .annotations
            .get(FORCE_DELETION_ANNOTATION)
            .is_some_and(|v| parse_go_bool(v) == Some(true))
    }

    /// `IsHibernationEnabled`: hibernation is requested.
    pub fn hibernation_enabled(&self) -> bool {
        self.spec
            .hibernation
            .as_ref()
            .and_then(|h| h.enabled)
            .unwrap_or(false)
    }

    /// `IsHibernated`: requested and reached.
    pub fn is_hibernated(&self) -> bool {
        self.hibernation_enabled() && self.status.is_hibernated
    }

    /// The Shoot itself is being deleted.
    pub fn is_being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// Worker pools whose nodes run containerd.
    pub fn containerd_pools(&self) -> impl Iterator<Item = &WorkerPool> {
        self.spec
            .provider
            .workers
            .iter()
            .filter(|p| p.runs_containerd())
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(shoot: serde_json::Value) -> Cluster {
        Cluster::new(
            "shoot--p--s",
            ClusterSpec {
                shoot,
                ..Default::default()
            },
        )
    }

    #[test]
    fn decodes_the_shoot_fields_and_ignores_the_rest() {
        let c = cluster(serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p",
                         "annotations": {"confirmation.gardener.cloud/force-deletion": "True"}},
            "spec": {
                "hibernation": {"enabled": true},
                "kubernetes": {"version": "1.33.2"},
                "provider": {"type": "local", "workers": [
                    {"name": "a", "machine": {"type": "m", "architecture": "arm64"}, "maximum": 3},
                    {"name": "b", "cri": {"name": "other"}}
                ]},
                "somethingNew": {"x": 1}
            },
            "status": {"isHibernated": true, "lastOperation": {
                "type": "Reconcile", "state": "Failed", "progress": 10,
                "description": "d", "lastUpdateTime": "2026-01-01T00:00:00Z"}}
        }));
        let shoot = c.shoot().unwrap().unwrap();
        assert!(shoot.is_failed());
        assert!(shoot.needs_force_deletion());
        assert!(shoot.is_hibernated());
        assert_eq!(shoot.spec.kubernetes.version, "1.33.2");
        let pools: Vec<_> = shoot.containerd_pools().map(|p| p.name.as_str()).collect();
        assert_eq!(pools, ["a"]);
    }

    #[test]
    fn empty_shoot_is_none_and_malformed_is_an_error() {
        assert!(cluster(serde_json::Value::Null).shoot().unwrap().is_none());
        assert!(cluster(serde_json::json!({})).shoot().unwrap().is_none());
        let err = cluster(serde_json::json!({"spec": {"provider": {"workers": "nope"}}}))
            .shoot()
            .unwrap_err();
        assert!(err.to_string().contains("shoot--p--s"), "{err}");
    }

    #[test]
    fn force_deletion_follows_go_parse_bool() {
        for (value, expected) in [
            ("true", true),
            ("1", true),
            ("True", true),
            ("false", false),
            ("yes", false),
        ] {
            let mut shoot = Shoot::default();
            shoot
                .metadata
                .annotations
                .insert(FORCE_DELETION_ANNOTATION.into(), value.into());
            assert_eq!(shoot.needs_force_deletion(), expected, "{value}");
        }
        assert!(!Shoot::default().needs_force_deletion());
    }
}
