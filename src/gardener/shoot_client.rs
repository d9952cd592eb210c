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
//! At the first use, one paged list per secret name (cluster-wide, by field selector) resolves
//! every namespace that holds one of the caller's Extensions then, so a controller taking over
//! a seed sends two lists instead of two reads per shoot. Only those namespaces' secrets are
//! kept, and only for [`SNAPSHOT_LIFETIME`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use tokio::sync::OnceCell;

use crate::user_agent;

/// Secrets holding the shoot kubeconfig, in the order Gardener tries them.
pub const SHOOT_ACCESS_SECRETS: [&str; 2] = ["gardener-internal", "gardener"];
/// The data key of the kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Secrets per page of the start-up list (each holds a kubeconfig of a few kilobytes).
const LIST_PAGE_SIZE: u32 = 50;
/// How long the start-up list answers for namespaces not resolved yet; then it is dropped.
pub const SNAPSHOT_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10 * 60);

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
    #[error("cannot list the shoot access secrets {name}: {source}")]
    List {
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

/// The shoot access secrets of a set of namespaces at one moment.
struct Snapshot {
    expires: std::time::Instant,
    /// The namespaces the lists answer for that have not asked yet.
    covered: Mutex<HashSet<String>>,
    /// Per namespace, the first secret of [`SHOOT_ACCESS_SECRETS`] it had. Taken out at first
    /// use, so the kubeconfigs are not kept longer than needed.
    secrets: Mutex<HashMap<String, Secret>>,
}

/// Shoot clients by namespace.
#[derive(Clone)]
pub struct ShootClients {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    snapshot: Arc<OnceCell<Option<Snapshot>>>,
    user_agent: String,
}

impl ShootClients {
    /// Clients that send `user_agent`.
    pub fn new(user_agent: &str) -> ShootClients {
        ShootClients {
            entries: Arc::default(),
            snapshot: Arc::default(),
            user_agent: user_agent.to_string(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client for the shoot of `namespace`, or `None` when the namespace has no shoot access
    /// secret (the shoot's API server cannot be reached from here). `cluster` is the
    /// namespace's Cluster (a new resourceVersion means the secret is read again);
    /// `namespaces` names those the start-up list answers for (the caller's Extensions'),
    /// asked for only once.
    pub async fn client_for(
        &self,
        seed: &Client,
        namespace: &str,
        cluster: Option<&kube::api::ObjectMeta>,
        namespaces: impl Fn() -> HashSet<String>,
    ) -> Result<Option<ShootClient>, ShootClientError> {
        let cluster_version = cluster.and_then(|c| c.resource_version.clone());
        let known = self.entries().get(namespace).cloned();
        if let Some(entry) = &known
            && !entry.refused
            && entry.cluster_version == cluster_version
        {
            return Ok(entry.access.clone());
        }
        let snapshot = match known {
            Some(_) => None,
            None => self.snapshot_answer(seed, namespace, namespaces).await,
        };
        let secret = match snapshot {
            Some(found) => found,
            None => read_secret(seed, namespace).await?,
        };
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

    /// Drops what is kept for `namespace` (its Extension is gone or hibernated).
    pub fn forget(&self, namespace: &str) {
        self.entries().remove(namespace);
    }

    /// The start-up snapshot's answer for the first resolution of `namespace`, if it has one:
    /// while it lives, for a namespace it covers.
    async fn snapshot_answer(
        &self,
        seed: &Client,
        namespace: &str,
        namespaces: impl FnOnce() -> HashSet<String>,
    ) -> Option<Option<Secret>> {
        let snapshot = self
            .snapshot
            .get_or_init(|| async {
                match take_snapshot(seed, namespaces()).await {
                    Ok(snapshot) => Some(snapshot),
                    Err(e) => {
                        tracing::warn!(error = %e, "Cannot list the shoot access secrets; reading them one by one");
                        None
                    }
                }
            })
            .await
            .as_ref()?;
        let mut covered = snapshot
            .covered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut secrets = snapshot
            .secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if std::time::Instant::now() >= snapshot.expires {
            covered.clear();
            secrets.clear();
            return None;
        }
        covered.remove(namespace).then(|| secrets.remove(namespace))
    }
}

/// The shoot access secrets of `covered`, by namespace (the first name of
/// [`SHOOT_ACCESS_SECRETS`] that a namespace has).
async fn take_snapshot(
    seed: &Client,
    covered: HashSet<String>,
) -> Result<Snapshot, ShootClientError> {
    let expires = std::time::Instant::now() + SNAPSHOT_LIFETIME;
    let api: Api<Secret> = Api::all(seed.clone());
    let mut secrets: HashMap<String, Secret> = HashMap::new();
    // Reverse order: the preferred name is listed last and replaces the fallback.
    for name in SHOOT_ACCESS_SECRETS.iter().rev() {
        let mut params = ListParams::default()
            .fields(&format!("metadata.name={name}"))
            .limit(LIST_PAGE_SIZE);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|source| ShootClientError::List {
                    name: name.to_string(),
                    source,
                })?;
            for secret in page.items {
                if let Some(namespace) = secret.namespace().filter(|ns| covered.contains(ns)) {
                    secrets.insert(namespace, secret);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
    }
    Ok(Snapshot {
        expires,
        covered: Mutex::new(covered),
        secrets: Mutex::new(secrets),
    })
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
