//! Fixtures shared by the config tests.

use serde_json::{Value, json};

use super::catalog::Catalog;
use super::types::{API_VERSION, KIND};
use crate::gardener::api::cluster::{Cri, Machine, Shoot, WorkerPool};

pub fn catalog() -> Catalog {
    Catalog::builtin().unwrap()
}

/// A Shoot with pools `worker-a` (containerd, amd64), `worker-b` (containerd, arm64) and
/// `legacy` (another CRI).
pub fn shoot() -> Shoot {
    shoot_with(vec![
        pool("worker-a", None, None),
        pool("worker-b", Some("containerd"), Some("arm64")),
        pool("legacy", Some("docker"), None),
    ])
}

/// A Shoot with the single pool `worker-a`.
pub fn single_pool_shoot() -> Shoot {
    shoot_with(vec![pool("worker-a", None, None)])
}

/// A Shoot of a Kubernetes version every shim supports, with these pools.
pub fn shoot_with(pools: Vec<WorkerPool>) -> Shoot {
    let mut shoot = Shoot::default();
    shoot.spec.kubernetes.version = "1.33.2".into();
    shoot.spec.provider.workers = pools;
    shoot
}

pub fn pool(name: &str, cri: Option<&str>, arch: Option<&str>) -> WorkerPool {
    WorkerPool {
        name: name.into(),
        cri: cri.map(|c| Cri { name: c.into() }),
        machine: Machine {
            architecture: arch.map(Into::into),
        },
        ..WorkerPool::default()
    }
}

/// A providerConfig with these shims.
pub fn config(shims: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND, "shims": shims})
}

pub fn sha(c: char) -> String {
    c.to_string().repeat(64)
}
