//! One test's world: the controller binary, a shoot namespace in the seed with its Cluster and
//! shoot-access secret, and the real nodes, clean at the start. The Extension is driven as
//! gardenlet drives it; the nodes are looked at through the API and on the node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, Condition, ConditionStatus, Extension, ManagedResource,
};

use crate::support::process::{self, Replica};
use crate::support::real_nodes::{PreviousRelease, RealNode, RealNodes};
use crate::support::{self, Clusters, gardenlet, objects, poll};

/// The Extension's name, as gardenlet names it.
pub const EXTENSION: &str = "containerd-shim";
/// Where the installer keeps everything it puts on a node.
pub const STATE_DIR: &str = "/var/lib/containerd-shim-installer";
/// Prefix of the readiness labels the installer sets.
pub const LABEL_PREFIX: &str = "containerd-shim.extensions.gardener.cloud/";

/// A containerd restart, a pod start or an uninstall on a real node: generous, because two
/// nodes converge one after the other on two shared cores.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(240);

pub struct Scenario {
    pub c: Clusters,
    pub nodes: RealNodes,
    pub namespace: String,
    pub extensions: Api<Extension>,
    /// Kept running for the test; its log is printed when the test fails.
    controller: Replica,
    /// Namespace in the shoot for the test's workload pods.
    pub workloads: String,
}

impl Scenario {
    /// Starts the controller, removes what an earlier test may have left (its Extensions are
    /// deleted as gardenlet would, which uninstalls from the nodes), checks that every node is
    /// clean, and prepares a shoot namespace for this test.
    pub async fn start(test: &str) -> Scenario {
        let c = Clusters::connect().await;
        let nodes = RealNodes::load(&c.env);
        let controller = start_controller(&c, &nodes, Build::Current).await;
        remove_leftovers(&c).await;
        for node in &nodes.nodes {
            assert_clean(&c, node).await;
        }
        let namespace = support::create_shoot_namespace(&c.seed, test).await;
        prepare_shoot_namespace(&c, &namespace, test).await;
        let workloads = support::unique_name(test);
        create_workload_namespace(&c.shoot, &workloads).await;
        let extensions = Api::namespaced(c.seed.clone(), &namespace);
        Scenario {
            c,
            nodes,
            namespace,
            extensions,
            controller,
            workloads,
        }
    }

    /// Stops the running controller and starts this build in its place, as a rolled controller
    /// Deployment does: the old process has exited before the new one starts.
    pub async fn replace_controller(&mut self, build: Build<'_>) {
        self.controller.signal("TERM");
        let status = self.controller.wait_exit().await;
        assert!(
            status.success(),
            "the controller exited with {status} on SIGTERM"
        );
        self.controller = start_controller(&self.c, &self.nodes, build).await;
    }

    /// Creates or changes the Extension's providerConfig to these shims and requests a
    /// reconcile as gardenlet does; returns when gardenlet would accept it.
    pub async fn apply(&self, shims: Value) {
        let config = json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                            "kind": "ContainerdShimConfig", "shims": shims});
        match self.extensions.get_opt(EXTENSION).await.expect("get") {
            None => {
                self.extensions
                    .create(
                        &PostParams::default(),
                        &objects::extension(&self.namespace, EXTENSION, Some(config)),
                    )
                    .await
                    .expect("create Extension");
            }
            Some(_) => {
                let patch = json!({"spec": {"providerConfig": config}});
                self.extensions
                    .patch(EXTENSION, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .expect("patch Extension");
            }
        }
        let ts = gardenlet::request_reconcile(&self.extensions, EXTENSION).await;
        gardenlet::wait_ready(&self.extensions, EXTENSION, Some(&ts)).await;
        self.wait_bundle_applied().await;
    }

    /// Waits until gardener-resource-manager has applied the current bundle into the shoot:
    /// before that, the shoot still shows the previous one.
    pub async fn wait_bundle_applied(&self) {
        let bundles: Api<ManagedResource> = Api::namespaced(self.c.seed.clone(), &self.namespace);
        poll::until(
            "the bundle applied into the shoot",
            NODE_TIMEOUT,
            || async {
                let mr = bundles
                    .get("extension-containerd-shim")
                    .await
                    .map_err(|e| e.to_string())?;
                let status = mr.status.clone().unwrap_or_default();
                let applied = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "ResourcesApplied" && c.status == ConditionStatus::True);
                if status.observed_generation == mr.metadata.generation && applied {
                    Ok(())
                } else {
                    Err(format!("{status:?}"))
                }
            },
        )
        .await;
    }

    /// Deletes the Extension as gardenlet does and waits until it is gone.
    pub async fn delete(&self) {
        gardenlet::delete(&self.extensions, EXTENSION).await;
        gardenlet::wait_deleted_within(&self.extensions, EXTENSION, NODE_TIMEOUT).await;
    }

    /// The shoot's Node objects, by name.
    pub async fn node_labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        Api::<Node>::all(self.c.shoot.clone())
            .list(&ListParams::default())
            .await
            .expect("list nodes")
            .into_iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect()
    }

    /// Waits until every node carries the readiness label of `handler`.
    pub async fn wait_verified_everywhere(&self, handler: &str) {
        let key = format!("{LABEL_PREFIX}{handler}");
        poll::until(
            &format!("every node labelled {key}=ready"),
            NODE_TIMEOUT,
            || async {
                let labels = self.node_labels().await;
                let missing: Vec<&String> = labels
                    .iter()
                    .filter(|(_, l)| l.get(&key).map(String::as_str) != Some("ready"))
                    .map(|(n, _)| n)
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not labelled: {missing:?}"))
                }
            },
        )
        .await;
    }

    /// Runs a pod of the workload image on `node` with this RuntimeClass (or the node's
    /// default runtime) and waits until it is Running; returns its name.
    pub async fn run_pod(
        &self,
        node: &RealNode,
        runtime_class: Option<&str>,
        script: &str,
    ) -> String {
        let spec = json!({
            "runtimeClassName": runtime_class,
            // The API server's default, written out so that create_pod keeps it.
            "restartPolicy": "Always",
            // No pull policy: the default for a digest reference (IfNotPresent) pulls from the
            // registry once per node.
            "containers": [{"name": "main", "image": self.nodes.image("WORKLOAD_IMAGE"),
                            "command": ["sh", "-c", script]}]
        });
        let name = self
            .create_pod(node, runtime_class.unwrap_or("runc"), spec)
            .await;
        self.wait_pod_running(&name).await;
        name
    }

    /// Creates a pod from its spec on `node` (a restart policy of OnFailure, no service account
    /// token) and returns its name.
    pub async fn create_pod(&self, node: &RealNode, prefix: &str, spec: Value) -> String {
        let name = support::unique_name(&format!("{prefix}-{}", node.name));
        let mut spec = spec;
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node.name});
        spec["automountServiceAccountToken"] = json!(false);
        spec["terminationGracePeriodSeconds"] = json!(1);
        if spec.get("restartPolicy").is_none() {
            spec["restartPolicy"] = json!("OnFailure");
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.workloads},
            "spec": spec
        }))
        .expect("pod");
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        create_once_admitted(&pods, &pod).await;
        name
    }

    /// The pod's IP once it has one.
    pub async fn pod_ip(&self, name: &str) -> std::net::IpAddr {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        poll::until(
            &format!("pod {name} to have an IP"),
            NODE_TIMEOUT,
            || async {
                let pod = pods.get(name).await.map_err(|e| e.to_string())?;
                pod.status
                    .and_then(|s| s.pod_ip)
                    .and_then(|ip| ip.parse().ok())
                    .ok_or_else(|| "no IP yet".to_string())
            },
        )
        .await
    }

    /// Polls the pod's log until it contains `line`.
    pub async fn wait_log_line(&self, name: &str, line: &str) {
        poll::until(
            &format!("{line:?} in the log of {name}"),
            NODE_TIMEOUT,
            || async {
                let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
                let logs = pods
                    .logs(name, &Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                if logs.contains(line) {
                    Ok(())
                } else {
                    Err(logs)
                }
            },
        )
        .await;
    }

    /// Deletes the test's workload pods but `keep`, and waits until they are gone.
    pub async fn delete_workloads_except(&self, keep: &[String]) {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        let doomed: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .into_iter()
            .map(|p| p.name_any())
            .filter(|name| !keep.contains(name))
            .collect();
        for name in &doomed {
            let _ = pods.delete(name, &DeleteParams::default()).await;
        }
        poll::until("the workload pods to be gone", NODE_TIMEOUT, || async {
            let left: Vec<String> = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|p| p.name_any())
                .filter(|name| doomed.contains(name))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        })
        .await;
    }

    pub async fn wait_pod_running(&self, name: &str) {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        poll::until(&format!("pod {name} Running"), NODE_TIMEOUT, || async {
            let pod = pods.get(name).await.map_err(|e| e.to_string())?;
            let status = pod.status.unwrap_or_default();
            match status.phase.as_deref() {
                Some("Running") => Ok(()),
                phase => Err(format!(
                    "{phase:?}: {:?}",
                    status
                        .container_statuses
                        .unwrap_or_default()
                        .iter()
                        .map(|c| c.state.clone())
                        .collect::<Vec<_>>()
                )),
            }
        })
        .await;
    }

    /// The container ID (without the `containerd://` prefix) of a pod's first container.
    pub async fn container_id(&self, pod: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        let pod = pods.get(pod).await.expect("get pod");
        pod.status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .and_then(|c| c.container_id)
            .and_then(|id| id.split_once("://").map(|(_, id)| id.to_string()))
            .unwrap_or_else(|| panic!("pod has no container ID yet"))
    }

    /// The pod's log (through the kubelet: `kubectl logs`).
    pub async fn logs(&self, pod: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        pods.logs(pod, &Default::default()).await.expect("pod logs")
    }
}

/// Which build of the controller runs a scenario.
#[derive(Clone, Copy)]
pub enum Build<'a> {
    /// This build: the binary cargo built for the tests, the images hack/nodes/images.sh built.
    Current,
    /// The previous release's controller and its installer image.
    Previous(&'a PreviousRelease),
}

/// Starts the controller of `build`, pointed at the nodes' images and the catalog overlay.
async fn start_controller(c: &Clusters, nodes: &RealNodes, build: Build<'_>) -> Replica {
    let (bin, overwrite) = match build {
        Build::Current => (PathBuf::from(process::BIN), nodes.image_vector_overwrite()),
        Build::Previous(release) => (
            release.controller.clone(),
            release.image_vector_overwrite.clone(),
        ),
    };
    let overwrite = overwrite.display().to_string();
    let overlay = nodes.catalog_overlay().display().to_string();
    process::start_controller_binary(
        c,
        &bin,
        &["--healthcheck-period=3s"],
        &[
            ("IMAGEVECTOR_OVERWRITE", overwrite.as_str()),
            ("SHIM_CATALOG_OVERLAY", overlay.as_str()),
        ],
    )
    .await
}

/// When a test fails, the installers' own logs are what explains it: printed from the nodes'
/// pod log files (the API server may be gone by then).
impl Drop for Scenario {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in &self.nodes.nodes {
            for (file, content) in node.tree("/var/log/pods") {
                if file.starts_with("kube-system_containerd-shim-installer-") {
                    let text = String::from_utf8_lossy(&content);
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                    eprintln!(
                        "----- {}: /var/log/pods/{file} (last 40 lines) -----\n{tail}",
                        node.name
                    );
                }
            }
        }
    }
}

/// An installer pod as the DaemonSet rollout sees it.
#[derive(Clone, Debug)]
pub struct InstallerPod {
    pub node: String,
    /// The desired set its template was rendered with.
    pub desired_sha256: String,
    pub created: jiff::Timestamp,
    /// When it last became Ready (`None` while not Ready).
    pub ready_since: Option<jiff::Timestamp>,
    pub deleting: bool,
}

impl Scenario {
    /// The installer DaemonSet's pods as the API server has them (an error as text, for polls).
    pub async fn list_installer_pods(&self) -> Result<Vec<Pod>, String> {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), "kube-system");
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=containerd-shim-installer"))
            .await
            .map(|list| list.items)
            .map_err(|e| format!("list installer pods: {e}"))
    }

    /// The installer DaemonSet's pods.
    pub async fn installer_pods(&self) -> Vec<InstallerPod> {
        self.list_installer_pods()
            .await
            .expect("list installer pods")
            .into_iter()
            .map(|pod| {
                let spec = pod.spec.clone().unwrap_or_default();
                let desired_sha256 = spec
                    .containers
                    .iter()
                    .flat_map(|c| c.env.clone().unwrap_or_default())
                    .find(|e| e.name == "DESIRED_SHIMS_SHA256")
                    .and_then(|e| e.value)
                    .unwrap_or_default();
                let ready_since = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0);
                InstallerPod {
                    node: spec.node_name.unwrap_or_default(),
                    desired_sha256,
                    created: pod
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or_default(),
                    ready_since,
                    deleting: pod.metadata.deletion_timestamp.is_some(),
                }
            })
            .collect()
    }

    /// The desired-set digest of the nodes' pool's installer DaemonSet's pod template, once
    /// gardener-resource-manager has applied the DaemonSet.
    pub async fn current_desired_sha256(&self) -> String {
        let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(self.c.shoot.clone(), "kube-system");
        let ds = poll::until("the installer DaemonSet", poll::DEFAULT_TIMEOUT, || async {
            daemon_sets
                .get_opt(&format!("containerd-shim-installer-{}", self.nodes.pool))
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not applied yet".to_string())
        })
        .await;
        ds.spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers)
            .unwrap_or_default()
            .iter()
            .flat_map(|c| c.env.clone().unwrap_or_default())
            .find(|e| e.name == "DESIRED_SHIMS_SHA256")
            .and_then(|e| e.value)
            .unwrap_or_default()
    }

    /// Waits until every node runs a Ready installer pod of the current desired set.
    pub async fn wait_rolled_out(&self) {
        poll::until(
            "the installer rolled out to every node",
            NODE_TIMEOUT,
            || async {
                let current = self.current_desired_sha256().await;
                let pods = self.installer_pods().await;
                let done = self.nodes.nodes.iter().all(|n| {
                    pods.iter().any(|p| {
                        p.node == n.name
                            && p.desired_sha256 == current
                            && p.ready_since.is_some()
                            && !p.deleting
                    })
                });
                if done {
                    Ok(())
                } else {
                    Err(format!("{pods:?}"))
                }
            },
        )
        .await;
    }

    /// Waits until the Extension's `SystemComponentsHealthy` condition is `True`.
    pub async fn wait_healthy(&self) {
        self.health_condition("True", |c| c.status == ConditionStatus::True)
            .await;
    }

    /// The Extension's `SystemComponentsHealthy` condition once `accept` takes its message.
    pub async fn wait_health(&self, what: &str, accept: impl Fn(&str) -> bool) -> String {
        self.health_condition(what, |c| accept(&c.message))
            .await
            .message
    }

    /// The Extension's `SystemComponentsHealthy` condition once `accept` takes it.
    async fn health_condition(&self, what: &str, accept: impl Fn(&Condition) -> bool) -> Condition {
        poll::until(
            &format!("SystemComponentsHealthy {what}"),
            NODE_TIMEOUT,
            || async {
                let ext = self
                    .extensions
                    .get(EXTENSION)
                    .await
                    .map_err(|e| e.to_string())?;
                let conditions = ext.status.map(|s| s.conditions).unwrap_or_default();
                match conditions
                    .into_iter()
                    .find(|c| c.type_ == "SystemComponentsHealthy")
                {
                    Some(c) if accept(&c) => Ok(c),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
    }
}

/// Creates the namespace in the shoot that holds a test's workload pods.
/// What gardenlet puts in a shoot namespace before any Extension: the Cluster with the Shoot,
/// and the shoot access Secret (`gardener`) the controller reaches the shoot with.
pub async fn prepare_shoot_namespace(c: &Clusters, namespace: &str, shoot: &str) {
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(namespace, objects::shoot(shoot)),
        )
        .await
        .expect("create Cluster");
    let kubeconfig = std::fs::read(&c.env.shoot_kubeconfig).expect("read the shoot kubeconfig");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("gardener".into()),
            ..Default::default()
        },
        data: Some([("kubeconfig".to_string(), ByteString(kubeconfig))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(c.seed.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the shoot access secret");
}

pub async fn create_workload_namespace(shoot: &kube::Client, name: &str) {
    Api::<Namespace>::all(shoot.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create the workload namespace");
}

/// Creates a pod of a test's new workload namespace. The namespace's default ServiceAccount
/// comes from the controller-manager a moment after the namespace, and admission refuses the
/// pod until then: the create is retried (a 409 means an earlier try went through).
pub async fn create_once_admitted(pods: &Api<Pod>, pod: &Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    poll::until(
        &format!("pod {name} created"),
        poll::DEFAULT_TIMEOUT,
        || async {
            match pods.create(&PostParams::default(), pod).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
}

/// Deletes what an earlier test may have left: its workload pods first (a shim's files stay on a
/// node while pods of its handler exist, so an uninstall would wait for them), then every
/// Extension in the seed as gardenlet would, which uninstalls from the nodes.
async fn remove_leftovers(c: &Clusters) {
    let namespaces: Api<Namespace> = Api::all(c.shoot.clone());
    let mut workloads = Vec::new();
    for ns in namespaces
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
    {
        let name = ns.name_any();
        if !["default", "kube-system", "kube-public", "kube-node-lease"].contains(&name.as_str()) {
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
            workloads.push(name);
        }
    }
    poll::until(
        "the workload namespaces of earlier tests to be gone",
        NODE_TIMEOUT,
        || async {
            let mut left = Vec::new();
            for name in &workloads {
                if namespaces
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some()
                {
                    left.push(name.clone());
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
    let all: Api<Extension> = Api::all(c.seed.clone());
    let leftovers = all
        .list(&ListParams::default())
        .await
        .expect("list Extensions");
    for ext in leftovers {
        let api: Api<Extension> =
            Api::namespaced(c.seed.clone(), &ext.namespace().unwrap_or_default());
        if ext.metadata.deletion_timestamp.is_none() {
            gardenlet::delete(&api, &ext.name_any()).await;
        }
        gardenlet::wait_deleted_within(&api, &ext.name_any(), NODE_TIMEOUT).await;
    }
}

/// A node without anything of ours: no readiness label, no installer directory, no runtime of
/// ours in containerd's configuration.
pub async fn assert_clean(c: &Clusters, node: &RealNode) {
    let api: Api<Node> = Api::all(c.shoot.clone());
    let labels = api
        .get(&node.name)
        .await
        .expect("get node")
        .labels()
        .clone();
    let ours: Vec<&String> = labels
        .keys()
        .filter(|k| k.starts_with(LABEL_PREFIX))
        .collect();
    assert!(ours.is_empty(), "{} still has labels {ours:?}", node.name);
    assert!(
        !node.exists(STATE_DIR) || node.tree(STATE_DIR).is_empty(),
        "{} still has {STATE_DIR}: {:?}",
        node.name,
        node.tree(STATE_DIR).keys().collect::<Vec<_>>()
    );
    for (file, content) in node.containerd_config() {
        let text = String::from_utf8_lossy(&content);
        assert!(
            !text.contains(STATE_DIR),
            "{}:/etc/containerd/{file} still names {STATE_DIR}:\n{text}",
            node.name
        );
    }
}
