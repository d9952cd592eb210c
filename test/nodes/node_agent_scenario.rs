//! A test's world on Gardener-shaped nodes (`hack/control-plane.sh --node-agent`): gardenlet's
//! part ported (test/support/osc.rs) for a shoot namespace of the seed and the nodes' pool, and
//! what a test looks at on the nodes: containerd's effective config file as the agent wrote it,
//! the agent's journal, pods under a RuntimeClass.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::osc::{
    ContainerdConfig, CriConfig, Gardenlet, OperatingSystemConfigSpec, Pool,
};
use crate::support::real_nodes::{NODES_HINT, RealNode, RealNodes};
use crate::support::{self, Clusters, poll};

/// An OSC change applied by the agent on two nodes one after the other, each with an image pull
/// and a containerd restart, on two shared cores.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(300);

/// How to start what these tests need.
pub const NODE_AGENT_HINT: &str = "start the control plane with `--node-agent`: \
     hack/control-plane.sh up --nodes containerd17,containerd2 --node-images .local/images --node-agent";

pub struct AgentScenario {
    pub c: Clusters,
    pub nodes: RealNodes,
    pub gardenlet: Gardenlet,
    /// Namespace in the shoot for the test's pods.
    pub workloads: String,
}

impl AgentScenario {
    pub async fn start(test: &str) -> AgentScenario {
        let c = Clusters::connect().await;
        let nodes = RealNodes::load(&c.env);
        let file = c.env.dir.join("env");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {NODES_HINT}", file.display()));
        let secret_name = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| *k == "NODE_AGENT_SECRET")
            .map(|(_, v)| v.to_string())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| panic!("the nodes run no gardener-node-agent; {NODE_AGENT_HINT}"));
        let namespace = support::create_shoot_namespace(&c.seed, test).await;
        let gardenlet = Gardenlet {
            seed: c.seed.clone(),
            namespace,
            pool: Pool {
                name: nodes.pool.clone(),
                secret_name,
            },
        };
        gardenlet.remove_other_managed_resources().await;
        let workloads = support::unique_name(test);
        crate::scenario::create_workload_namespace(&c.shoot, &workloads).await;
        AgentScenario {
            c,
            nodes,
            gardenlet,
            workloads,
        }
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The pool's OSC as gardenlet renders it for these nodes, before extensions mutate it:
    /// containerd with the nodes' sandbox image, and the cgroup driver of their kubelets.
    /// (gardenlet says `systemd`; these kubelets use cgroupfs, see docs/development.md.)
    pub fn base_spec(&self) -> OperatingSystemConfigSpec {
        OperatingSystemConfigSpec {
            type_: "debian".into(),
            cri_config: Some(CriConfig {
                name: "containerd".into(),
                cgroup_driver: Some("cgroupfs".into()),
                containerd: Some(ContainerdConfig {
                    sandbox_image: self.nodes.image("PAUSE_IMAGE").to_string(),
                    plugins: vec![],
                }),
            }),
            ..Default::default()
        }
    }

    /// Creates a RuntimeClass for `handler` in the shoot (replacing one of an earlier run).
    pub async fn runtime_class(&self, name: &str, handler: &str) {
        let api: Api<RuntimeClass> = Api::all(self.c.shoot.clone());
        let _ = api.delete(name, &DeleteParams::default()).await;
        let rc = RuntimeClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            handler: handler.into(),
            ..Default::default()
        };
        poll::until(
            &format!("RuntimeClass {name} created"),
            poll::DEFAULT_TIMEOUT,
            || async {
                match api.create(&PostParams::default(), &rc).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
    }

    pub async fn delete_runtime_class(&self, name: &str) {
        let api: Api<RuntimeClass> = Api::all(self.c.shoot.clone());
        let _ = api.delete(name, &DeleteParams::default()).await;
    }

    /// Waits until every node is Ready (the agent's containerd restart takes it away briefly).
    pub async fn wait_nodes_ready(&self) {
        let api: Api<Node> = Api::all(self.c.shoot.clone());
        poll::until("every node Ready", AGENT_TIMEOUT, || async {
            let mut not_ready = Vec::new();
            for name in self.node_names() {
                let node = api.get(&name).await.map_err(|e| e.to_string())?;
                let ready = node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if !ready {
                    not_ready.push(name);
                }
            }
            if not_ready.is_empty() {
                Ok(())
            } else {
                Err(format!("not Ready: {not_ready:?}"))
            }
        })
        .await;
    }

    /// Runs a pod of the workload image on `node` under `runtime_class` and waits until it is
    /// Running; returns its name and its container's id.
    pub async fn run_pod(&self, node: &RealNode, runtime_class: &str) -> (String, String) {
        let name = support::unique_name(&format!("{runtime_class}-{}", node.name));
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.workloads},
            "spec": {
                "runtimeClassName": runtime_class,
                "nodeSelector": {"kubernetes.io/hostname": node.name},
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": self.nodes.image("WORKLOAD_IMAGE"),
                                "command": ["sh", "-c", "sleep 3600"]}]
            }
        }))
        .expect("pod");
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        crate::scenario::create_once_admitted(&pods, &pod).await;
        let id = poll::until(&format!("pod {name} Running"), AGENT_TIMEOUT, || async {
            let pod = pods.get(&name).await.map_err(|e| e.to_string())?;
            let status = pod.status.unwrap_or_default();
            let id = status
                .container_statuses
                .clone()
                .unwrap_or_default()
                .into_iter()
                .next()
                .and_then(|c| c.container_id)
                .and_then(|id| id.split_once("://").map(|(_, id)| id.to_string()));
            match (status.phase.as_deref(), id) {
                (Some("Running"), Some(id)) => Ok(id),
                (phase, _) => Err(format!(
                    "{phase:?}: {:?} {:?}",
                    status.conditions,
                    status
                        .container_statuses
                        .map(|c| c.into_iter().map(|c| c.state).collect::<Vec<_>>())
                )),
            }
        })
        .await;
        (name, id)
    }

    /// Deletes the test's pods and waits until they are gone.
    pub async fn delete_pods(&self) {
        let pods: Api<Pod> = Api::namespaced(self.c.shoot.clone(), &self.workloads);
        let _ = pods
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await;
        poll::until("the test's pods gone", AGENT_TIMEOUT, || async {
            let left = pods
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            if left.items.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    left.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
                ))
            }
        })
        .await;
    }
}

/// The agent's journal tells why a test failed.
impl Drop for AgentScenario {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in &self.nodes.nodes {
            let output = node.exec(&[
                "journalctl",
                "--no-pager",
                "-u",
                "gardener-node-agent.service",
                "-n",
                "60",
            ]);
            eprintln!(
                "----- {}: gardener-node-agent (last 60 lines) -----\n{}",
                node.name,
                String::from_utf8_lossy(&output.stdout)
            );
        }
    }
}

/// The value at `path` in a TOML document, tables walked by key (a plugin's name is one key,
/// dots and all).
pub fn toml_at<'a>(doc: &'a toml_edit::DocumentMut, path: &[&str]) -> Option<&'a toml_edit::Item> {
    let mut item = doc.as_item();
    for key in path {
        item = item.as_table_like()?.get(key)?;
    }
    Some(item)
}

/// containerd's main config file on the node, parsed.
pub fn containerd_config(node: &RealNode) -> toml_edit::DocumentMut {
    let bytes = node
        .read("/etc/containerd/config.toml")
        .unwrap_or_else(|| panic!("{}: no /etc/containerd/config.toml", node.name));
    String::from_utf8_lossy(&bytes)
        .parse()
        .unwrap_or_else(|e| panic!("{}: config.toml does not parse: {e}", node.name))
}

/// Where the CRI runtimes live in the node's config version (the agent's translation).
pub fn runtimes_path(node: &RealNode) -> [&'static str; 4] {
    match node.containerd_major() {
        1 => [
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
        ],
        _ => [
            "plugins",
            "io.containerd.cri.v1.runtime",
            "containerd",
            "runtimes",
        ],
    }
}
