//! How many nodes serve each shim: the installers label a node ready per handler only after
//! containerd serves it, so counting labels in the shoot tells the shoot owner and gardenlet how
//! far a rollout is. Reported in `SystemComponentsHealthy` when the shoot can be reached.
//!
//! The shoot's nodes are watched (metadata only, [`ShootNodes`]), and they are listed only when
//! their labels changed or the desired shims did; otherwise a check answers with what it found
//! last, without a request.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::sync::broadcast;

use crate::desired_shims::{
    DesiredShim, FAILURES_ANNOTATION, NODE_FAILURE, READY_LABEL_VALUE, ready_label,
};
use crate::gardener::api::cluster::WORKER_POOL_LABEL;
use crate::gardener::healthcheck::check::{CheckContext, HealthCheck};
use crate::gardener::healthcheck::result::CheckResult;
use crate::gardener::imagevector::ImageVector;
use crate::gardener::shoot_client::{ShootClient, ShootClients, is_refusal};
use crate::gardener::shoot_nodes::{NodeLabels, ShootNodes};
use crate::shim::config::Catalog;
use crate::shim::node_events::{NodeFailure, NodeFailureEvents};
use crate::shim::plan::Plan;

/// How long nodes may stay unverified before the condition turns `False`: a rollout restarts
/// containerd node by node, within the configured budget.
pub const ROLLOUT_THRESHOLD: Duration = Duration::from_secs(30 * 60);

/// The last count of one namespace and what it was computed from.
struct Counted {
    /// A hash of the desired shims.
    shims: u64,
    /// The client whose nodes were counted (`ShootClient::source`).
    source: String,
    result: CheckResult,
}

/// Counts verified nodes per shim in the shoot.
pub struct VerifiedNodesCheck {
    catalog: Arc<Catalog>,
    images: Arc<ImageVector>,
    clients: ShootClients,
    nodes: ShootNodes,
    counted: Mutex<HashMap<String, Counted>>,
    events: NodeFailureEvents,
}

impl VerifiedNodesCheck {
    /// `user_agent` is sent to the shoots.
    pub fn new(catalog: Arc<Catalog>, images: Arc<ImageVector>, user_agent: &str) -> Self {
        VerifiedNodesCheck {
            catalog,
            images,
            clients: ShootClients::new(user_agent),
            nodes: ShootNodes::default(),
            counted: Mutex::default(),
            events: NodeFailureEvents::default(),
        }
    }

    fn counted(&self) -> MutexGuard<'_, HashMap<String, Counted>> {
        self.counted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The count for `shims` in the shoot of `namespace`, from memory while nothing changed.
    async fn count_nodes(
        &self,
        ctx: &CheckContext,
        namespace: &str,
        shims: &[DesiredShim],
    ) -> CheckResult {
        let shims_key = shims_hash(shims);
        let cluster = ctx.cluster.as_ref().map(|c| &c.metadata);
        // A refused watch is retried once with a client from a freshly read secret.
        for _attempt in 0..2 {
            let client = match self
                .clients
                .client_for(&ctx.client, namespace, cluster)
                .await
            {
                Ok(Some(client)) => client,
                Ok(None) => {
                    self.forget_nodes(namespace);
                    return CheckResult::Successful;
                }
                Err(e) => return CheckResult::failed(e.to_string()),
            };
            match self.nodes.state(namespace, &client) {
                NodeLabels::Failed => {
                    self.clients.refused(namespace);
                    self.forget_nodes(namespace);
                    continue;
                }
                NodeLabels::Unchanged => {
                    if let Some(last) = self.counted().get(namespace)
                        && last.shims == shims_key
                        && last.source == client.source
                    {
                        return last.result.clone();
                    }
                }
                NodeLabels::Changed => {}
            }
            return self
                .list_and_count(ctx, namespace, &client, shims, shims_key)
                .await;
        }
        CheckResult::failed("cannot watch the shoot's nodes")
    }

    async fn list_and_count(
        &self,
        ctx: &CheckContext,
        namespace: &str,
        client: &ShootClient,
        shims: &[DesiredShim],
        shims_key: u64,
    ) -> CheckResult {
        // Changes from now on count as new, even those during the list.
        self.nodes.mark_read(namespace);
        let listed = Api::<Node>::all(client.client.clone())
            .list_metadata(&ListParams::default())
            .await;
        let nodes = match listed {
            Ok(list) => list
                .items
                .into_iter()
                .map(|n| NodeView::from_metadata(n.name_any(), n.labels().clone(), n.annotations()))
                .collect::<Vec<_>>(),
            Err(e) => {
                if is_refusal(&e) {
                    self.clients.refused(namespace);
                    self.forget_nodes(namespace);
                }
                return CheckResult::failed(format!("cannot list the shoot's nodes: {e}"));
            }
        };
        let result = count(shims, &nodes);
        let new = self.events.unpublished(namespace, &failures(shims, &nodes));
        if !new.is_empty() {
            self.events
                .publish(&ctx.client, &client.client, &ctx.extension, &new)
                .await;
        }
        self.counted().insert(
            namespace.to_string(),
            Counted {
                shims: shims_key,
                source: client.source.clone(),
                result: result.clone(),
            },
        );
        result
    }

    fn forget_nodes(&self, namespace: &str) {
        self.nodes.forget(namespace);
        self.counted().remove(namespace);
    }
}

fn shims_hash(shims: &[DesiredShim]) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(shims)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Whether `shim` belongs on a node with these labels (its pools and node selector).
pub fn selects(shim: &DesiredShim, labels: &BTreeMap<String, String>) -> bool {
    let pool_ok = shim.worker_pools.is_empty()
        || labels
            .get(WORKER_POOL_LABEL)
            .is_some_and(|p| shim.worker_pools.iter().any(|w| w == p));
    pool_ok
        && shim
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
}

/// What the health check reads of a node: its name, labels and the failures its installer
/// published ([`FAILURES_ANNOTATION`]).
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub failures: BTreeMap<String, String>,
}

impl NodeView {
    pub fn from_metadata(
        name: String,
        labels: BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> NodeView {
        // An annotation that is not ours to parse counts as no failure rather than a failed
        // check: the labels still tell what is verified.
        let failures = annotations
            .get(FAILURES_ANNOTATION)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        NodeView {
            name,
            labels,
            failures,
        }
    }

    /// Why installing `shim` failed here, if it did.
    fn failure(&self, shim: &str) -> Option<&String> {
        self.failures
            .get(shim)
            .or_else(|| self.failures.get(NODE_FAILURE))
    }
}

/// Every shim that failed on a node it belongs on (pure).
pub fn failures(shims: &[DesiredShim], nodes: &[NodeView]) -> Vec<NodeFailure> {
    shims
        .iter()
        .flat_map(|shim| {
            nodes
                .iter()
                .filter(|node| selects(shim, &node.labels))
                .filter_map(|node| {
                    node.failure(&shim.name).map(|error| NodeFailure {
                        node: node.name.clone(),
                        shim: shim.name.clone(),
                        error: error.clone(),
                    })
                })
        })
        .collect()
}

/// The verified/failed/eligible counts per shim and the check result they make (pure). A node
/// where a shim failed makes the condition `False` at once, naming the node and the error: a
/// failed node halts the rollout, so waiting helps nobody.
pub fn count(shims: &[DesiredShim], nodes: &[NodeView]) -> CheckResult {
    let mut lagging = false;
    let mut parts = Vec::new();
    let mut failures = Vec::new();
    for shim in shims {
        let eligible: Vec<_> = nodes
            .iter()
            .filter(|node| selects(shim, &node.labels))
            .collect();
        // A node where a new version of the shim failed and was swapped back keeps its label
        // (the earlier version serves): it counts as failed, not verified, for this set.
        let verified = eligible
            .iter()
            .filter(|node| {
                node.labels
                    .get(&ready_label(&shim.handler))
                    .map(String::as_str)
                    == Some(READY_LABEL_VALUE)
                    && node.failure(&shim.name).is_none()
            })
            .count();
        let failed: Vec<String> = eligible
            .iter()
            .filter_map(|node| {
                node.failure(&shim.name)
                    .map(|error| format!("{} on {}: {error}", shim.name, node.name))
            })
            .collect();
        lagging |= verified < eligible.len();
        // A node is verified, failed, or still pending (its installer has not finished, or
        // the rollout has not reached it yet).
        let pending = eligible.len().saturating_sub(verified + failed.len());
        let mut part = format!(
            "{}: {verified}/{} nodes verified",
            shim.name,
            eligible.len()
        );
        if pending > 0 {
            part.push_str(&format!(", {pending} pending"));
        }
        if !failed.is_empty() {
            part.push_str(&format!(", {} failed", failed.len()));
        }
        parts.push(part);
        failures.extend(failed);
    }
    if parts.is_empty() {
        return CheckResult::Successful;
    }
    let detail = parts.join("; ");
    if !failures.is_empty() {
        CheckResult::unsuccessful(format!("{detail}. Failed: {}", failures.join("; ")))
    } else if lagging {
        CheckResult::progressing(detail, Some(ROLLOUT_THRESHOLD))
    } else {
        CheckResult::SuccessfulWithNote { note: detail }
    }
}

impl HealthCheck for VerifiedNodesCheck {
    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed("verified nodes per shim")
    }

    fn check<'a>(&'a self, ctx: &'a CheckContext) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            // An invalid configuration is the lifecycle's to report (with its code); without a
            // Shoot or a way into it, the counts are simply not known.
            let Some(shoot) = ctx.shoot.as_deref() else {
                return CheckResult::Successful;
            };
            let plan = Plan {
                catalog: &self.catalog,
                images: &self.images,
            };
            let Some(desired) = plan.health(&ctx.extension, shoot) else {
                return CheckResult::Successful;
            };
            let namespace = ctx.namespace();
            if desired.shims.is_empty() {
                self.release(&namespace);
                return CheckResult::Successful;
            }
            self.count_nodes(ctx, &namespace, &desired.shims).await
        })
    }

    fn changes(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.nodes.subscribe())
    }

    fn release(&self, namespace: &str) {
        self.forget_nodes(namespace);
        self.events.forget(namespace);
        self.clients.forget(namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shim(name: &str, pools: &[&str], selector: &[(&str, &str)]) -> DesiredShim {
        DesiredShim {
            oci_runtime: false,
            name: name.into(),
            handler: name.into(),
            runtime_type: format!("io.containerd.{name}.v1"),
            version: "v1".into(),
            binaries: vec![],
            options: Default::default(),
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            config_files: vec![],
            node_selector: selector
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            worker_pools: pools.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn node(pool: &str, extra: &[(&str, &str)]) -> NodeView {
        let mut labels: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.insert(WORKER_POOL_LABEL.into(), pool.into());
        NodeView {
            name: format!("node-{pool}"),
            labels,
            failures: BTreeMap::new(),
        }
    }

    #[test]
    fn counts_only_the_nodes_a_shim_belongs_on() {
        let shims = [
            shim("spin", &["a"], &[]),
            shim("wamr", &[], &[("wasm", "yes")]),
        ];
        let ready_spin = ("containerd-shim.extensions.gardener.cloud/spin", "ready");
        let nodes = [
            node("a", &[ready_spin]),
            node("a", &[]),
            node(
                "b",
                &[
                    ready_spin,
                    ("wasm", "yes"),
                    ("containerd-shim.extensions.gardener.cloud/wamr", "ready"),
                ],
            ),
        ];
        match count(&shims, &nodes) {
            CheckResult::Progressing {
                detail, threshold, ..
            } => {
                assert_eq!(
                    detail,
                    "spin: 1/2 nodes verified, 1 pending; wamr: 1/1 nodes verified"
                );
                assert_eq!(threshold, Some(ROLLOUT_THRESHOLD));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn all_verified_is_successful_with_the_counts() {
        let shims = [shim("spin", &["a"], &[])];
        let nodes = [
            node(
                "a",
                &[("containerd-shim.extensions.gardener.cloud/spin", "ready")],
            ),
            node("b", &[]),
        ];
        assert_eq!(
            count(&shims, &nodes),
            CheckResult::SuccessfulWithNote {
                note: "spin: 1/1 nodes verified".into()
            }
        );
        assert_eq!(count(&[], &nodes), CheckResult::Successful);
    }

    #[test]
    fn a_failed_node_is_named_with_its_error() {
        let shims = [shim("crun", &["a"], &[]), shim("spin", &["a"], &[])];
        let annotations = BTreeMap::from([(
            FAILURES_ANNOTATION.to_string(),
            r#"{"crun":"containerd did not start the sandbox"}"#.to_string(),
        )]);
        let failed = NodeView::from_metadata("node-1".into(), node("a", &[]).labels, &annotations);
        let verified = node(
            "a",
            &[
                ("containerd-shim.extensions.gardener.cloud/crun", "ready"),
                ("containerd-shim.extensions.gardener.cloud/spin", "ready"),
            ],
        );
        match count(&shims, &[failed.clone(), verified.clone()]) {
            CheckResult::Unsuccessful { detail, .. } => assert_eq!(
                detail,
                "crun: 1/2 nodes verified, 1 failed; spin: 1/2 nodes verified, 1 pending. \
                 Failed: crun on node-1: containerd did not start the sandbox"
            ),
            other => panic!("{other:?}"),
        }
        // A node whose new version was swapped back keeps its label, and counts as failed.
        let swapped_back = NodeView::from_metadata(
            "node-1".into(),
            node(
                "a",
                &[("containerd-shim.extensions.gardener.cloud/crun", "ready")],
            )
            .labels,
            &annotations,
        );
        match count(&shims[..1], &[swapped_back, verified.clone()]) {
            CheckResult::Unsuccessful { detail, .. } => assert_eq!(
                detail,
                "crun: 1/2 nodes verified, 1 failed. \
                 Failed: crun on node-1: containerd did not start the sandbox"
            ),
            other => panic!("{other:?}"),
        }
        // A failure of the node as a whole is every shim's there.
        let whole = NodeView::from_metadata(
            "node-1".into(),
            node("a", &[]).labels,
            &BTreeMap::from([(
                FAILURES_ANNOTATION.to_string(),
                r#"{"*":"CRI disabled"}"#.to_string(),
            )]),
        );
        match count(&shims, &[whole, verified.clone()]) {
            CheckResult::Unsuccessful { detail, .. } => {
                assert!(detail.contains("crun on node-1: CRI disabled"), "{detail}");
                assert!(detail.contains("spin on node-1: CRI disabled"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // A garbled annotation is no failure.
        let garbled = NodeView::from_metadata(
            "node-1".into(),
            node("a", &[]).labels,
            &BTreeMap::from([(FAILURES_ANNOTATION.to_string(), "nope".to_string())]),
        );
        assert!(matches!(
            count(&shims, &[garbled, verified]),
            CheckResult::Progressing { .. }
        ));
    }
}
