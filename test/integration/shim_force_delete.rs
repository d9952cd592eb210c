//! Force deletion of a shoot (`confirmation.gardener.cloud/force-deletion` on the Shoot, which
//! selects the ForceDelete hook) with the real shim actuator: its nodes are gone or unreachable,
//! so the extension removes its bundle at once instead of waiting for nodes to report clean.

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::shim_lifecycle::{Fixture, config, fast_settings};
use crate::support::{self, gardenlet, nodes, objects, poll};

const INSTALLER_SELECTOR: &str = "app.kubernetes.io/name=containerd-shim-installer";

#[tokio::test]
async fn force_deletion_removes_the_bundle_without_waiting_for_the_nodes() {
    let mut shoot = objects::shoot("shim-force-delete");
    shoot["metadata"]["annotations"] =
        json!({"confirmation.gardener.cloud/force-deletion": "true"});
    // The uninstall timeout (300 s) is far beyond the deletion's deadline below: only the
    // ForceDelete hook lets the deletion finish in time.
    let f = Fixture::new("shim-force-delete", fast_settings(), shoot).await;
    nodes::create_nodes(&f.shoot, &[support::unique_name("node")], "worker-a").await;
    let sim = nodes::start(f.shoot.clone(), "kube-system", INSTALLER_SELECTOR);
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    assert!(f.managed_resource().await.is_some());

    // Nodes that never report clean again.
    sim.ready.store(false, Ordering::SeqCst);
    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;
    // The ManagedResource was deleted without an uninstall; gardener-resource-manager removes
    // its objects from the shoot (the simulated nodes' installer pods go while `sim` runs).
    poll::until(
        "the bundle removed with the Extension",
        poll::DEFAULT_TIMEOUT,
        || async {
            match f.managed_resource().await {
                None => Ok(()),
                Some(mr) => Err(format!("{:?}", mr.status)),
            }
        },
    )
    .await;
    drop(sim);
}
