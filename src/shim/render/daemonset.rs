//! The installer DaemonSets (one per worker pool) and the ConfigMaps with their desired sets.
//!
//! Binaries from images reach the node without a registry client on the node: an init container
//! copies the installer binary into a shared emptyDir, and one init container per shim image
//! runs that (static) binary inside the shim's image to copy the shim's files next to it. This
//! works for any image, even one built `FROM scratch`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::api::core::v1::{
    Affinity, AppArmorProfile, Capabilities, ConfigMap, ConfigMapProjection, ConfigMapVolumeSource,
    Container, DownwardAPIProjection, DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ExecAction, HostPathVolumeSource, KeyToPath, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    Probe, ProjectedVolumeSource, ResourceRequirements, SeccompProfile, SecurityContext,
    ServiceAccountTokenProjection, Toleration, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::desired_shims::{
    BinarySource, CONFIG_MAP_KEY, DESIRED_SHA256_ENV, Delivery, DesiredShims,
};
use crate::gardener::api::cluster::WORKER_POOL_LABEL;

use super::names::{self, INSTALLER, NAMESPACE, paths};

/// The name of the ConfigMap holding one desired set: named by its content, so each set is
/// an object of its own that never changes.
pub fn config_map_name(desired_json: &str) -> String {
    format!("{INSTALLER}-{}", &desired_hash(desired_json)[..10])
}

/// The ConfigMap the installer reads its desired set from: immutable and named by its
/// content. A new set is a new ConfigMap that only a new pod template refers to, so it reaches
/// a node only when the DaemonSet rollout replaces that node's pod (one `maxUnavailable` step
/// at a time, halted by a node that does not become ready). The old one stays while pods use
/// it and is garbage-collected afterwards.
pub fn config_map(desired_json: &str) -> ConfigMap {
    let mut labels = names::labels("installer");
    labels.insert(
        names::GARBAGE_COLLECTABLE_LABEL.to_string(),
        "true".to_string(),
    );
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(desired_json)),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            CONFIG_MAP_KEY.to_string(),
            desired_json.to_string(),
        )])),
        immutable: Some(true),
        ..Default::default()
    }
}

/// Everything a pool's DaemonSet depends on.
pub struct DaemonSetInput<'a> {
    /// The shims of this pool only: its nodes pull only their payload images.
    pub desired: &'a DesiredShims,
    /// The serialised desired set (the ConfigMap's content), hashed into the pod template.
    pub desired_json: &'a str,
    pub installer_image: &'a str,
    /// The worker pool (its nodes run containerd). Every containerd pool has a DaemonSet, also
    /// where no shim is selected, so a node leaving a selection is cleaned up.
    pub pool: &'a str,
    pub max_unavailable: &'a IntOrString,
}

fn quantity(s: &str) -> Quantity {
    Quantity(s.to_string())
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn host_path_volume(name: &str, path: &str, type_: &str) -> Volume {
    Volume {
        name: name.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_string(),
            type_: Some(type_.to_string()),
        }),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(quantity("1Gi")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Init containers only copy files: no capabilities at all.
fn unprivileged() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        // Shim images often keep their files readable by root only.
        run_as_user: Some(0),
        run_as_non_root: Some(false),
        ..Default::default()
    }
}

/// The installer container: root without any capability but the three it needs (see
/// docs/installer.md): SYS_ADMIN and SYS_CHROOT to enter the host's mount namespace (`setns`
/// on a mount namespace requires both) and run the host's `systemctl` and `containerd`,
/// SYS_PTRACE to open `/proc/1/ns/mnt` and to read `/proc/<pid>/exe` of running shims before
/// garbage-collecting binaries. Entering another process's namespace is a ptrace-class access
/// that the default AppArmor profile denies.
fn installer_security() -> SecurityContext {
    SecurityContext {
        privileged: Some(false),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: Some(vec![
                "SYS_ADMIN".to_string(),
                "SYS_CHROOT".to_string(),
                "SYS_PTRACE".to_string(),
            ]),
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        app_armor_profile: Some(AppArmorProfile {
            type_: "Unconfined".to_string(),
            localhost_profile: None,
        }),
        run_as_user: Some(0),
        run_as_non_root: Some(false),
        ..Default::default()
    }
}

fn resources(cpu: &str, memory: &str, memory_limit: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), quantity(cpu)),
            ("memory".to_string(), quantity(memory)),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            quantity(memory_limit),
        )])),
        ..Default::default()
    }
}

/// The image files each shim needs, grouped by image: (shim, image) -> [(path in image, name)].
/// None where gardener-node-agent delivers the files: the installer only verifies there.
fn image_files(desired: &DesiredShims) -> BTreeMap<(String, String), Vec<(String, String)>> {
    let mut files: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    if desired.delivery == Delivery::Osc {
        return files;
    }
    for shim in &desired.shims {
        for binary in &shim.binaries {
            if let BinarySource::Image { image, path, .. } = &binary.source {
                files
                    .entry((shim.name.clone(), image.clone()))
                    .or_default()
                    .push((path.clone(), binary.name.clone()));
            }
        }
    }
    files
}

fn init_containers(input: &DaemonSetInput<'_>) -> Vec<Container> {
    let staging = mount("staging", paths::STAGING_DIR, false);
    let mut containers = vec![Container {
        name: "copy-installer".to_string(),
        image: Some(input.installer_image.to_string()),
        command: Some(vec![
            paths::INSTALLER_BINARY.to_string(),
            "copy-self".to_string(),
            "--to".to_string(),
            paths::STAGED_INSTALLER.to_string(),
        ]),
        volume_mounts: Some(vec![staging.clone()]),
        security_context: Some(unprivileged()),
        resources: Some(resources("10m", "16Mi", "64Mi")),
        ..Default::default()
    }];
    for (index, ((shim, image), files)) in image_files(input.desired).into_iter().enumerate() {
        let mut command = vec![
            paths::STAGED_INSTALLER.to_string(),
            "stage".to_string(),
            "--to".to_string(),
            format!("{}/{shim}", paths::STAGING_DIR),
        ];
        command.extend(
            files
                .into_iter()
                .map(|(path, name)| format!("{path}={name}")),
        );
        containers.push(Container {
            // Container names are DNS labels; shim names are too, but an index keeps the name
            // unique and short when one shim needs several images.
            name: format!("stage-{index}-{}", truncate(&shim, 40)),
            image: Some(image),
            command: Some(command),
            volume_mounts: Some(vec![staging.clone()]),
            security_context: Some(unprivileged()),
            resources: Some(resources("10m", "16Mi", "64Mi")),
            ..Default::default()
        });
    }
    containers
}

fn truncate(s: &str, max: usize) -> &str {
    s.get(..max).unwrap_or(s).trim_end_matches('-')
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                api_version: None,
            }),
            ..Default::default()
        }),
        value: None,
    }
}

fn installer_container(input: &DaemonSetInput<'_>) -> Container {
    Container {
        name: "installer".to_string(),
        image: Some(input.installer_image.to_string()),
        command: Some(vec![
            paths::INSTALLER_BINARY.to_string(),
            "daemon".to_string(),
        ]),
        env: Some(vec![
            env_field("NODE_NAME", "spec.nodeName"),
            env_field("POD_NAMESPACE", "metadata.namespace"),
            env_field("POD_NAME", "metadata.name"),
            EnvVar {
                name: DESIRED_SHA256_ENV.to_string(),
                value: Some(desired_hash(input.desired_json)),
                value_from: None,
            },
        ]),
        volume_mounts: Some(vec![
            mount("desired", paths::DESIRED_DIR, true),
            mount("staging", paths::STAGING_DIR, true),
            mount("status", paths::STATUS_DIR, false),
            mount(
                "host-containerd",
                &format!("{}{}", paths::HOST_ROOT, paths::HOST_CONTAINERD_DIR),
                false,
            ),
            mount(
                "host-state",
                &format!("{}{}", paths::HOST_ROOT, paths::HOST_STATE_DIR),
                false,
            ),
            mount(API_ACCESS, SERVICE_ACCOUNT_DIR, true),
        ]),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    paths::INSTALLER_BINARY.to_string(),
                    "probe".to_string(),
                ]),
            }),
            // The DaemonSet moves on to the next node when this pod turns ready, which the
            // kubelet learns only at a probe: the period paces the rollout. The probe reads a
            // file in memory.
            period_seconds: Some(2),
            timeout_seconds: Some(5),
            failure_threshold: Some(1),
            ..Default::default()
        }),
        security_context: Some(installer_security()),
        resources: Some(resources("10m", "32Mi", "256Mi")),
        ..Default::default()
    }
}

fn volumes(desired_json: &str) -> Vec<Volume> {
    vec![
        Volume {
            name: "desired".to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(desired_json),
                ..Default::default()
            }),
            ..Default::default()
        },
        empty_dir("staging"),
        Volume {
            name: "status".to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(quantity("1Mi")),
            }),
            ..Default::default()
        },
        host_path_volume(
            "host-containerd",
            paths::HOST_CONTAINERD_DIR,
            "DirectoryOrCreate",
        ),
        host_path_volume("host-state", paths::HOST_STATE_DIR, "DirectoryOrCreate"),
        api_access(),
    ]
}

/// The volume of the installer's API access, mounted into the installer container only.
const API_ACCESS: &str = "kube-api-access";
/// Where Kubernetes clients look for the in-cluster credentials.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the ServiceAccount admission plugin would mount into every container, as a volume of
/// its own: a bound token the kubelet renews (bound to the pod and thereby to its node, which the
/// node admission policy relies on), the cluster's CA and the namespace.
fn api_access() -> Volume {
    Volume {
        name: API_ACCESS.to_string(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_string(),
                        expiration_seconds: Some(3607),
                        audience: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_string(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_string(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_string()),
                                field_path: "metadata.namespace".to_string(),
                            }),
                            mode: None,
                            resource_field_ref: None,
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}

/// sha256 hex of the desired set.
pub fn desired_hash(desired_json: &str) -> String {
    hex::encode(Sha256::digest(desired_json.as_bytes()))
}

// Stays long: mostly one DaemonSet literal, kept whole so it reads like the manifest it renders.
pub fn daemon_set(input: &DaemonSetInput<'_>) -> DaemonSet {
    let mut template_labels = names::labels("installer");
    template_labels.extend(names::selector(input.pool));
    let reference = names::reference_annotation(&config_map_name(input.desired_json));
    let template_annotations = BTreeMap::from([
        (
            names::DESIRED_HASH_ANNOTATION.to_string(),
            desired_hash(input.desired_json),
        ),
        reference.clone(),
    ]);
    let affinity = Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: WORKER_POOL_LABEL.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![input.pool.to_string()]),
                    }]),
                    match_fields: None,
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut labels = names::labels("installer");
    labels.insert(names::POOL_LABEL.to_string(), input.pool.to_string());
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(names::daemon_set(input.pool)),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([reference])),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(names::selector(input.pool)),
                match_expressions: None,
            },
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_unavailable: Some(input.max_unavailable.clone()),
                    max_surge: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(2),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template_labels),
                    annotations: Some(template_annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(INSTALLER.to_string()),
                    // The token is mounted into the installer container alone (see
                    // `api_access`): the init containers run payload images, which have no
                    // business with the API server.
                    automount_service_account_token: Some(false),
                    priority_class_name: Some(names::PRIORITY_CLASS.to_string()),
                    // Entering PID 1's mount namespace and finding running shims needs the host's
                    // PID namespace; nothing else of the host's is shared.
                    host_pid: Some(true),
                    affinity: Some(affinity),
                    // Every worker node: a node's taints must not keep its runtime unconfigured.
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".to_string()),
                        ..Default::default()
                    }]),
                    termination_grace_period_seconds: Some(30),
                    init_containers: Some(init_containers(input)),
                    containers: vec![installer_container(input)],
                    volumes: Some(volumes(input.desired_json)),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}
