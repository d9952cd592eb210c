//! gardenlet's part in delivering an OperatingSystemConfig to gardener-node-agent, ported for
//! the tests (Gardener v1.149.3):
//!
//! 1. the pool's OSC of purpose `reconcile` in the shoot namespace of the seed, created or
//!    merge-patched with the operation and timestamp annotations and the pool label
//!    (`pkg/component/extensions/operatingsystemconfig/operatingsystemconfig.go`), where
//!    extensions' webhooks mutate it;
//! 2. the OSC as the seed then has it, reduced to what the agent reconciles (units, files, CRI
//!    config, in-place updates and the extension units and files of its status), encoded as
//!    YAML into the Secret `gardener-node-agent-<pool>-<hash>` in the shoot's kube-system: data
//!    key `osc.yaml`, annotation `checksum/data-script` = sha256 of exactly those bytes, labels
//!    `gardener.cloud/role=operating-system-config` and the pool
//!    (`.../original/components/nodeagent/secrets.go`);
//! 3. that Secret delivered into the shoot by the ManagedResource `shoot-gardener-node-agent`
//!    (one immutable secret per pool plus one with the bootstrap RBAC, origin `gardener`),
//!    which gardener-resource-manager applies (`pkg/gardenlet/operation/botanist/
//!    operatingsystemconfig.go`, `DeployManagedResourceForGardenerNodeAgent`).
//!
//! What this world does not have: an operating-system extension (nothing reconciles the OSC's
//! status, so gardenlet's wait for it is not ported), the agent's own unit and files in the OSC
//! (the nodes carry them from their start, hack/nodes/node-agent.sh) and `secretRef` files
//! (the tests inline or reference images).

use std::collections::BTreeMap;

use gardener_extension_containerd_shim::gardener::api::{
    ManagedResource, OPERATION_ANNOTATION, TIMESTAMP_ANNOTATION,
};
use gardener_extension_containerd_shim::gardener::managed_resource::{
    DesiredManagedResource, Manifest, pack,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::poll;

pub const POOL_LABEL: &str = "worker.gardener.cloud/pool";
pub const ROLE_LABEL: &str = "gardener.cloud/role";
pub const ROLE_OPERATING_SYSTEM_CONFIG: &str = "operating-system-config";
pub const MUTATED_BY_CONTROLPLANE_WEBHOOK_LABEL: &str =
    "provider.extensions.gardener.cloud/mutated-by-controlplane-webhook";
/// The Secret's data key the agent decodes.
pub const OSC_DATA_KEY: &str = "osc.yaml";
/// sha256 of the Secret's `osc.yaml`, written by gardenlet.
pub const DOWNLOADED_CHECKSUM_ANNOTATION: &str = "checksum/data-script";
/// The checksum of the OSC the agent applied last, on its Node.
pub const APPLIED_CHECKSUM_ANNOTATION: &str = "checksum/cloud-config-data";
pub const MANAGED_RESOURCE: &str = "shoot-gardener-node-agent";
/// Label gardenlet puts on the ManagedResource's secrets.
pub const MANAGED_RESOURCE_SECRET_LABEL: &str = "managed-resource";
pub const PURPOSE_RECONCILE: &str = "reconcile";
/// Where runtimes' binaries go: the agent puts it first on containerd's `PATH`.
pub const CONTAINER_RUNTIMES_BIN: &str = "/var/bin/containerruntimes";

/// `extensions.gardener.cloud/v1alpha1` `OperatingSystemConfig.spec`, the fields gardenlet
/// and the agent use.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "OperatingSystemConfig",
    plural = "operatingsystemconfigs",
    namespaced,
    status = "OperatingSystemConfigStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystemConfigSpec {
    /// The operating system's extension type (the worker's image name).
    #[serde(rename = "type")]
    pub type_: String,
    pub purpose: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_config: Option<CriConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystemConfigStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_units: Vec<Unit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_files: Vec<File>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_ins: Vec<DropIn>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_paths: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DropIn {
    pub name: String,
    pub content: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<u32>,
    pub content: FileContent,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<InlineContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<ImageRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InlineContent {
    pub encoding: String,
    pub data: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRef {
    pub image: String,
    pub file_path_in_image: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriConfig {
    pub name: String,
    /// `systemd` or `cgroupfs`: the agent sets runc's `SystemdCgroup` from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<ContainerdConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerdConfig {
    pub sandbox_image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfig>,
}

/// One patch of containerd's config: `path` below `plugins`, `op` `add` (the default: merge
/// `values` into the table) or `remove` (delete the table).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    pub path: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Value>,
}

/// The path of a CRI runtime handler's table as extensions write it (containerd 1.x's plugin;
/// the agent translates it for config versions 3 and 4).
pub fn runtime_plugin_path(handler: &str) -> Vec<String> {
    [
        "io.containerd.grpc.v1.cri",
        "containerd",
        "runtimes",
        handler,
    ]
    .map(String::from)
    .to_vec()
}

/// The pool's OSC key, as the control plane names the agent's Secret (`NODE_AGENT_SECRET`).
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub secret_name: String,
}

impl Pool {
    /// The seed object's name: the key with the purpose's suffix.
    pub fn osc_name(&self) -> String {
        format!("{}-original", self.secret_name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("encoding the OperatingSystemConfig for the node agent: {0}")]
    Encode(String),
    #[error("packing the ManagedResource secret: {0}")]
    Pack(String),
}

/// What the agent gets: a fresh OSC with only the fields it reconciles (gardenlet's
/// `OperatingSystemConfigSecret`), encoded as the API machinery encodes it to YAML (from JSON,
/// keys sorted; `type` and `purpose` empty, `metadata.creationTimestamp` null).
pub fn node_agent_osc_yaml(osc: &OperatingSystemConfig) -> Result<String, Error> {
    let status = osc.status.clone().unwrap_or_default();
    let reduced = serde_json::json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {"creationTimestamp": null},
        "spec": OperatingSystemConfigSpec {
            type_: String::new(),
            purpose: String::new(),
            cri_config: osc.spec.cri_config.clone(),
            units: osc.spec.units.clone(),
            files: osc.spec.files.clone(),
            in_place_updates: osc.spec.in_place_updates.clone(),
        },
        "status": OperatingSystemConfigStatus {
            extension_units: status.extension_units,
            extension_files: status.extension_files,
            in_place_updates: status.in_place_updates,
        },
    });
    serde_saphyr::to_string(&reduced).map_err(|e| Error::Encode(e.to_string()))
}

/// The shoot Secret the agent reads the pool's OSC from.
pub fn node_agent_secret(osc: &OperatingSystemConfig, pool: &Pool) -> Result<Secret, Error> {
    let raw = node_agent_osc_yaml(osc)?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(pool.secret_name.clone()),
            namespace: Some("kube-system".into()),
            annotations: Some(BTreeMap::from([(
                DOWNLOADED_CHECKSUM_ANNOTATION.to_string(),
                hex::encode(Sha256::digest(raw.as_bytes())),
            )])),
            labels: Some(BTreeMap::from([
                (
                    ROLE_LABEL.to_string(),
                    ROLE_OPERATING_SYSTEM_CONFIG.to_string(),
                ),
                (POOL_LABEL.to_string(), pool.name.clone()),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            OSC_DATA_KEY.to_string(),
            ByteString(raw.into_bytes()),
        )])),
        ..Default::default()
    })
}

/// The bindings that let bootstrap tokens request node client certificates (gardenlet's
/// `shoot-gardener-node-agent-rbac`).
fn bootstrap_rbac() -> Vec<ClusterRoleBinding> {
    [
        ("system:node-bootstrapper", "system:bootstrappers"),
        (
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers",
        ),
        (
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ]
    .map(|(name, group)| ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: group.into(),
            ..Default::default()
        }]),
    })
    .to_vec()
}

/// gardenlet for one shoot namespace of the seed and one worker pool.
pub struct Gardenlet {
    pub seed: Client,
    pub namespace: String,
    pub pool: Pool,
}

impl Gardenlet {
    fn oscs(&self) -> Api<OperatingSystemConfig> {
        Api::namespaced(self.seed.clone(), &self.namespace)
    }

    /// Step 1: creates or merge-patches the pool's OSC in the seed with this spec's units, files
    /// and CRI config; returns the object as the seed has it after admission (extensions'
    /// webhooks included).
    pub async fn deploy_osc(&self, spec: OperatingSystemConfigSpec) -> OperatingSystemConfig {
        let name = self.pool.osc_name();
        let now = jiff::Timestamp::now().to_string();
        let spec = OperatingSystemConfigSpec {
            purpose: PURPOSE_RECONCILE.into(),
            ..spec
        };
        let body = |spec: Value| {
            serde_json::json!({
                "apiVersion": "extensions.gardener.cloud/v1alpha1",
                "kind": "OperatingSystemConfig",
                "metadata": {
                    "name": name,
                    "annotations": {OPERATION_ANNOTATION: "reconcile", TIMESTAMP_ANNOTATION: now},
                    "labels": {POOL_LABEL: self.pool.name, MUTATED_BY_CONTROLPLANE_WEBHOOK_LABEL: "true"},
                },
                "spec": spec,
            })
        };
        let mut spec_value = serde_json::to_value(&spec).expect("an OSC spec as JSON");
        let api = self.oscs();
        match api.get_opt(&name).await.expect("get the OSC") {
            None => {
                let osc: OperatingSystemConfig =
                    serde_json::from_value(body(spec_value)).expect("an OSC from its own spec");
                api.create(&PostParams::default(), &osc)
                    .await
                    .unwrap_or_else(|e| panic!("gardenlet-like create of OSC {name}: {e}"))
            }
            Some(_) => {
                // gardenlet's merge patch replaces these wholesale: what the spec no longer has
                // is deleted (null), not kept.
                if let Value::Object(map) = &mut spec_value {
                    for key in ["criConfig", "units", "files", "inPlaceUpdates"] {
                        map.entry(key).or_insert(Value::Null);
                    }
                }
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&body(spec_value)),
                )
                .await
                .unwrap_or_else(|e| panic!("gardenlet-like patch of OSC {name}: {e}"))
            }
        }
    }

    /// Steps 2 and 3: the seed's OSC into the shoot Secret, through the ManagedResource.
    /// Returns the checksum the agent will report once it applied it.
    pub async fn deploy_node_agent_secret(&self, osc: &OperatingSystemConfig) -> String {
        let secret = node_agent_secret(osc, &self.pool).expect("the node agent's Secret");
        let checksum = secret
            .annotations()
            .get(DOWNLOADED_CHECKSUM_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let per_pool = pack([Manifest::from_resource(&secret).expect("manifest")])
            .map_err(|e| Error::Pack(e.to_string()))
            .expect("pack the pool's secret");
        let rbac = pack(
            bootstrap_rbac()
                .iter()
                .map(|b| Manifest::from_resource(b).expect("manifest")),
        )
        .map_err(|e| Error::Pack(e.to_string()))
        .expect("pack the RBAC secret");
        let secrets: Api<Secret> = Api::namespaced(self.seed.clone(), &self.namespace);
        let mut refs = Vec::new();
        for (data, base) in [
            (per_pool, format!("{MANAGED_RESOURCE}-{}", self.pool.name)),
            (rbac, format!("{MANAGED_RESOURCE}-rbac")),
        ] {
            let mut object = data.to_secret(&self.namespace, &base);
            object.labels_mut().insert(
                MANAGED_RESOURCE_SECRET_LABEL.to_string(),
                MANAGED_RESOURCE.to_string(),
            );
            let name = object.name_any();
            match secrets.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                // Immutable and named by content: an existing one holds the same data.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("create secret {name}: {e}"),
            }
            refs.push(name);
        }
        let mut desired = DesiredManagedResource::for_shoot("gardener", false, &refs[0]);
        desired.spec.secret_refs.extend(
            refs[1..]
                .iter()
                .map(|name| gardener_extension_containerd_shim::gardener::api::managed_resource::LocalObjectReference {
                    name: name.clone(),
                }),
        );
        let mrs: Api<ManagedResource> = Api::namespaced(self.seed.clone(), &self.namespace);
        match mrs.get_opt(MANAGED_RESOURCE).await.expect("get the MR") {
            None => {
                mrs.create(
                    &PostParams::default(),
                    &desired.new_object(&self.namespace, MANAGED_RESOURCE),
                )
                .await
                .expect("create the node agent's ManagedResource");
            }
            Some(existing) => {
                if let Some(merged) = desired.merge_into(&existing) {
                    mrs.replace(MANAGED_RESOURCE, &PostParams::default(), &merged)
                        .await
                        .expect("update the node agent's ManagedResource");
                }
            }
        }
        checksum
    }

    /// Both steps: what gardenlet does on a shoot reconcile for this pool. Returns the OSC as
    /// the seed has it and the checksum of what the agent gets.
    pub async fn reconcile(
        &self,
        spec: OperatingSystemConfigSpec,
    ) -> (OperatingSystemConfig, String) {
        let osc = self.deploy_osc(spec).await;
        let checksum = self.deploy_node_agent_secret(&osc).await;
        (osc, checksum)
    }

    /// Deletes the node agent's ManagedResources of other shoot namespaces (earlier tests'),
    /// and waits until gardener-resource-manager finished deleting them: there is one pool
    /// Secret in the one shoot, and two ManagedResources would fight over it. The agents keep
    /// what they applied; they ignore a deleted Secret.
    pub async fn remove_other_managed_resources(&self) {
        let all: Api<ManagedResource> = Api::all(self.seed.clone());
        let others = || async {
            all.list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())
                .map(|list| {
                    list.into_iter()
                        .filter(|mr| mr.name_any() == MANAGED_RESOURCE)
                        .filter_map(|mr| mr.namespace())
                        .filter(|ns| *ns != self.namespace)
                        .collect::<Vec<_>>()
                })
        };
        for namespace in others().await.expect("list ManagedResources") {
            let api: Api<ManagedResource> = Api::namespaced(self.seed.clone(), &namespace);
            let _ = api.delete(MANAGED_RESOURCE, &DeleteParams::default()).await;
        }
        poll::until(
            "earlier tests' node agent ManagedResources deleted",
            poll::DEFAULT_TIMEOUT,
            || async {
                let left = others().await?;
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{left:?}"))
                }
            },
        )
        .await;
    }
}

/// Polls until every named node's agent reports this checksum as applied.
pub async fn wait_applied(
    shoot: &Client,
    nodes: &[String],
    checksum: &str,
    timeout: std::time::Duration,
) {
    let api: Api<Node> = Api::all(shoot.clone());
    poll::until(
        &format!("gardener-node-agent to apply OSC {checksum} on {nodes:?}"),
        timeout,
        || async {
            let mut behind = Vec::new();
            for name in nodes {
                let node = api.get(name).await.map_err(|e| e.to_string())?;
                let applied = node.annotations().get(APPLIED_CHECKSUM_ANNOTATION).cloned();
                if applied.as_deref() != Some(checksum) {
                    behind.push(format!("{name}: {applied:?}"));
                }
            }
            if behind.is_empty() {
                Ok(())
            } else {
                Err(behind.join(", "))
            }
        },
    )
    .await;
}
