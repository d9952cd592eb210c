//! Builders for the Gardener objects tests create in the seed.

use std::collections::BTreeMap;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ClusterSpec, Extension, ExtensionSpec,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

/// A minimal Shoot as gardenlet embeds it into a Cluster, with one containerd worker pool
/// `worker-a`.
pub fn shoot(name: &str) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Shoot",
        "metadata": {"name": name, "namespace": "garden-t"},
        "spec": {
            "kubernetes": {"version": "1.33.4"},
            "provider": {"type": "local", "workers": [
                {"name": "worker-a", "machine": {"type": "local", "architecture": "amd64"},
                 "cri": {"name": "containerd"}, "minimum": 1, "maximum": 3}
            ]}
        },
        "status": {
            "technicalID": name,
            "lastOperation": {"type": "Reconcile", "state": "Succeeded", "progress": 100,
                              "description": "Shoot cluster has been successfully reconciled.",
                              "lastUpdateTime": "2026-01-01T00:00:00Z"}
        }
    })
}

/// A Cluster named after the shoot namespace, embedding `shoot`.
pub fn cluster(namespace: &str, shoot: Value) -> Cluster {
    Cluster::new(
        namespace,
        ClusterSpec {
            cloud_profile: json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "CloudProfile", "metadata": {"name": "local"}}),
            seed: Some(
                json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Seed", "metadata": {"name": "local"}}),
            ),
            shoot,
            shoot_view: None,
        },
    )
}

/// gardenlet's `gardener` secret in a shoot namespace: the kubeconfig an extension uses to
/// reach the shoot's API server.
pub fn shoot_access_secret(namespace: &str, kubeconfig: Vec<u8>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("gardener".into()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        data: Some([("kubeconfig".to_string(), ByteString(kubeconfig))].into()),
        ..Default::default()
    }
}

/// An Extension of the given type, named after the type as gardenlet names it.
pub fn extension(namespace: &str, type_: &str, provider_config: Option<Value>) -> Extension {
    Extension {
        metadata: ObjectMeta {
            name: Some(type_.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: ExtensionSpec {
            type_: type_.to_string(),
            class: None,
            provider_config,
            provider_config_error: None,
        },
        status: None,
    }
}

/// `ext` renamed to `name`, with `annotations` and `finalizers` set as it is created.
pub fn named(
    mut ext: Extension,
    name: &str,
    annotations: &[(&str, &str)],
    finalizers: &[&str],
) -> Extension {
    ext.metadata.name = Some(name.to_string());
    ext.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    if !finalizers.is_empty() {
        ext.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    }
    ext
}

/// `Kind/name` of every object of a YAML or JSON stream (empty documents skipped), sorted.
pub fn kinds(objects: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = objects
        .iter()
        .filter(|o| !o.is_null())
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    k.sort();
    k
}
