//! Deleting the Extension removes what no ManagedResource removes: the restart Leases the
//! nodes created and the desired-set ConfigMaps, the current one and the superseded ones (which
//! gardener-resource-manager leaves to its garbage collector), by name; other objects of the
//! same kinds in the same namespace stay.

use std::time::Duration;

use gardener_extension_containerd_shim::gardener::managed_resource;
use gardener_extension_containerd_shim::shim::identity::MANAGED_RESOURCE;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::shim_lifecycle::{Fixture, config, fast_settings};
use crate::support::{self, gardenlet, nodes, objects, poll};

const GARBAGE_COLLECTABLE: &str = "resources.gardener.cloud/garbage-collectable-reference";

async fn rolled_out(f: &Fixture) {
    managed_resource::wait_until(
        &f.seed,
        &f.ns,
        MANAGED_RESOURCE,
        managed_resource::Wait::new(poll::DEFAULT_TIMEOUT)
            .with_interval(Duration::from_millis(200)),
        managed_resource::Awaited::RolledOut,
    )
    .await
    .expect("rolled out");
}

/// The desired-set ConfigMaps the current bundle holds.
async fn bundle_sets(f: &Fixture) -> Vec<String> {
    let mr = f.managed_resource().await.expect("the ManagedResource");
    let secret = Api::<Secret>::namespaced(f.seed.clone(), &f.ns)
        .get(&mr.spec.secret_refs[0].name)
        .await
        .expect("the bundle secret");
    managed_resource::decode_secret(&secret)
        .expect("decode the bundle")
        .into_iter()
        .filter(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["labels"][GARBAGE_COLLECTABLE] == "true"
        })
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The desired-set ConfigMaps in the shoot's kube-system.
async fn desired_sets(config_maps: &Api<ConfigMap>) -> Vec<String> {
    config_maps
        .list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .into_iter()
        .filter(|c| c.labels().contains_key(GARBAGE_COLLECTABLE))
        .map(|c| c.name_any())
        .filter(|n| n.starts_with("containerd-shim-installer-"))
        .collect()
}

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn delete_removes_the_restart_leases_and_every_desired_set_by_name() {
    let f = Fixture::new(
        "shim-cleanup",
        fast_settings(),
        objects::shoot("shim-cleanup"),
    )
    .await;
    let kubeconfig = std::fs::read(&f.env.shoot_kubeconfig).expect("read the shoot kubeconfig");
    Api::<Secret>::namespaced(f.seed.clone(), &f.ns)
        .create(
            &PostParams::default(),
            &objects::shoot_access_secret(&f.ns, kubeconfig),
        )
        .await
        .expect("create the shoot access secret");
    let node_names = vec![support::unique_name("node")];
    nodes::create_nodes(&f.shoot, &node_names, "worker-a").await;
    let _sim = nodes::start(
        f.shoot.clone(),
        "kube-system",
        "app.kubernetes.io/name=containerd-shim-installer",
    );

    // Other tests share the shoot, and gardener-resource-manager leaves the desired sets of
    // their bundles to its collector: the sets of this test's bundles are what counts.
    let config_maps: Api<ConfigMap> = Api::namespaced(f.shoot.clone(), "kube-system");
    f.create(config(json!([{"name": "spin"}]))).await;
    f.ready(None).await;
    rolled_out(&f).await;
    let mut ours = bundle_sets(&f).await;
    // A second desired set with three restart slots supersedes the first.
    let mut second = config(json!([{"name": "spin"}]));
    second["rollout"] = json!({"maxConcurrentRestarts": 3});
    let ts = f.set_config(second).await;
    f.ready(Some(&ts)).await;
    rolled_out(&f).await;
    ours.extend(bundle_sets(&f).await);

    let leases: Api<Lease> = Api::namespaced(f.shoot.clone(), "kube-system");
    let mut sets = desired_sets(&config_maps).await;
    sets.retain(|s| ours.contains(s));
    assert!(sets.len() >= 2, "a superseded and a current set: {sets:?}");
    // The slots as the nodes' installers create them, and a Lease of someone else.
    for name in [
        "containerd-shim-restart-0",
        "containerd-shim-restart-2",
        "someone-elses-lease",
    ] {
        leases
            .create(&PostParams::default(), &lease(name))
            .await
            .expect("create Lease");
    }

    gardenlet::delete(&f.api, "containerd-shim").await;
    f.gone().await;

    let mut left = desired_sets(&config_maps).await;
    left.retain(|s| ours.contains(s));
    assert!(left.is_empty(), "desired sets left in the shoot: {left:?}");
    let names: Vec<String> = leases
        .list(&ListParams::default())
        .await
        .expect("list Leases")
        .into_iter()
        .map(|l| l.name_any())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("containerd-shim-restart-")),
        "restart Leases left: {names:?}"
    );
    assert!(
        names.iter().any(|n| n == "someone-elses-lease"),
        "another Lease went too: {names:?}"
    );
    leases
        .delete("someone-elses-lease", &Default::default())
        .await
        .expect("delete the other Lease");
}
