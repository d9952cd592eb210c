//! Removing the shim bundles that earlier tests left behind: every test applies its bundle into
//! the one shoot API server, and two ManagedResources would fight over the same shoot objects.

use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::ManagedResource;
use gardener_extension_containerd_shim::gardener::managed_resource;
use gardener_extension_containerd_shim::shim::actuator::ORIGIN;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::poll;

/// Deletes every ManagedResource of this extension in the seed (with its shoot objects) and
/// waits until gardener-resource-manager has removed each.
pub async fn remove_shim_bundles(seed: &Client) {
    let mrs: Api<ManagedResource> = Api::all(seed.clone());
    let leftovers = mrs
        .list(&ListParams::default().labels(&format!("origin={ORIGIN}")))
        .await
        .expect("list ManagedResources");
    for mr in leftovers {
        let ns = mr.namespace().unwrap_or_default();
        managed_resource::set_keep_objects(seed, &ns, &mr.name_any(), false)
            .await
            .expect("keepObjects=false");
        managed_resource::delete(seed, &ns, &mr.name_any())
            .await
            .expect("delete a leftover ManagedResource");
        managed_resource::wait_until_deleted(
            seed,
            &ns,
            &mr.name_any(),
            managed_resource::Wait::new(poll::DEFAULT_TIMEOUT)
                .with_interval(Duration::from_millis(200)),
        )
        .await
        .expect("leftover ManagedResource deleted");
    }
}
