//! The controller binary with all its controllers: an Extension converges, the bundle reaches
//! the shoot, health is reported, and the process is ready and counts its work.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use gardener_extension_containerd_shim::gardener::api::{Cluster, ConditionStatus, Extension};

use crate::support::process;
use crate::support::{self, gardenlet, nodes, objects};

#[tokio::test]
async fn the_binary_converges_an_extension_and_reports_its_health() {
    let c = support::Clusters::connect().await;
    // Bundles of earlier tests would share the shoot objects with ours.
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let controller = process::start_controller(&c, &["--healthcheck-period=2s"]).await;

    let ns = support::create_shoot_namespace(&c.seed, "e2e").await;
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot("e2e")),
        )
        .await
        .expect("create Cluster");
    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
    let config = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                        "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}]});
    extensions
        .create(
            &PostParams::default(),
            &objects::extension(&ns, "containerd-shim", Some(config)),
        )
        .await
        .expect("create Extension");
    let ts = gardenlet::request_reconcile(&extensions, "containerd-shim").await;
    gardenlet::wait_ready(&extensions, "containerd-shim", Some(&ts)).await;
    let events: Api<Event> = Api::namespaced(c.seed.clone(), &ns);
    // The first operation on an Extension is a Create (its lastOperation type).
    let succeeded = wait_event(&events, "CreateSucceeded", |_| true).await;
    assert_eq!(succeeded.type_.as_deref(), Some("Normal"));
    let regarding = succeeded.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("Extension"));
    assert_eq!(regarding.name.as_deref(), Some("containerd-shim"));
    assert_eq!(
        succeeded.reporting_controller.as_deref(),
        Some("gardener-extension-containerd-shim")
    );

    support::bundles::wait_runtime_class(&c.shoot, "wasmtime").await;
    wait_condition(&extensions, &[ConditionStatus::True], "").await;

    // With a way into the shoot (gardenlet's `gardener` secret), the condition counts the nodes
    // each shim is verified on: the readiness labels the installers set.
    let shoot_kubeconfig =
        std::fs::read(&c.env.shoot_kubeconfig).expect("read the shoot kubeconfig");
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("gardener".into()),
            ..Default::default()
        },
        data: Some([("kubeconfig".to_string(), ByteString(shoot_kubeconfig))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(c.seed.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the shoot access secret");
    // gardenlet creates and rotates that secret in a shoot reconcile, which also rewrites the
    // Cluster: the controller reads the secret again when the Cluster changes (it watches no
    // Secret).
    Api::<Cluster>::all(c.seed.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shoot": {"status": {"lastOperation": {
                "type": "Reconcile", "state": "Succeeded", "progress": 100,
                "description": "Shoot cluster has been successfully reconciled.",
                "lastUpdateTime": "2026-01-01T01:00:00Z"}}}}})),
        )
        .await
        .expect("the Cluster of the next shoot reconcile");
    let names = vec![
        support::unique_name("verified"),
        support::unique_name("pending"),
    ];
    nodes::create_nodes(&c.shoot, &names, "worker-a").await;
    let _kubelets = nodes::start(
        c.shoot.clone(),
        "kube-system",
        "app.kubernetes.io/name=containerd-shim-installer",
    );
    let node_api: Api<Node> = Api::all(c.shoot.clone());
    let ready = json!({"metadata": {"labels": {"containerd-shim.extensions.gardener.cloud/wasmtime": "ready"}}});
    node_api
        .patch(&names[0], &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("label");
    wait_condition(
        &extensions,
        &[ConditionStatus::Progressing, ConditionStatus::False],
        "wasmtime: 1/2 nodes verified",
    )
    .await;
    node_api
        .patch(&names[1], &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("label");
    wait_condition(
        &extensions,
        &[ConditionStatus::True],
        "All health checks successful: wasmtime: 2/2 nodes verified",
    )
    .await;

    let succeeded = controller
        .metric(r#"gardener_extension_operations_total{controller="extension",operation="create",result="succeeded"}"#)
        .await
        .expect("the operation metric");
    assert!(succeeded >= 1.0, "{succeeded}");

    // A failing operation is a Warning event with the error; its retries count up the same
    // event's series instead of creating new objects.
    let bad = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                     "kind": "ContainerdShimConfig", "shims": [{"name": "no-such-shim"}]});
    extensions
        .patch(
            "containerd-shim",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"providerConfig": bad}})),
        )
        .await
        .expect("patch providerConfig");
    gardenlet::request_reconcile(&extensions, "containerd-shim").await;
    let failed = wait_event(&events, "ReconcileFailed", |e| {
        e.series.as_ref().is_some_and(|s| s.count >= 2)
    })
    .await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    let note = failed.note.clone().unwrap_or_default();
    assert!(
        note.contains("providerConfig.shims[0].name") && note.contains("no-such-shim"),
        "{note}"
    );
    let all = events.list(&Default::default()).await.expect("list events");
    let failures = all
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ReconcileFailed"))
        .count();
    assert_eq!(failures, 1, "repeats are one event with a series");

    // Leave nothing behind for the next test: deleting the Extension uninstalls from the
    // simulated nodes (whose "kubelets" are still running) and removes the bundle.
    gardenlet::delete(&extensions, "containerd-shim").await;
    gardenlet::wait_deleted(&extensions, "containerd-shim").await;
    wait_event(&events, "DeleteSucceeded", |_| true).await;
    nodes::delete_simulated_nodes(&c.shoot).await;
}

/// The Event with `reason` about the Extension once `accept` takes it.
async fn wait_event(events: &Api<Event>, reason: &str, accept: impl Fn(&Event) -> bool) -> Event {
    support::poll::until(
        &format!("an Event {reason}"),
        support::poll::DEFAULT_TIMEOUT,
        || async {
            let list = events
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let seen: Vec<String> = list
                .items
                .iter()
                .map(|e| format!("{:?}", e.reason))
                .collect();
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason) && accept(e))
                .ok_or_else(|| format!("events: {seen:?}"))
        },
    )
    .await
}

async fn wait_condition(extensions: &Api<Extension>, status: &[ConditionStatus], message: &str) {
    gardenlet::wait_condition(
        extensions,
        "containerd-shim",
        "SystemComponentsHealthy",
        &format!("in {status:?} with {message:?}"),
        |c| status.contains(&c.status) && c.message.contains(message),
    )
    .await;
}
