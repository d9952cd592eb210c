//! The floor: the fastest this API server takes the minimal request chain of a first
//! reconcile for N objects, sent by the benchmark itself at the controller's concurrency, on
//! the same control plane and in the same run as the waves it is compared with.
//!
//! The chain per object is what Gardener's contract makes a first reconcile write, each request
//! waiting for the one before: add the finalizer, write `Processing`, create the bundle Secret,
//! create the ManagedResource, write `Success`. Nothing is read. The bodies are the
//! controller's own (the same status patches, the same packed bundle), so the requests cost
//! what the controller's do.
//!
//! It is measured twice: with ManagedResources of a class no gardener-resource-manager serves
//! (the API server's work alone), and with ManagedResources gardener-resource-manager applies
//! as it applies the controller's (the same platform work a real wave causes: GRM's status
//! writes to the seed, its applies to the shoot API server on the same cores).

use std::time::{Duration, Instant};

use futures::StreamExt;
use gardener_extension_containerd_shim::gardener::api::{
    Extension, ManagedResource, OperationType,
};
use gardener_extension_containerd_shim::gardener::extension::status;
use gardener_extension_containerd_shim::gardener::managed_resource::{
    DesiredManagedResource, SecretData,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::support;

/// The floor's Extension type: no controller handles it.
const FLOOR_TYPE: &str = "bench-floor";
/// The class of the floor's ManagedResources when GRM must not apply them.
const UNSERVED_CLASS: &str = "bench-floor";
const MANAGED_RESOURCE: &str = "extension-containerd-shim";
const FIELD_MANAGER: &str = "gardener-extension";

/// One floor measurement.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Floor {
    pub n: usize,
    pub concurrency: usize,
    /// Whether gardener-resource-manager applied the floor's ManagedResources.
    pub with_grm: bool,
    /// From the first request of the chains until the last one is answered.
    pub seconds: f64,
    pub requests: usize,
    /// Bytes of the Secret's data (the packed bundle).
    pub bundle_bytes: usize,
}

/// Measures the floor for `n` objects in namespaces of their own, then deletes the objects, so
/// that nothing of it is left for the controller's caches.
pub async fn measure(
    seed: &Client,
    run: &str,
    n: usize,
    concurrency: usize,
    bundle: &SecretData,
    with_grm: bool,
) -> Floor {
    let names: Vec<String> = (0..n)
        .map(|i| support::unique_name(&format!("bench-floor-{run}-{i}")))
        .collect();
    let created: Vec<Extension> = futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = seed.clone();
            async move {
                support::create_namespace(&seed, &ns, &[]).await;
                let ext = support::objects::extension(&ns, FLOOR_TYPE, None);
                Api::<Extension>::namespaced(seed, &ns)
                    .create(&PostParams::default(), &ext)
                    .await
                    .unwrap_or_else(|e| panic!("create the floor Extension in {ns}: {e}"))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;

    let started = Instant::now();
    futures::stream::iter(created)
        .map(|ext| chain(seed.clone(), ext, bundle, with_grm))
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
    let seconds = started.elapsed().as_secs_f64();

    remove(seed, &names, &bundle.secret_name(MANAGED_RESOURCE)).await;
    Floor {
        n,
        concurrency,
        with_grm,
        seconds,
        requests: 5 * n,
        bundle_bytes: bundle.data().values().map(Vec::len).sum(),
    }
}

/// The five requests of one first reconcile, one after the other.
async fn chain(seed: Client, ext: Extension, bundle: &SecretData, with_grm: bool) {
    let ns = ext.namespace().unwrap_or_default();
    let name = ext.name_any();
    let extensions: Api<Extension> = Api::namespaced(seed.clone(), &ns);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let fail = |what: &str, e: kube::Error| -> ! { panic!("floor: {what} in {ns}: {e}") };
    let finalizer = json!({"metadata": {
        "finalizers": [format!("extensions.gardener.cloud/{FLOOR_TYPE}")],
        "resourceVersion": ext.resource_version(),
    }});
    let ext = extensions
        .patch(&name, &params, &Patch::Merge(&finalizer))
        .await
        .unwrap_or_else(|e| fail("finalizer", e));
    let processing = status::processing(
        OperationType::Create,
        "Reconciling the extension",
        &status::now(),
    );
    extensions
        .patch_status(&name, &params, &Patch::Merge(&processing))
        .await
        .unwrap_or_else(|e| fail("Processing", e));
    Api::<Secret>::namespaced(seed.clone(), &ns)
        .create(
            &PostParams::default(),
            &bundle.to_secret(&ns, MANAGED_RESOURCE),
        )
        .await
        .unwrap_or_else(|e| fail("create Secret", e));
    let mut mr =
        DesiredManagedResource::for_shoot(FLOOR_TYPE, false, &bundle.secret_name(MANAGED_RESOURCE))
            .new_object(&ns, MANAGED_RESOURCE);
    if !with_grm {
        mr.spec.class = Some(UNSERVED_CLASS.to_string());
    }
    Api::<ManagedResource>::namespaced(seed.clone(), &ns)
        .create(&PostParams::default(), &mr)
        .await
        .unwrap_or_else(|e| fail("create ManagedResource", e));
    let success = status::success(
        OperationType::Create,
        "Successfully reconciled the extension",
        ext.metadata.generation.unwrap_or(1),
        &status::now(),
    );
    extensions
        .patch_status(&name, &params, &Patch::Merge(&success))
        .await
        .unwrap_or_else(|e| fail("Success", e));
}

/// Deletes the floor's objects, but not its namespaces. kcm's namespace controller deletes a
/// namespace by listing every resource type in it: for 2 000 namespaces that took the seed API
/// server over 40 minutes here (about 40 namespaces a minute), and it would still be running
/// during the wave that is measured next. The empty namespaces carry no shoot label, so no
/// controller of the extension looks at them; they go with the control plane.
/// gardener-resource-manager's finalizer is dropped too: it would delete the bundle's shoot
/// objects one ManagedResource at a time, and the fleet's ManagedResources apply the same
/// objects right after anyway.
async fn remove(seed: &Client, names: &[String], secret: &str) {
    futures::stream::iter(names.iter().cloned())
        .map(|ns| {
            let seed = seed.clone();
            async move {
                let extensions = Api::<Extension>::namespaced(seed.clone(), &ns);
                let _ = extensions
                    .patch(
                        FLOOR_TYPE,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = extensions
                    .delete(FLOOR_TYPE, &DeleteParams::default())
                    .await;
                let _ = Api::<ManagedResource>::namespaced(seed.clone(), &ns)
                    .delete(MANAGED_RESOURCE, &DeleteParams::default())
                    .await;
                let _ = Api::<Secret>::namespaced(seed, &ns)
                    .delete(secret, &DeleteParams::default())
                    .await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    release_managed_resources(seed, names, FLOOR_TYPE).await;
}

/// Drops gardener-resource-manager's finalizer from the ManagedResources (label
/// `origin=<origin>`) in `names` until none is left, so that deleting those namespaces does not
/// wait for GRM to delete every bundle's shoot objects.
pub async fn release_managed_resources(seed: &Client, names: &[String], origin: &str) {
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mrs: Api<ManagedResource> = Api::all(seed.clone());
    let deadline = Instant::now() + Duration::from_secs(15 * 60);
    loop {
        let held: Vec<ManagedResource> = mrs
            .list(&ListParams::default().labels(&format!("origin={origin}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|mr| wanted.contains(mr.namespace().unwrap_or_default().as_str()))
            .collect();
        if held.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} floor ManagedResources are still there after 15 minutes",
            held.len()
        );
        futures::stream::iter(held)
            .map(|mr| {
                let api: Api<ManagedResource> =
                    Api::namespaced(seed.clone(), &mr.namespace().unwrap_or_default());
                async move {
                    let _ = api
                        .patch(
                            &mr.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until none of `names` is a namespace any more.
pub async fn wait_gone(seed: &Client, names: &[String]) {
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let namespaces: Api<Namespace> = Api::all(seed.clone());
    let deadline = Instant::now() + Duration::from_secs(15 * 60);
    loop {
        let left = namespaces
            .list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| wanted.contains(n.name_any().as_str()))
                    .count()
            })
            .unwrap_or(usize::MAX);
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{left} namespaces of the benchmark are not gone after 15 minutes"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
