//! A shoot owner's last word before disabling the extension: a restart budget of 4 000 000 000
//! (one Lease name per slot, if anything took it at its word). The reconcile refuses it and
//! keeps the applied bundle; the deletion uninstalls with the safe defaults; the controller
//! stays up throughout.

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ErrorCode, Extension, OperationState,
};

use crate::support::{self, gardenlet, objects, poll, process};

const EXTENSION: &str = "containerd-shim";

#[tokio::test]
async fn deleting_with_a_hostile_restart_budget_uninstalls_and_the_controller_stays_up() {
    let c = support::Clusters::connect().await;
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let mut controller = process::start_controller(&c, &["--healthcheck-period=2s"]).await;
    let pid = controller.pid().expect("the controller runs");

    let ns = support::create_shoot_namespace(&c.seed, "hostile").await;
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot("hostile")),
        )
        .await
        .expect("create Cluster");
    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
    let config = |restarts: u64| {
        json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
               "kind": "ContainerdShimConfig", "shims": [{"name": "wasmtime"}],
               "rollout": {"maxConcurrentRestarts": restarts}})
    };
    extensions
        .create(
            &PostParams::default(),
            &objects::extension(&ns, EXTENSION, Some(config(2))),
        )
        .await
        .expect("create Extension");
    let ts = gardenlet::request_reconcile(&extensions, EXTENSION).await;
    gardenlet::wait_ready(&extensions, EXTENSION, Some(&ts)).await;
    support::bundles::wait_runtime_class(&c.shoot, "wasmtime").await;

    // The hostile value: a configuration error, and the applied bundle stays.
    extensions
        .patch(
            EXTENSION,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"providerConfig": config(4_000_000_000)}})),
        )
        .await
        .expect("patch providerConfig");
    gardenlet::request_reconcile(&extensions, EXTENSION).await;
    poll::until(
        "the reconcile to refuse maxConcurrentRestarts 4000000000",
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = extensions.get(EXTENSION).await.map_err(|e| e.to_string())?;
            let status = ext.status.unwrap_or_default();
            let state = status.last_operation.map(|o| o.state);
            match status.last_error {
                Some(e)
                    if state == Some(OperationState::Error)
                        && e.description.contains(
                            "providerConfig.rollout.maxConcurrentRestarts: 4000000000 must be between 1 and 100",
                        )
                        && e.codes.contains(&ErrorCode::ConfigurationProblem) =>
                {
                    Ok(())
                }
                other => Err(format!("{state:?} {other:?}")),
            }
        },
    )
    .await;
    support::bundles::wait_runtime_class(&c.shoot, "wasmtime").await;

    // Disabling the extension with that value in place.
    gardenlet::delete(&extensions, EXTENSION).await;
    gardenlet::wait_deleted(&extensions, EXTENSION).await;

    assert_eq!(
        controller.exited(),
        None,
        "the controller died: {}",
        controller.logs()
    );
    assert_eq!(controller.pid(), Some(pid), "the controller restarted");
    controller.wait_ready().await;
    let logs = controller.logs();
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(
        logs.contains("uninstalling with the default rollout"),
        "the uninstall did not say it used the safe defaults: {logs}"
    );
}
