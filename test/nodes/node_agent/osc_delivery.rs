//! `delivery: osc` end to end on Gardener-shaped nodes: the controller binary with its
//! OperatingSystemConfig webhook registered in the seed, gardenlet's part ported, the real
//! gardener-node-agent. Enabling crun puts its plugin entry and file into the pool's OSC as
//! gardenlet writes it; the agent applies them with one containerd restart per node; the
//! installer pods, which write nothing on the host, label each node once a canary sandbox of
//! the handler starts; a pod of the RuntimeClass runs under the delivered crun. Removing crun
//! takes the RuntimeClass and the labels away and, at the next OSC write, the table off the
//! nodes (the file stays one generation longer, for pods that started before).

use std::collections::BTreeMap;

use gardener_extension_containerd_shim::shim::osc_webhook::{CONFIGURATION, NAMESPACE_LABEL};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::node_agent_scenario::{
    AGENT_TIMEOUT, AgentScenario, containerd_config, runtimes_path, toml_at,
};
use crate::scenario::{EXTENSION, LABEL_PREFIX};
use crate::support::osc::{OperatingSystemConfig, wait_applied};
use crate::support::process::{self, Replica};
use crate::support::real_nodes::{RealNode, now_us};
use crate::support::{self, gardenlet, objects, poll};
use crate::upgrade::shim_executables;

const HANDLER: &str = "crun";

fn config(delivery: &str, shims: Value) -> Value {
    json!({
        "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
        "kind": "ContainerdShimConfig",
        "delivery": delivery,
        "shims": shims,
    })
}

pub(super) fn crun() -> Value {
    // These nodes' kubelets use cgroupfs.
    json!([{"name": "crun", "options": {"SystemdCgroup": false}}])
}

fn handler_table(node: &RealNode) -> Option<String> {
    let doc = containerd_config(node);
    let mut path = runtimes_path(node).to_vec();
    path.push(HANDLER);
    toml_at(&doc, &path).map(|item| item.to_string())
}

/// The crun binary the OSC delivers.
pub(super) fn delivered_binary(osc: &OperatingSystemConfig) -> Option<String> {
    osc.spec
        .files
        .iter()
        .map(|f| f.path.clone())
        .find(|p| p.starts_with("/var/bin/containerruntimes/crun/") && p.ends_with("/bin/crun"))
}

fn plugin_ops(osc: &OperatingSystemConfig) -> Vec<String> {
    osc.spec
        .cri_config
        .as_ref()
        .and_then(|c| c.containerd.as_ref())
        .map(|c| {
            c.plugins
                .iter()
                .map(|p| {
                    format!(
                        "{}{}",
                        p.op.as_deref().map(|o| format!("{o}:")).unwrap_or_default(),
                        p.path.last().cloned().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The controller binary with the webhook reachable at a local port; the scenario's shoot
/// namespace carries the label gardenlet gives the extension's shoots, and a Cluster and the
/// shoot access Secret as for any Extension.
async fn start_controller(s: &AgentScenario) -> Replica {
    let namespace = &s.gardenlet.namespace;
    Api::<Namespace>::all(s.c.seed.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})),
        )
        .await
        .expect("label the shoot namespace");
    crate::scenario::prepare_shoot_namespace(&s.c, namespace, "osc-delivery").await;
    let certs = support::unique_name("osc-webhook");
    support::create_namespace(&s.c.seed, &certs, &[]).await;
    let port = process::free_port();
    let cert_dir = std::env::temp_dir().join(&certs);
    let args = [
        "--healthcheck-period=3s".to_string(),
        format!("--webhook-config-namespace={certs}"),
        "--webhook-config-mode=url".to_string(),
        format!("--webhook-config-url=127.0.0.1:{port}"),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--webhook-cert-dir={}", cert_dir.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let overwrite = s.nodes.image_vector_overwrite().display().to_string();
    let overlay = s.nodes.catalog_overlay().display().to_string();
    let controller = process::start_controller_with_env(
        &s.c,
        &args,
        &[
            ("IMAGEVECTOR_OVERWRITE", overwrite.as_str()),
            ("SHIM_CATALOG_OVERLAY", overlay.as_str()),
        ],
    )
    .await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(s.c.seed.clone());
    poll::until("the webhook registered", poll::DEFAULT_TIMEOUT, || async {
        let config = configs
            .get(CONFIGURATION)
            .await
            .map_err(|e| e.to_string())?;
        let url = config.webhooks.unwrap_or_default()[0]
            .client_config
            .url
            .clone();
        if url.as_deref()
            == Some(&format!(
                "https://127.0.0.1:{port}/webhooks/mutate-operatingsystemconfigs"
            ))
        {
            Ok(())
        } else {
            Err(format!("{url:?}"))
        }
    })
    .await;
    controller
}

async fn apply(s: &AgentScenario, shims: Value) {
    apply_delivered_by(s, "osc", shims).await;
}

/// The Extension with `shims` delivered by `delivery` (`osc` or `daemonset`), reconciled as
/// gardenlet requests it.
pub(super) async fn apply_delivered_by(s: &AgentScenario, delivery: &str, shims: Value) {
    let extensions = Api::namespaced(s.c.seed.clone(), &s.gardenlet.namespace);
    match extensions.get_opt(EXTENSION).await.expect("get") {
        None => {
            extensions
                .create(
                    &PostParams::default(),
                    &objects::extension(
                        &s.gardenlet.namespace,
                        EXTENSION,
                        Some(config(delivery, shims)),
                    ),
                )
                .await
                .expect("create Extension");
        }
        Some(_) => {
            extensions
                .patch(
                    EXTENSION,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerConfig": config(delivery, shims)}})),
                )
                .await
                .expect("patch Extension");
        }
    }
    let ts = gardenlet::request_reconcile(&extensions, EXTENSION).await;
    gardenlet::wait_ready(&extensions, EXTENSION, Some(&ts)).await;
}

pub(super) async fn labels(s: &AgentScenario) -> BTreeMap<String, Option<String>> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(s.c.shoot.clone());
    let key = format!("{LABEL_PREFIX}{HANDLER}");
    let mut out = BTreeMap::new();
    for name in s.node_names() {
        let node = nodes.get(&name).await.expect("get node");
        out.insert(name, node.labels().get(&key).cloned());
    }
    out
}

/// The scenario with the controller running and the pool's OSC as it was before the
/// extension, applied: the webhook has nothing to deliver yet.
pub(super) async fn started(test: &str) -> (AgentScenario, Replica, Vec<String>) {
    let s = AgentScenario::start(test).await;
    let names = s.node_names();
    let controller = start_controller(&s).await;
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    assert_eq!(plugin_ops(&osc), Vec::<String>::new());
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    s.wait_nodes_ready().await;
    (s, controller, names)
}

/// Deletes the Extension as gardenlet does, and the webhook's registration (it fails closed
/// for the labelled namespaces once the controller is gone).
pub(super) async fn tear_down(s: &AgentScenario) {
    let extensions = Api::namespaced(s.c.seed.clone(), &s.gardenlet.namespace);
    gardenlet::delete(&extensions, EXTENSION).await;
    gardenlet::wait_deleted_within(&extensions, EXTENSION, AGENT_TIMEOUT).await;
    let _ = Api::<MutatingWebhookConfiguration>::all(s.c.seed.clone())
        .delete(CONFIGURATION, &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn crun_delivered_through_the_osc_runs_pods_and_leaves() {
    let (s, _controller, names) = started("osc-delivery").await;

    // Enabled: the RuntimeClass is there, but no node is labelled before the agent applied.
    apply(&s, crun()).await;
    let classes: Api<RuntimeClass> = Api::all(s.c.shoot.clone());
    poll::until("the crun RuntimeClass", AGENT_TIMEOUT, || async {
        classes
            .get("crun")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    assert!(
        labels(&s).await.values().all(Option::is_none),
        "labelled before delivery"
    );

    // gardenlet writes the OSC on the shoot reconcile that follows the Extension's.
    let started = now_us();
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    assert_eq!(plugin_ops(&osc), vec![HANDLER.to_string()]);
    let binary =
        delivered_binary(&osc).unwrap_or_else(|| panic!("no crun file in {:?}", osc.spec.files));
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    for node in &s.nodes.nodes {
        assert!(
            handler_table(node).is_some(),
            "{}: no crun table",
            node.name
        );
        assert!(node.exists(&binary), "{}: {binary} missing", node.name);
        assert_eq!(
            node.containerd_restarts(started).len(),
            1,
            "{}: containerd restarts while applying",
            node.name
        );
    }
    poll::until("every node labelled crun=ready", AGENT_TIMEOUT, || async {
        let labels = labels(&s).await;
        if labels.values().all(|v| v.as_deref() == Some("ready")) {
            Ok(())
        } else {
            Err(format!("{labels:?}"))
        }
    })
    .await;
    for node in &s.nodes.nodes {
        let (_, id) = s.run_pod(node, "crun").await;
        assert!(
            node.oci_containers(&binary).contains(&id),
            "{}: the delivered crun does not list {id}",
            node.name
        );
        assert_eq!(
            node.containerd_restarts(started).len(),
            1,
            "{}: the installer restarted containerd",
            node.name
        );
    }

    // Removed: the class and the labels go at once, the table and the file with the next OSC.
    s.delete_pods().await;
    apply(&s, json!([])).await;
    poll::until(
        "the RuntimeClass and the labels gone",
        AGENT_TIMEOUT,
        || async {
            let class = classes.get_opt("crun").await.map_err(|e| e.to_string())?;
            let labels = labels(&s).await;
            if class.is_none() && labels.values().all(Option::is_none) {
                Ok(())
            } else {
                Err(format!(
                    "class {:?}, labels {labels:?}",
                    class.map(|c| c.name_any())
                ))
            }
        },
    )
    .await;
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    assert_eq!(plugin_ops(&osc), vec![format!("remove:{HANDLER}")]);
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    for node in &s.nodes.nodes {
        assert_eq!(handler_table(node), None, "{}: crun table left", node.name);
        // Kept for one more generation of the delivered files (src/shim/osc): a pod started
        // before the removal may still need it to be stopped.
        assert!(
            node.exists(&binary),
            "{}: {binary} removed early",
            node.name
        );
    }
    s.wait_nodes_ready().await;

    tear_down(&s).await;
}

/// Starts the HTTP module under the wasmtime RuntimeClass on `node`; returns the pod's name and
/// the shim file the processes it added execute.
async fn serve_http(s: &AgentScenario, node: &RealNode) -> (String, String) {
    use k8s_openapi::api::core::v1::Pod;
    let before = shim_executables(node);
    let name = support::unique_name(&format!("wasm-http-{}", node.name));
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": s.workloads},
        "spec": {
            "runtimeClassName": "wasmtime",
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "http", "image": s.nodes.image("WASM_HTTP_IMAGE"),
                            "imagePullPolicy": "IfNotPresent"}]
        }
    }))
    .expect("pod");
    let pods: Api<Pod> = Api::namespaced(s.c.shoot.clone(), &s.workloads);
    crate::scenario::create_once_admitted(&pods, &pod).await;
    poll::until(&format!("pod {name} Running"), AGENT_TIMEOUT, || async {
        let pod = pods.get(&name).await.map_err(|e| e.to_string())?;
        let status = pod.status.unwrap_or_default();
        let ready = status
            .container_statuses
            .unwrap_or_default()
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        if status.phase.as_deref() == Some("Running") && ready {
            Ok(())
        } else {
            Err(format!("{:?}", status.phase))
        }
    })
    .await;
    let added: std::collections::BTreeSet<String> = shim_executables(node)
        .into_iter()
        .filter(|(pid, _)| !before.contains_key(pid))
        .map(|(_, exe)| exe)
        .collect();
    assert_eq!(added.len(), 1, "{}: {name} runs {added:?}", node.name);
    (name, added.into_iter().next().unwrap_or_default())
}

pub(super) async fn wait_labelled(s: &AgentScenario, handler: &str) {
    let key = format!("{LABEL_PREFIX}{handler}");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(s.c.shoot.clone());
    poll::until(
        &format!("every node labelled {key}"),
        AGENT_TIMEOUT,
        || async {
            let mut missing = Vec::new();
            for name in s.node_names() {
                let node = nodes.get(&name).await.map_err(|e| e.to_string())?;
                if node.labels().get(&key).map(String::as_str) != Some("ready") {
                    missing.push(name);
                }
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("{missing:?}"))
            }
        },
    )
    .await;
}

/// An upgrade through the OSC: the new version lands in a directory of its own beside the old
/// one, the agent restarts containerd once per node, the pods that ran keep their shim (its
/// file stays), and new pods start the new version.
#[tokio::test]
async fn a_wasmtime_upgrade_through_the_osc_keeps_running_pods() {
    let (s, _controller, names) = started("osc-upgrade").await;
    let wasmtime = |version: &str| json!([{"name": "wasmtime", "catalog": {"name": "wasmtime", "version": version}}]);

    apply(&s, wasmtime("0.1.0")).await;
    let (_, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    wait_labelled(&s, "wasmtime").await;
    let mut before = Vec::new();
    for node in &s.nodes.nodes {
        let (pod, exe) = serve_http(&s, node).await;
        assert!(exe.contains("/wasmtime/0.1.0-"), "{}: {exe}", node.name);
        before.push((node, pod, exe));
    }

    let upgrading = now_us();
    apply(&s, wasmtime("next")).await;
    let (osc, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    let files: Vec<&str> = osc.spec.files.iter().map(|f| f.path.as_str()).collect();
    assert!(
        files.iter().any(|p| p.contains("/wasmtime/next-"))
            && files.iter().any(|p| p.contains("/wasmtime/0.1.0-")),
        "the new version beside the old one: {files:?}"
    );
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    wait_labelled(&s, "wasmtime").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(s.c.shoot.clone(), &s.workloads);
    for (node, pod, exe) in &before {
        assert_eq!(
            node.containerd_restarts(upgrading).len(),
            1,
            "{}: containerd restarts for the upgrade",
            node.name
        );
        let running = pods.get(pod).await.expect("the old pod");
        assert_eq!(
            running.status.and_then(|s| s.phase).as_deref(),
            Some("Running"),
            "{}: {pod} stopped",
            node.name
        );
        assert!(
            shim_executables(node).values().any(|e| e == exe),
            "{}: the old shim {exe} no longer runs",
            node.name
        );
        let (_, new_exe) = serve_http(&s, node).await;
        assert!(
            new_exe.contains("/wasmtime/next-"),
            "{}: {new_exe}",
            node.name
        );
    }

    s.delete_pods().await;
    apply(&s, json!([])).await;
    let (_, checksum) = s.gardenlet.reconcile(s.base_spec()).await;
    wait_applied(&s.c.shoot, &names, &checksum, AGENT_TIMEOUT).await;
    s.wait_nodes_ready().await;
    tear_down(&s).await;
}
