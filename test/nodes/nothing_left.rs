//! Deleting the Extension leaves nothing of ours: no file on any node (the installer's directory
//! included), no restart Lease and no desired-set ConfigMap in the shoot, the superseded ones
//! included (gardener-resource-manager's collector would take those only hours later).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::install::crun;
use crate::scenario::{EXTENSION, STATE_DIR, Scenario};
use crate::support::gardenlet;

const INSTALLER_PREFIX: &str = "containerd-shim-installer-";
const LEASE_PREFIX: &str = "containerd-shim-restart-";

/// The providerConfig with crun and this restart budget (a new budget is a new desired set).
async fn apply_with_restarts(s: &Scenario, shims: Value, restarts: u32) {
    let config = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                        "kind": "ContainerdShimConfig", "shims": shims,
                        "rollout": {"maxConcurrentRestarts": restarts}});
    let patch = json!({"spec": {"providerConfig": config}});
    s.extensions
        .patch(EXTENSION, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch Extension");
    let ts = gardenlet::request_reconcile(&s.extensions, EXTENSION).await;
    gardenlet::wait_ready(&s.extensions, EXTENSION, Some(&ts)).await;
    s.wait_bundle_applied().await;
}

/// The installer's desired-set ConfigMaps and restart Leases in the shoot's kube-system.
async fn ours_in_the_shoot(s: &Scenario) -> (Vec<String>, Vec<String>) {
    let config_maps: Api<ConfigMap> = Api::namespaced(s.c.shoot.clone(), "kube-system");
    let leases: Api<Lease> = Api::namespaced(s.c.shoot.clone(), "kube-system");
    let sets = config_maps
        .list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .into_iter()
        .map(|c| c.name_any())
        .filter(|n| n.starts_with(INSTALLER_PREFIX))
        .collect();
    let slots = leases
        .list(&ListParams::default())
        .await
        .expect("list Leases")
        .into_iter()
        .map(|l| l.name_any())
        .filter(|n| n.starts_with(LEASE_PREFIX))
        .collect();
    (sets, slots)
}

#[tokio::test]
async fn deleting_the_extension_leaves_no_file_lease_or_config_map() {
    let s = Scenario::start("nothing-left").await;
    let originals = s.nodes.containerd_configs();
    s.apply(crun()).await;
    s.wait_rolled_out().await;
    s.wait_verified_everywhere("crun").await;
    // A second desired set supersedes the first: two ConfigMaps in the shoot.
    apply_with_restarts(&s, crun(), 2).await;
    s.wait_rolled_out().await;

    let (sets, slots) = ours_in_the_shoot(&s).await;
    assert!(
        sets.len() >= 2,
        "a superseded and a current desired set expected: {sets:?}"
    );
    assert!(
        !slots.is_empty(),
        "the installs took a restart slot: {slots:?}"
    );
    for node in &s.nodes.nodes {
        assert!(
            node.exists(STATE_DIR),
            "{}: installed, yet no {STATE_DIR}",
            node.name
        );
    }

    s.delete().await;

    for (node, original) in s.nodes.nodes.iter().zip(&originals) {
        assert_eq!(&node.containerd_config(), original, "{}", node.name);
        assert!(
            !node.exists(STATE_DIR),
            "{} still has {STATE_DIR}: {:?}",
            node.name,
            node.tree(STATE_DIR).keys().collect::<Vec<_>>()
        );
    }
    let (sets, slots) = ours_in_the_shoot(&s).await;
    assert!(sets.is_empty(), "desired sets left in the shoot: {sets:?}");
    assert!(
        slots.is_empty(),
        "restart Leases left in the shoot: {slots:?}"
    );
}
