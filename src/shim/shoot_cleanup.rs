//! What an uninstall removes from the shoot besides the ManagedResource's own objects: the
//! desired-set ConfigMaps (garbage-collectable: gardener-resource-manager leaves them to its
//! collector, which may run hours later, when they leave a bundle or the ManagedResource goes)
//! and the installers' restart Leases (created by the nodes, in no bundle). They go right
//! before the ManagedResource: the installer pods have their desired set mounted already.
//!
//! Everything is found by name, never by a list of the shoot: the ManagedResource remembers the
//! data secrets of its current and superseded bundles by name; each bundle names its desired-set
//! ConfigMaps, and each desired set its `maxConcurrentRestarts`, which names the Leases
//! `containerd-shim-restart-<i>`.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DeleteParams;
use kube::{Api, Client};
use serde_json::Value;

use crate::desired_shims::{CONFIG_MAP_KEY, DesiredShims, restart_lease};
use crate::gardener::api::ManagedResource;
use crate::gardener::managed_resource::decode_secret;
use crate::gardener::managed_resource::desired::superseded_secrets;
use crate::shim::render::names::{GARBAGE_COLLECTABLE_LABEL, INSTALLER, NAMESPACE};

/// Why removing what the installers left in the shoot failed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error("cannot read the bundle secret {namespace}/{name}: {source}")]
    ReadSecret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete {kind} {namespace}/{name} in the shoot: {source}")]
    Delete {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The shoot objects of the installers that no ManagedResource deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstallerLeftovers {
    /// Desired-set ConfigMaps in [`NAMESPACE`], of the current bundle and the remembered ones.
    pub config_maps: BTreeSet<String>,
    /// Restart Leases in [`NAMESPACE`].
    pub leases: BTreeSet<String>,
}

impl InstallerLeftovers {
    pub fn is_empty(&self) -> bool {
        self.config_maps.is_empty() && self.leases.is_empty()
    }
}

/// A desired-set ConfigMap of a bundle: the installer's name prefix, in its namespace, marked
/// garbage-collectable, holding a desired set.
fn desired_set(object: &Value) -> Option<(String, Option<DesiredShims>)> {
    let meta = &object["metadata"];
    let name = meta["name"].as_str()?;
    let is_ours = object["kind"] == "ConfigMap"
        && meta["namespace"] == NAMESPACE
        && name.starts_with(&format!("{INSTALLER}-"))
        && meta["labels"][GARBAGE_COLLECTABLE_LABEL].is_string();
    if !is_ours {
        return None;
    }
    let desired = object["data"][CONFIG_MAP_KEY]
        .as_str()
        .and_then(|json| DesiredShims::from_json(json).ok());
    Some((name.to_string(), desired))
}

/// Decides from the objects of the current bundle and of every remembered bundle: their
/// desired-set ConfigMaps, and a Lease per restart slot any desired set allowed.
pub fn leftovers(current: &[Value], remembered: &[Value]) -> InstallerLeftovers {
    let mut slots = 0;
    let mut config_maps = BTreeSet::new();
    for (name, desired) in current.iter().chain(remembered).filter_map(desired_set) {
        if let Some(desired) = desired {
            slots = slots.max(desired.rollout.max_concurrent_restarts);
        }
        config_maps.insert(name);
    }
    InstallerLeftovers {
        config_maps,
        leases: (0..slots).map(restart_lease).collect(),
    }
}

/// The objects of the bundles `mr` references now, and of the superseded ones it remembers that
/// still exist (gardener-resource-manager's collector may have taken older ones, and with them
/// their ConfigMaps).
pub async fn bundles(
    seed: &Client,
    namespace: &str,
    mr: &ManagedResource,
) -> Result<(Vec<Value>, Vec<Value>), CleanupError> {
    let secrets: Api<Secret> = Api::namespaced(seed.clone(), namespace);
    let read = |name: String| {
        let secrets = secrets.clone();
        async move {
            match secrets.get_opt(&name).await {
                // A secret that does not decode is a bundle gardener-resource-manager could
                // not apply either: nothing of it reached the shoot.
                Ok(secret) => Ok(secret
                    .and_then(|s| decode_secret(&s).ok())
                    .unwrap_or_default()),
                Err(source) => Err(CleanupError::ReadSecret {
                    namespace: namespace.to_string(),
                    name,
                    source,
                }),
            }
        }
    };
    let mut current = Vec::new();
    for secret in &mr.spec.secret_refs {
        current.extend(read(secret.name.clone()).await?);
    }
    let mut remembered = Vec::new();
    let annotations = mr.metadata.annotations.clone().unwrap_or_default();
    for name in superseded_secrets(&annotations) {
        remembered.extend(read(name).await?);
    }
    Ok((current, remembered))
}

/// Deletes each of `leftovers` in the shoot by name; one that is gone already is fine.
pub async fn delete(shoot: &Client, leftovers: &InstallerLeftovers) -> Result<(), CleanupError> {
    let config_maps: Api<ConfigMap> = Api::namespaced(shoot.clone(), NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(shoot.clone(), NAMESPACE);
    for name in &leftovers.config_maps {
        delete_one(&config_maps, "ConfigMap", name).await?;
    }
    for name in &leftovers.leases {
        delete_one(&leases, "Lease", name).await?;
    }
    Ok(())
}

async fn delete_one<K>(api: &Api<K>, kind: &'static str, name: &str) -> Result<(), CleanupError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(CleanupError::Delete {
            kind,
            namespace: NAMESPACE.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::desired_shims::Rollout;

    fn set(name: &str, restarts: u32) -> Value {
        let desired = DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: restarts,
        });
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {GARBAGE_COLLECTABLE_LABEL: "true"}},
            "data": {CONFIG_MAP_KEY: desired.to_json()}
        })
    }

    #[test]
    fn every_desired_set_goes_and_every_slot_ever_allowed_is_a_lease() {
        let current = [
            set("containerd-shim-installer-aaaa", 1),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                   "metadata": {"name": "containerd-shim-installer-pool", "namespace": NAMESPACE}}),
        ];
        let remembered = [
            set("containerd-shim-installer-bbbb", 3),
            set("containerd-shim-installer-aaaa", 1),
            // Not a desired set: not garbage-collectable, another namespace, another name.
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "containerd-shim-installer-cccc", "namespace": NAMESPACE}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "containerd-shim-installer-dddd", "namespace": "default",
                                "labels": {GARBAGE_COLLECTABLE_LABEL: "true"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "other", "namespace": NAMESPACE,
                                "labels": {GARBAGE_COLLECTABLE_LABEL: "true"}}}),
        ];
        let found = leftovers(&current, &remembered);
        assert_eq!(
            found.config_maps,
            BTreeSet::from([
                "containerd-shim-installer-aaaa".to_string(),
                "containerd-shim-installer-bbbb".to_string(),
            ])
        );
        assert_eq!(
            found.leases,
            BTreeSet::from([
                "containerd-shim-restart-0".to_string(),
                "containerd-shim-restart-1".to_string(),
                "containerd-shim-restart-2".to_string(),
            ])
        );
    }

    #[test]
    fn without_any_desired_set_nothing_is_named() {
        assert!(leftovers(&[], &[]).is_empty());
    }
}
