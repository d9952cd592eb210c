//! The OperatingSystemConfig webhook on the real seed API server: registered with its own CA,
//! it mutates the reconcile OSCs of the extension's shoot namespaces as they are written, and
//! only those; an invalid providerConfig is refused with its field; a new CA is picked up by
//! the API server; with the webhook down, OSCs of shoots without the extension are still
//! written (failurePolicy Fail reaches only the extension's namespaces).

use std::sync::Arc;
use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{Cluster, Extension};
use gardener_extension_containerd_shim::gardener::cache::SharedCaches;
use gardener_extension_containerd_shim::gardener::runtime::BindAddress;
use gardener_extension_containerd_shim::gardener::webhook::registration::Endpoint;
use gardener_extension_containerd_shim::gardener::webhook::server::{ServerSettings, serve};
use gardener_extension_containerd_shim::shim::config::{Catalog, images};
use gardener_extension_containerd_shim::shim::identity::ORIGIN;
use gardener_extension_containerd_shim::shim::osc_webhook::{
    CONFIGURATION, NAMESPACE_LABEL, configuration, routes,
};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{self, objects, poll};

fn osc_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "extensions.gardener.cloud",
        "v1alpha1",
        "OperatingSystemConfig",
    );
    let ar = ApiResource::from_gvk_with_plural(&gvk, "operatingsystemconfigs");
    Api::namespaced_with(client.clone(), namespace, &ar)
}

fn osc(name: &str, purpose: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {"name": name, "labels": {"worker.gardener.cloud/pool": "worker-a"}},
        "spec": {
            "type": "debian", "purpose": purpose,
            "criConfig": {"name": "containerd", "containerd": {"sandboxImage": "pause"}},
        }
    }))
    .unwrap()
}

fn plugin_handlers(osc: &DynamicObject) -> Vec<String> {
    osc.data
        .pointer("/spec/criConfig/containerd/plugins")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    format!(
                        "{}{}",
                        e["op"]
                            .as_str()
                            .map(|op| format!("{op}:"))
                            .unwrap_or_default(),
                        e["path"][3].as_str().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn provider_config(delivery: &str, pools: Value) -> Value {
    json!({
        "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
        "kind": "ContainerdShimConfig",
        "delivery": delivery,
        "shims": [{"name": "crun", "workerPools": pools}],
    })
}

struct Server {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(seed: &Client, caches: &SharedCaches, secret_namespace: &str) -> Server {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let endpoint = Endpoint::Url {
        host_port: format!("127.0.0.1:{port}"),
    };
    let cert_dir = std::env::temp_dir().join(support::unique_name("osc-webhook-certs"));
    let settings = ServerSettings {
        bind_address: BindAddress::Listen {
            host: Some("127.0.0.1".into()),
            port,
        },
        endpoint: endpoint.clone(),
        secret_namespace: secret_namespace.to_string(),
        secret_name: "webhook-certs".into(),
        cert_dir,
        resync_period: Duration::from_secs(1),
        field_manager: "osc-webhook-test".into(),
    };
    let routes = routes(
        Arc::new(Catalog::builtin().unwrap()),
        Arc::new(images::embedded().unwrap()),
        caches.clone(),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let seed = seed.clone();
        let stop = stop.clone();
        async move {
            serve(
                seed,
                settings,
                routes,
                move |ca| configuration(&endpoint, ca),
                stop,
            )
            .await
            .unwrap();
        }
    });
    Server { stop, task }
}

#[tokio::test]
async fn reconcile_oscs_of_the_extension_s_shoots_carry_its_shims() {
    let c = support::Clusters::connect().await;
    let seed = c.seed.clone();
    let shoot_ns = support::create_namespace(
        &seed,
        &support::unique_name("shoot--t--osc"),
        &[("gardener.cloud/role", "shoot"), (NAMESPACE_LABEL, "true")],
    )
    .await;
    let other_ns = support::create_namespace(
        &seed,
        &support::unique_name("shoot--t--other"),
        &[("gardener.cloud/role", "shoot")],
    )
    .await;
    let own_ns = support::create_namespace(&seed, &support::unique_name("extension"), &[]).await;
    Api::<Cluster>::all(seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&shoot_ns, objects::shoot("osc")),
        )
        .await
        .unwrap();
    let extensions: Api<Extension> = Api::namespaced(seed.clone(), &shoot_ns);
    extensions
        .create(
            &PostParams::default(),
            &objects::extension(
                &shoot_ns,
                "containerd-shim",
                Some(provider_config("osc", json!(["worker-a"]))),
            ),
        )
        .await
        .unwrap();
    let caches = SharedCaches::spawn(&seed, ORIGIN);
    caches.wait_until_ready().await;
    poll::until(
        "the caches see the Extension and the Cluster",
        poll::DEFAULT_TIMEOUT,
        || async {
            let seen = !caches.extensions.in_namespace(&shoot_ns).is_empty()
                && caches.cluster(&shoot_ns).is_some();
            if seen {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await;

    let server = start(&seed, &caches, &own_ns).await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(seed.clone());
    let oscs = osc_api(&seed, &shoot_ns);
    // The first create after registration may race the API server's webhook cache.
    let created = poll::until(
        "an OSC created with our entries",
        poll::DEFAULT_TIMEOUT,
        || async {
            let _ = oscs.delete("pool-a", &DeleteParams::default()).await;
            let created = oscs
                .create(&PostParams::default(), &osc("pool-a", "reconcile"))
                .await
                .map_err(|e| e.to_string())?;
            let handlers = plugin_handlers(&created);
            if handlers == ["crun"] {
                Ok(created)
            } else {
                Err(format!("{handlers:?}"))
            }
        },
    )
    .await;
    let files: Vec<String> = created.data["spec"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        files
            .iter()
            .any(|p| p.starts_with("/var/bin/containerruntimes/crun/")),
        "{files:?}"
    );

    // The provision OSC and OSCs of a shoot without the extension are left alone.
    let provision = oscs
        .create(
            &PostParams::default(),
            &osc("pool-a-provision", "provision"),
        )
        .await
        .unwrap();
    assert!(plugin_handlers(&provision).is_empty());
    let others = osc_api(&seed, &other_ns);
    let other = others
        .create(&PostParams::default(), &osc("pool-a", "reconcile"))
        .await
        .unwrap();
    assert!(plugin_handlers(&other).is_empty());

    // An invalid providerConfig: the update is refused with the field, the OSC keeps its entries.
    let patch = |config: Value| json!({"spec": {"providerConfig": config}});
    extensions
        .patch(
            "containerd-shim",
            &PatchParams::default(),
            &Patch::Merge(patch(provider_config("osc", json!(["nope"])))),
        )
        .await
        .unwrap();
    let touch = json!({"metadata": {"annotations": {"touched": "1"}}});
    let refused = poll::until("the update refused", poll::DEFAULT_TIMEOUT, || async {
        match oscs
            .patch("pool-a", &PatchParams::default(), &Patch::Merge(&touch))
            .await
        {
            Err(kube::Error::Api(status)) => Ok(status.message),
            Ok(_) => Err("admitted".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    assert!(
        refused.contains("shims[0].workerPools") && refused.contains("nope"),
        "{refused}"
    );
    assert_eq!(
        plugin_handlers(&oscs.get("pool-a").await.unwrap()),
        ["crun"]
    );

    // Switched to the DaemonSet: the next write of the OSC removes the handler's table.
    extensions
        .patch(
            "containerd-shim",
            &PatchParams::default(),
            &Patch::Merge(patch(provider_config("daemonset", json!(["worker-a"])))),
        )
        .await
        .unwrap();
    poll::until("op: remove for crun", poll::DEFAULT_TIMEOUT, || async {
        let updated = oscs
            .patch("pool-a", &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .map_err(|e| e.to_string())?;
        let handlers = plugin_handlers(&updated);
        if handlers == ["remove:crun"] {
            Ok(())
        } else {
            Err(format!("{handlers:?}"))
        }
    })
    .await;

    // A new CA (the certificate Secret is gone): the webhook re-registers, the API server
    // trusts the new certificate.
    let secrets: Api<Secret> = Api::namespaced(seed.clone(), &own_ns);
    let first_ca = configs.get(CONFIGURATION).await.unwrap().webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone();
    secrets
        .delete("webhook-certs", &DeleteParams::default())
        .await
        .unwrap();
    poll::until("a new CA registered", poll::DEFAULT_TIMEOUT, || async {
        let ca = configs
            .get(CONFIGURATION)
            .await
            .map_err(|e| e.to_string())?
            .webhooks
            .unwrap()[0]
            .client_config
            .ca_bundle
            .clone();
        if ca != first_ca {
            Ok(())
        } else {
            Err("same CA".to_string())
        }
    })
    .await;
    poll::until(
        "an OSC admitted by the new certificate",
        poll::DEFAULT_TIMEOUT,
        || async {
            oscs.patch("pool-a", &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;

    // The webhook is down: OSCs of the extension's shoots are refused (failurePolicy Fail),
    // those of other shoots are written.
    server.stop.cancel();
    server.task.await.unwrap();
    let err = oscs
        .patch(
            "pool-a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"touched": "2"}}})),
        )
        .await
        .expect_err("refused while the webhook is down");
    assert!(err.to_string().contains("failed calling webhook"), "{err}");
    others
        .patch("pool-a", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .expect("other shoots' OSCs are not blocked");

    configs
        .delete(CONFIGURATION, &DeleteParams::default())
        .await
        .unwrap();
}
