//! `extensions.gardener.cloud/v1alpha1` `Cluster` and a typed view of the Shoot it embeds.
//!
//! gardenlet embeds whole `core.gardener.cloud/v1beta1` objects (Shoot, Seed, CloudProfile) as
//! raw JSON. We decode only the Shoot fields an extension needs; everything else is ignored,
//! so a newer Gardener with more fields decodes fine.

use std::collections::BTreeMap;
use std::sync::Arc;

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
#[serde(rename_all = "camelCase", from = "ClusterSpecWire")]
pub struct ClusterSpec {
    #[serde(default)]
    pub cloud_profile: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<serde_json::Value>,
    #[serde(default)]
    pub shoot: serde_json::Value,
    /// The decoded Shoot, for a Cluster whose `shoot` was replaced by it (the caches do this:
    /// [`Cluster::keep_only_shoot_view`]). Never sent to or read from the API server.
    #[serde(skip)]
    pub shoot_view: Option<Arc<Shoot>>,
}

/// `spec` as it comes from the API server. The embedded objects hold the shoot owner's
/// providerConfigs of every extension, which the API server accepts nested up to 10 000 levels,
/// far beyond serde_json's recursion limit (128): decoded as part of the list, one such Shoot
/// would make every list and watch of Clusters fail. So each embedded object is taken as raw
/// text (skipped without a recursion limit) and parsed on its own; a Shoot too deep for that is
/// decoded into the typed [`Shoot`] view, which skips the fields it does not know without
/// recursing into them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterSpecWire {
    #[serde(default)]
    cloud_profile: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    seed: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    shoot: Option<Box<serde_json::value::RawValue>>,
}

impl From<ClusterSpecWire> for ClusterSpec {
    fn from(wire: ClusterSpecWire) -> Self {
        let parse = |raw: &serde_json::value::RawValue| {
            serde_json::from_str::<serde_json::Value>(raw.get())
        };
        // CloudProfile and Seed are never read by an extension (the caches drop them).
        let cloud_profile = wire
            .cloud_profile
            .and_then(|raw| parse(&raw).ok())
            .unwrap_or_default();
        let seed = wire
            .seed
            .and_then(|raw| parse(&raw).ok())
            .filter(|v| !v.is_null());
        let shoot = match wire.shoot {
            None => serde_json::Value::Null,
            Some(raw) => parse(&raw).unwrap_or_else(|deep| {
                serde_json::from_str::<Shoot>(raw.get())
                    .map_err(|e| e.to_string())
                    .and_then(|shoot| serde_json::to_value(shoot).map_err(|e| e.to_string()))
                    // Not a Shoot at all: keep the reason, so that `shoot()` reports it.
                    .unwrap_or_else(|e| {
                        serde_json::Value::String(format!("undecodable Shoot ({deep}): {e}"))
                    })
            }),
        };
        ClusterSpec {
            cloud_profile,
            seed,
            shoot,
            shoot_view: None,
        }
    }
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
        if let Some(view) = &self.spec.shoot_view {
            return Ok(Some(Shoot::clone(view)));
        }
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

impl Cluster {
    /// Replaces the embedded objects by the decoded Shoot: a Shoot is tens of kilobytes of
    /// JSON and several times that as a tree of values, its typed view a few hundred bytes.
    /// A Shoot that does not decode is kept as it is, so that [`Cluster::shoot`] reports why.
    pub fn keep_only_shoot_view(&mut self) {
        self.spec.cloud_profile = serde_json::Value::Null;
        self.spec.seed = None;
        if let Ok(Some(shoot)) = self.shoot() {
            self.spec.shoot_view = Some(Arc::new(shoot));
            self.spec.shoot = serde_json::Value::Null;
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
    #[serde(
        default,
        rename = "kubeAPIServer",
        skip_serializing_if = "Option::is_none"
    )]
    pub kube_api_server: Option<KubeApiServer>,
}

/// `spec.kubernetes.kubeAPIServer`: the switches that decide which APIs the Shoot serves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeApiServer {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runtime_config: BTreeMap<String, bool>,
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
    fn a_shoot_deeper_than_the_recursion_limit_still_decodes() {
        // Another extension's providerConfig in the Shoot, nested past serde_json's 128 levels.
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let text = format!(
            r#"{{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Cluster","metadata":{{"name":"shoot--p--s"}},"spec":{{"cloudProfile":{{"x":{deep}}},"seed":{{"y":{deep}}},"shoot":{{"apiVersion":"core.gardener.cloud/v1beta1","kind":"Shoot","metadata":{{"name":"s"}},"spec":{{"extensions":[{{"type":"other","providerConfig":{{"a":{deep}}}}}],"kubernetes":{{"version":"1.33.2"}},"provider":{{"type":"local","workers":[{{"name":"a"}}]}}}}}}}}}}"#
        );
        let list =
            format!(r#"{{"apiVersion":"v1","kind":"List","metadata":{{}},"items":[{text}]}}"#);
        let list: kube::core::ObjectList<Cluster> =
            serde_json::from_str(&list).expect("the list decodes");
        let cluster = &list.items[0];
        let shoot = cluster
            .shoot()
            .expect("the Shoot decodes")
            .expect("a Shoot");
        assert_eq!(shoot.spec.kubernetes.version, "1.33.2");
        assert_eq!(shoot.containerd_pools().count(), 1);
        // Nobody reads these; too deep to keep, they are dropped.
        assert!(cluster.spec.cloud_profile.is_null());
        assert_eq!(cluster.spec.seed, None);

        // A deep value that is not a Shoot at all is still reported as malformed.
        let text = format!(
            r#"{{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Cluster","metadata":{{"name":"shoot--p--s"}},"spec":{{"shoot":{{"spec":{{"provider":{{"workers":{deep}}}}}}}}}}}"#
        );
        let cluster: Cluster = serde_json::from_str(&text).expect("decodes");
        let err = cluster.shoot().expect_err("not a Shoot");
        assert!(err.to_string().contains("undecodable Shoot"), "{err}");
    }

    #[test]
    fn clusters_decode_as_before() {
        let text = r#"{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Cluster","metadata":{"name":"c"},"spec":{"cloudProfile":{"a":1},"seed":null,"shoot":{"metadata":{"name":"s"}}}}"#;
        let cluster: Cluster = serde_json::from_str(text).expect("decodes");
        assert_eq!(cluster.spec.cloud_profile, serde_json::json!({"a": 1}));
        assert_eq!(cluster.spec.seed, None);
        assert_eq!(
            cluster.spec.shoot,
            serde_json::json!({"metadata": {"name": "s"}})
        );
        let text = r#"{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Cluster","metadata":{"name":"c"},"spec":{}}"#;
        let cluster: Cluster = serde_json::from_str(text).expect("decodes");
        assert!(cluster.spec.shoot.is_null());
        assert!(cluster.shoot().expect("no Shoot is fine").is_none());
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
