//! Shared support for tests that run against the embedded control plane
//! (`hack/control-plane.sh`): clients for the seed and the shoot API servers, uniquely named
//! namespaces so tests run in parallel on one control plane, object builders and polling.
//!
//! A test that needs the control plane and does not find it fails with the command that
//! provides it; it never skips.

#![allow(dead_code)] // each test crate uses a different part of the support code

pub mod actuator;
pub mod audit;
pub mod bench;
pub mod bundles;
pub mod controller;
pub mod gardenlet;
pub mod history;
pub mod https;
pub mod impersonation;
pub mod installer;
pub mod nodes;
pub mod objects;
pub mod osc;
pub mod poll;
pub mod process;
pub mod rbac;
pub mod real_nodes;
pub mod shoot;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// How to start what a test needs, named in every failure.
pub const START_HINT: &str =
    "start it with `make control-plane` (and keep it running), or run all tests with `make test`";

/// The running control plane, as described by the `env` file `hack/control-plane.sh` writes.
#[derive(Clone, Debug)]
pub struct Env {
    pub dir: PathBuf,
    pub seed_kubeconfig: PathBuf,
    pub shoot_kubeconfig: PathBuf,
    pub seed_controller_kubeconfig: PathBuf,
    pub seed_audit_log: PathBuf,
}

/// Where the launcher writes its env file unless `CONTROL_PLANE_DIR` says otherwise.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".local/control-plane")
}

impl Env {
    /// Reads the env file of the running control plane; panics (failing the test) with the
    /// command that starts it when there is none.
    pub fn load() -> Env {
        let dir = std::env::var_os("CONTROL_PLANE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(default_dir);
        let file = dir.join("env");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "the embedded control plane is not running (cannot read {}: {e}); {START_HINT}",
                file.display()
            )
        });
        let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let path = |key: &str| -> PathBuf {
            PathBuf::from(vars.get(key).unwrap_or_else(|| {
                panic!(
                    "{} has no {key}; restart the control plane: {START_HINT}",
                    file.display()
                )
            }))
        };
        Env {
            dir: dir.clone(),
            seed_kubeconfig: path("SEED_KUBECONFIG"),
            shoot_kubeconfig: path("SHOOT_KUBECONFIG"),
            seed_controller_kubeconfig: path("SEED_CONTROLLER_KUBECONFIG"),
            seed_audit_log: path("SEED_AUDIT_LOG"),
        }
    }
}

/// Builds a client from a kubeconfig file. Each test builds its own clients: a client's
/// connection pool belongs to the tokio runtime that created it, and every `#[tokio::test]`
/// has its own runtime.
pub async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {START_HINT}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("invalid kubeconfig {}: {e}", kubeconfig.display()));
    Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// Clients for both API servers, checked to be reachable.
pub struct Clusters {
    pub env: Env,
    pub seed: Client,
    pub shoot: Client,
}

impl Clusters {
    pub async fn connect() -> Clusters {
        let env = Env::load();
        let seed = client_from(&env.seed_kubeconfig).await;
        let shoot = client_from(&env.shoot_kubeconfig).await;
        for (name, client) in [("seed", &seed), ("shoot", &shoot)] {
            if let Err(e) = client.apiserver_version().await {
                panic!(
                    "the {name} kube-apiserver of the control plane in {} does not answer: {e}; {START_HINT}",
                    env.dir.display()
                );
            }
        }
        Clusters { env, seed, shoot }
    }
}

/// A name no other test (in this or another run against the same control plane) uses:
/// `<prefix>-<6 hex>`. Kubernetes names are at most 63 characters; the prefix is cut to fit.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    let suffix = format!("{:06x}", h.finish() & 0xff_ffff);
    let max_prefix = 63 - 1 - suffix.len();
    let prefix: String = prefix
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(max_prefix)
        .collect();
    format!("{}-{suffix}", prefix.trim_end_matches('-'))
}

/// Creates a namespace with the given labels and returns its name.
pub async fn create_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> String {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    name.to_string()
}

/// A fresh shoot control-plane namespace in the seed (`shoot--<test>-<suffix>`, labelled
/// `gardener.cloud/role=shoot`), like the ones gardenlet creates.
pub async fn create_shoot_namespace(seed: &Client, test: &str) -> String {
    let name = unique_name(&format!("shoot--t--{test}"));
    create_namespace(seed, &name, &[("gardener.cloud/role", "shoot")]).await
}
