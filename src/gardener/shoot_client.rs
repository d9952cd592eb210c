//! Clients for shoot API servers, built like Gardener's `NewClientForShoot`: from the kubeconfig
//! in the secret `gardener-internal` (or `gardener`) of the shoot's namespace in the seed.
//!
//! Gardener's Go library reads that secret from a cache of every Secret of the seed. This
//! extension watches no Secret (least privilege), and does not read it on every health check
//! either: a client is kept per namespace, and the secret is read again only when
//!
//! - the shoot refused a call of that client (the token expired, the CA was rotated): the
//!   caller reports it with [`ShootClients::refused`];
//! - the namespace's Cluster changed: gardenlet writes it in every shoot reconcile, which is
//!   when it creates and rotates these secrets.
//!
//! The first use in a namespace reads the secret by name (one GET, two when only `gardener`
//! exists). A cluster-wide list would save those reads when a controller takes over a seed,
//! but it needs `list secrets` in every namespace, which this extension does not hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

use crate::user_agent;

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

/// A shoot client and what it was built from.
#[derive(Clone)]
pub struct ShootClient {
    pub client: Client,
    /// `<secret name>@<resourceVersion>`: changes whenever the client is rebuilt.
    pub source: String,
}

/// What is known about one namespace.
#[derive(Clone)]
struct Entry {
    /// `None`: no shoot access secret.
    access: Option<ShootClient>,
    /// The Cluster's resourceVersion when this was resolved.
    cluster_version: Option<String>,
    /// A call was refused since: resolve again before the next use.
    refused: bool,
}

impl Default for ShootClients {
    /// Clients that name this crate and no component.
    fn default() -> ShootClients {
        ShootClients::new(&user_agent::user_agent(env!("CARGO_PKG_NAME"), "shoot"))
    }
}

/// Shoot clients by namespace.
#[derive(Clone)]
pub struct ShootClients {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    user_agent: String,
}

impl ShootClients {
    /// Clients that send `user_agent`.
    pub fn new(user_agent: &str) -> ShootClients {
        ShootClients {
            entries: Arc::default(),
            user_agent: user_agent.to_string(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client for the shoot of `namespace`, or `None` when the namespace has no shoot access
    /// secret (the shoot's API server cannot be reached from here). `cluster` is the
    /// namespace's Cluster (a new resourceVersion means the secret is read again).
    pub async fn client_for(
        &self,
        seed: &Client,
        namespace: &str,
        cluster: Option<&kube::api::ObjectMeta>,
    ) -> Result<Option<ShootClient>, ShootClientError> {
        let cluster_version = cluster.and_then(|c| c.resource_version.clone());
        let known = self.entries().get(namespace).cloned();
        if let Some(entry) = &known
            && !entry.refused
            && entry.cluster_version == cluster_version
        {
            return Ok(entry.access.clone());
        }
        let secret = read_secret(seed, namespace).await?;
        let access = match secret {
            None => None,
            Some(secret) => {
                let source = format!(
                    "{}@{}",
                    secret.name_any(),
                    secret.resource_version().unwrap_or_default()
                );
                match known.and_then(|k| k.access).filter(|a| a.source == source) {
                    // The same secret: the old client is as good as a new one.
                    Some(same) => Some(same),
                    None => Some(ShootClient {
                        client: build(namespace, &secret, &self.user_agent).await?,
                        source,
                    }),
                }
            }
        };
        self.entries().insert(
            namespace.to_string(),
            Entry {
                access: access.clone(),
                cluster_version,
                refused: false,
            },
        );
        Ok(access)
    }

    /// The shoot of `namespace` refused a call (401, 403, a TLS or connection failure): the
    /// secret is read again before the next use.
    pub fn refused(&self, namespace: &str) {
        if let Some(entry) = self.entries().get_mut(namespace) {
            entry.refused = true;
        }
    }

    /// A client built from the secret as it is now, kept nowhere: for rare calls that must
    /// not wait for a refusal to notice a rotated secret.
    pub async fn fresh(
        &self,
        seed: &Client,
        namespace: &str,
    ) -> Result<Option<Client>, ShootClientError> {
        match read_secret(seed, namespace).await? {
            None => Ok(None),
            Some(secret) => Ok(Some(build(namespace, &secret, &self.user_agent).await?)),
        }
    }

    /// Drops what is kept for `namespace` (its Extension is gone or hibernated).
    pub fn forget(&self, namespace: &str) {
        self.entries().remove(namespace);
    }
}

/// The first of [`SHOOT_ACCESS_SECRETS`] that `namespace` has.
async fn read_secret(seed: &Client, namespace: &str) -> Result<Option<Secret>, ShootClientError> {
    let secrets: Api<Secret> = Api::namespaced(seed.clone(), namespace);
    for name in SHOOT_ACCESS_SECRETS {
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|source| ShootClientError::Read {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            })?;
        if secret.is_some() {
            return Ok(secret);
        }
    }
    Ok(None)
}

async fn build(namespace: &str, secret: &Secret, agent: &str) -> Result<Client, ShootClientError> {
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
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(e.to_string()))?;
    user_agent::set(&mut config, agent).map_err(|e| invalid(e.to_string()))?;
    Client::try_from(config).map_err(|e| invalid(e.to_string()))
}

/// Whether an error of a shoot call means the client's credentials or trust are no good any
/// more (or the server is gone), so the secret should be read again.
pub fn is_refusal(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 401 || status.code == 403,
        // TLS failures (a rotated CA), refused connections, DNS: the client may be outdated.
        _ => true,
    }
}
