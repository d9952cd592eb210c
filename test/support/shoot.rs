//! Changing the shoot as gardenlet does, in the Cluster that embeds it, and waiting until a
//! controller's cache holds the change.

use gardener_extension_containerd_shim::gardener::api::{Cluster, Shoot};
use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::poll;

/// Replaces the shoot embedded in the Cluster of shoot namespace `ns` by `shoot`.
pub async fn patch_cluster_shoot(seed: &Client, ns: &str, shoot: &Value) {
    Api::<Cluster>::all(seed.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"shoot": shoot}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the shoot in Cluster {ns}: {e}"));
}

/// Polls until the shoot in `caches`' Cluster of `ns` satisfies `seen`, named `what` in a
/// failure.
pub async fn wait_cached(
    caches: &SharedCaches,
    ns: &str,
    what: &str,
    seen: impl Fn(&Shoot) -> bool,
) {
    poll::until(
        &format!("the controller to see {what}"),
        poll::DEFAULT_TIMEOUT,
        || async {
            let cluster = caches.cluster(ns).ok_or("no Cluster")?;
            if cluster.shoot().ok().flatten().is_some_and(|s| seen(&s)) {
                Ok(())
            } else {
                Err("not yet")
            }
        },
    )
    .await;
}
