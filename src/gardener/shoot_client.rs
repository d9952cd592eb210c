//! Clients for shoot API servers, built like Gardener's `NewClientForShoot`: from the kubeconfig
//! in the secret `gardener-internal` (or `gardener`) of the shoot's namespace in the seed.
//!
//! Building a client costs a TLS setup, so clients are kept per namespace and rebuilt only when
//! the secret changes (gardenlet rotates its token and CA).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

/// Secrets holding the shoot kubeconfig, in the order Gardener tries them.
pub const SHOOT_ACCESS_SECRETS: [&str; 2] = ["gardener-internal", "gardener"];
/// The data key of the kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// Why no shoot client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ShootClientError {
    #[error("cannot read secret {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("secret {namespace}/{name} has no valid key {KUBECONFIG_KEY}: {message}")]
    Kubeconfig {
        namespace: String,
        name: String,
        message: String,
    },
}

/// Shoot clients by namespace, each with the resourceVersion of the secret it was built from.
#[derive(Clone, Default)]
pub struct ShootClients {
    clients: Arc<Mutex<HashMap<String, (String, Client)>>>,
}

impl ShootClients {
    /// A client for the shoot of `namespace`, or `None` when the namespace has no shoot access
    /// secret (the shoot's API server cannot be reached from here).
    pub async fn client_for(
        &self,
        seed: &Client,
        namespace: &str,
    ) -> Result<Option<Client>, ShootClientError> {
        let secrets: Api<Secret> = Api::namespaced(seed.clone(), namespace);
        let mut found = None;
        for name in SHOOT_ACCESS_SECRETS {
            let secret = secrets
                .get_opt(name)
                .await
                .map_err(|source| ShootClientError::Read {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    source,
                })?;
            if let Some(secret) = secret {
                found = Some(secret);
                break;
            }
        }
        let Some(secret) = found else {
            return Ok(None);
        };
        let version = secret.resource_version().unwrap_or_default();
        if let Ok(cache) = self.clients.lock()
            && let Some((cached_version, client)) = cache.get(namespace)
            && *cached_version == version
        {
            return Ok(Some(client.clone()));
        }
        let client = build(namespace, &secret).await?;
        if let Ok(mut cache) = self.clients.lock() {
            cache.insert(namespace.to_string(), (version, client.clone()));
        }
        Ok(Some(client))
    }
}

async fn build(namespace: &str, secret: &Secret) -> Result<Client, ShootClientError> {
    let invalid = |message: String| ShootClientError::Kubeconfig {
        namespace: namespace.to_string(),
        name: secret.name_any(),
        message,
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .ok_or_else(|| invalid("the key is missing".to_string()))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|e| invalid(e.to_string()))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| invalid(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(e.to_string()))?;
    Client::try_from(config).map_err(|e| invalid(e.to_string()))
}
