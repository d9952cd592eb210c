//! The desired shim set: the one data contract between the seed controller and the node
//! installer.
//!
//! The controller renders it (from a validated providerConfig and the catalog) into a ConfigMap
//! of the shoot bundle; the installer reads the mounted file on every node. Both sides depend
//! on this module and on nothing of each other, so the installer never links the controller's
//! Kubernetes-facing code and the controller never reasons about host files.
//!
//! The format is JSON with a schema number, and the schema policy (docs/operations.md,
//! "Upgrades") is what lets the controller and the installers of neighbouring releases run
//! together:
//!
//! - Any change of the written format (a field added, renamed or removed, a new enum value) is
//!   a new schema number: both sides refuse unknown fields, so a change within one number would
//!   stop installers of the release before at the first document of the new shape.
//! - A controller writes one schema, [`SCHEMA`]; an installer reads that one and the one before
//!   ([`OLDEST_READ_SCHEMA`], "N-1"), so that a controller rolled back by one release still
//!   drives the newer installers.
//! - Every schema a release wrote is kept as golden documents in `test/golden/desired-set/`,
//!   pinned by digest: a test refuses a change to them and checks which of them this build
//!   reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The schema this build writes and the newest it reads.
pub const SCHEMA: u32 = 2;

/// The oldest schema this build reads: the one before [`SCHEMA`] ("N-1"), or 1.
pub const OLDEST_READ_SCHEMA: u32 = if SCHEMA > 1 { SCHEMA - 1 } else { 1 };

/// ConfigMap key (and file name in the installer's mount) that holds the serialised set.
pub const CONFIG_MAP_KEY: &str = "desired-shims.json";

/// Environment variable of the installer container: the sha256 of the desired set its pod
/// template was rendered with. The installer refuses a mounted set with another digest, so a
/// change reaches a node only through the DaemonSet rollout that replaces the node's pod.
pub const DESIRED_SHA256_ENV: &str = "DESIRED_SHIMS_SHA256";

/// Label prefix of the per-handler readiness label the installer sets on verified nodes and
/// that each RuntimeClass selects on: `containerd-shim.extensions.gardener.cloud/<handler>=ready`.
pub const READY_LABEL_PREFIX: &str = "containerd-shim.extensions.gardener.cloud/";

/// Value of the readiness label.
pub const READY_LABEL_VALUE: &str = "ready";

/// Annotation on a Node where installing failed: a JSON object from shim name to what went
/// wrong (`*` for the node as a whole). The installer sets it after every run that fails and
/// removes it once the node converges; the extension's health check reports it, so a shoot
/// owner sees which shim failed on which node without node access.
pub const FAILURES_ANNOTATION: &str = "containerd-shim.extensions.gardener.cloud/failures";

/// The key of [`FAILURES_ANNOTATION`] for a failure that is not one shim's.
pub const NODE_FAILURE: &str = "*";

/// Failure messages in the annotation are cut to this many characters (a node object is not
/// a log).
pub const FAILURE_MESSAGE_MAX: usize = 400;

/// The readiness label key for a handler.
pub fn ready_label(handler: &str) -> String {
    format!("{READY_LABEL_PREFIX}{handler}")
}

/// The restart-budget Lease of slot `i`, in the installer's namespace: at most
/// `rollout.maxConcurrentRestarts` nodes hold a slot, and only a holder restarts containerd.
pub fn restart_lease(slot: u32) -> String {
    format!("containerd-shim-restart-{slot}")
}

/// Paths inside the installer pod. The bundle mounts volumes there and the installer reads them
/// as its defaults, so both sides use these constants.
pub mod pod_paths {
    /// The ConfigMap with the desired set.
    pub const DESIRED_DIR: &str = "/etc/containerd-shim-installer";
    /// The host's root file system parts the installer touches are mounted below this.
    pub const HOST_ROOT: &str = "/host";
    /// Host directory with the installer's state, versioned binaries and config files.
    pub const HOST_STATE_DIR: &str = "/var/lib/containerd-shim-installer";
    /// Host directory with containerd's configuration.
    pub const HOST_CONTAINERD_DIR: &str = "/etc/containerd";
    /// emptyDir shared by the init containers that stage binaries and the installer.
    pub const STAGING_DIR: &str = "/staging";
    /// The installer binary copied into the staging volume, runnable in any image.
    pub const STAGED_INSTALLER: &str = "/staging/bin/containerd-shim-installer";
    /// emptyDir with the node's verification status, read by the readiness probe.
    pub const STATUS_DIR: &str = "/run/containerd-shim-installer";
    /// The installer binary in its own image.
    pub const INSTALLER_BINARY: &str = "/containerd-shim-installer";
}

/// Everything one node installer needs to converge its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DesiredShims {
    /// Format version; see [`SCHEMA`].
    pub schema: u32,
    /// Whether the installer installs the shims below or removes everything it ever installed.
    pub mode: Mode,
    /// Who puts the shims on the node (schema 2; schema 1 documents mean [`Delivery::DaemonSet`]).
    #[serde(default)]
    pub delivery: Delivery,
    /// The shims, in a stable order (by name).
    #[serde(default)]
    pub shims: Vec<DesiredShim>,
    /// How the installer paces containerd restarts across the cluster.
    pub rollout: Rollout,
}

/// Install the listed shims, or uninstall everything (the extension is being deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum Mode {
    Install,
    Uninstall,
}

/// Who installs the shims' binaries and containerd entries on a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Delivery {
    /// The installer DaemonSet: it writes the files and the config, restarts containerd within
    /// the restart budget, verifies, and labels the node.
    #[default]
    DaemonSet,
    /// gardener-node-agent, from the worker pool's OperatingSystemConfig: the installer only
    /// verifies what the agent applied and labels the node; it writes nothing on the host.
    Osc,
}

/// Cluster-wide pacing of containerd restarts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// At most this many nodes restart containerd at the same time (Lease slots).
    pub max_concurrent_restarts: u32,
}

/// One shim as a node installs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DesiredShim {
    /// Unique name of the shim within the set (DNS-1123 label); names the versioned directory.
    pub name: String,
    /// containerd runtime handler: the `runtimes.<handler>` table key and `RuntimeClass.handler`.
    pub handler: String,
    /// containerd `runtime_type`, `io.containerd.<name>.<version>`.
    pub runtime_type: String,
    /// Version of the shim binaries; part of the versioned directory name.
    pub version: String,
    /// The binaries to put on the node. The first one is the shim that containerd starts
    /// (`runtime_path`), or, with `oci_runtime`, the OCI runtime that containerd's own runc
    /// shim runs (`options.BinaryName`).
    pub binaries: Vec<Binary>,
    /// The first binary is an OCI runtime (crun, youki, ...) for containerd's own runc shim:
    /// `runtime_type` is `io.containerd.runc.v2`, and containerd starts the shim it ships.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oci_runtime: bool,
    /// The `runtimes.<handler>.options` table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, OptionValue>,
    /// Pod annotations containerd passes through to the shim (`pod_annotations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_annotations: Vec<String>,
    /// containerd `privileged_without_host_devices` (VM-based runtimes set it).
    #[serde(default)]
    pub privileged_without_host_devices: bool,
    /// Shim-specific configuration files the installer writes into the shim's own directory on
    /// the host. An option value may refer to such a file with `{{configDir}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_files: Vec<ConfigFile>,
    /// Only nodes whose labels contain all of these get the shim (the shoot owner's node
    /// selector). Empty selects every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Only nodes of one of these worker pools (label `worker.gardener.cloud/pool`) get the
    /// shim; a node must match both this and `node_selector`. Empty selects every pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_pools: Vec<String>,
}

/// gardener-node-agent creates this directory and puts it first on containerd's `PATH`; with
/// `delivery: osc` each shim's files go below `<dir>/<shim name>/`.
pub const NODE_AGENT_RUNTIMES_DIR: &str = "/var/bin/containerruntimes";

/// The directory below which the extension's OperatingSystemConfig webhook has
/// gardener-node-agent put the files of the shim `name` (ends in `/`). A runtime table of the
/// shim's handler that points below it is the extension's own delivery, not someone else's.
pub fn node_agent_shim_dir(name: &str) -> String {
    format!("{NODE_AGENT_RUNTIMES_DIR}/{name}/")
}

/// Placeholder in option values and config files that the installer replaces with the host
/// directory of the shim's active version (for example a gVisor `ConfigPath`).
pub const CONFIG_DIR_PLACEHOLDER: &str = "{{configDir}}";

/// Placeholder that the installer replaces with the host directory of the shim's binaries
/// (for example gVisor's `binary_name` pointing at `runsc`).
pub const BIN_DIR_PLACEHOLDER: &str = "{{binDir}}";

/// One executable of a shim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binary {
    /// File name on the host, e.g. `containerd-shim-spin-v2`.
    pub name: String,
    /// Where the installer gets it.
    pub source: BinarySource,
}

/// Where a binary comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum BinarySource {
    /// Staged by an init container of the installer pod from an OCI image: the file is found at
    /// `<staging dir>/<shim name>/<binary name>`. `sha256` is checked when present.
    Image {
        /// The image reference (informational on the node; the pod spec pulls it).
        image: String,
        /// Absolute path of the file inside the image.
        path: String,
        /// Optional expected digests per architecture.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        sha256: BTreeMap<Arch, String>,
    },
    /// Downloaded over HTTPS by the installer and checked against the sha256 of the node's
    /// architecture.
    Url {
        /// Per-architecture download.
        artifacts: BTreeMap<Arch, UrlArtifact>,
    },
}

/// A downloadable file for one architecture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlArtifact {
    /// An `https://` URL.
    pub url: String,
    /// Lower-case hex sha256 of the file.
    pub sha256: String,
}

/// Node CPU architectures (the `kubernetes.io/arch` label values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// The `kubernetes.io/arch` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// Parses a `kubernetes.io/arch` label value.
    pub fn from_label(value: &str) -> Option<Arch> {
        match value {
            "amd64" => Some(Arch::Amd64),
            "arm64" => Some(Arch::Arm64),
            _ => None,
        }
    }
}

/// A value in a runtime's `options` table. containerd decodes options into the shim's typed
/// option struct, so the TOML type matters: `SystemdCgroup = true`, not `"true"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OptionValue {
    Bool(bool),
    Int(i64),
    String(String),
}

/// A file the installer writes for a shim (e.g. gVisor's `runsc.toml`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFile {
    /// File name (no directories) inside the shim's config directory.
    pub name: String,
    /// File content; placeholders are replaced as for option values.
    pub content: String,
}

impl DesiredShims {
    /// The set that removes everything: what the controller renders while the extension is
    /// being deleted.
    pub fn uninstall(rollout: Rollout) -> Self {
        DesiredShims {
            schema: SCHEMA,
            mode: Mode::Uninstall,
            // Whatever delivered the shims, the installer removes what it installed (nothing,
            // where the node agent delivered them) and every readiness label.
            delivery: Delivery::DaemonSet,
            shims: Vec::new(),
            rollout,
        }
    }

    /// The set as the nodes of one worker pool need it: the shims whose pools include it (or
    /// that name no pool). The installer still applies each shim's node selector.
    pub fn for_pool(&self, pool: &str) -> DesiredShims {
        DesiredShims {
            shims: self
                .shims
                .iter()
                .filter(|s| s.worker_pools.is_empty() || s.worker_pools.iter().any(|p| p == pool))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// Serialises to the ConfigMap value: stable (sorted maps, shims in the given order) so that
    /// equal sets give byte-equal output and the pod-template hash only changes on real change.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses the ConfigMap value, rejecting schemas outside
    /// [`OLDEST_READ_SCHEMA`]`..=`[`SCHEMA`] and unknown fields. A document of the schema before
    /// this one is converted to this one's types.
    pub fn from_json(text: &str) -> Result<Self, DesiredShimsError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(DesiredShimsError::Json)?;
        let schema = value.get("schema").and_then(serde_json::Value::as_u64);
        match schema {
            Some(s) if s == u64::from(SCHEMA) => serde_json::from_value(value),
            // Schema 1 is schema 2 without `delivery`: every set was delivered by the DaemonSet.
            Some(1) => serde_json::from_value::<DesiredShims>(value).map(|set| DesiredShims {
                schema: SCHEMA,
                delivery: Delivery::DaemonSet,
                ..set
            }),
            other => return Err(DesiredShimsError::Schema(other)),
        }
        .map_err(DesiredShimsError::Json)
    }
}

/// Why a desired set could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DesiredShimsError {
    #[error("desired shim set is not valid JSON of schema {SCHEMA}: {0}")]
    Json(serde_json::Error),
    #[error(
        "desired shim set has schema {}; this installer reads schemas {OLDEST_READ_SCHEMA} to {SCHEMA}",
        .0.map_or_else(|| "none".to_string(), |s| s.to_string())
    )]
    Schema(Option<u64>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin() -> DesiredShim {
        DesiredShim {
            oci_runtime: false,
            name: "spin".into(),
            handler: "spin".into(),
            runtime_type: "io.containerd.spin.v2".into(),
            version: "v0.22.0".into(),
            binaries: vec![Binary {
                name: "containerd-shim-spin-v2".into(),
                source: BinarySource::Url {
                    artifacts: BTreeMap::from([(
                        Arch::Amd64,
                        UrlArtifact {
                            url: "https://example.com/shim".into(),
                            sha256: "a".repeat(64),
                        },
                    )]),
                },
            }],
            options: BTreeMap::from([("SystemdCgroup".into(), OptionValue::Bool(true))]),
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            config_files: vec![],
            node_selector: BTreeMap::new(),
            worker_pools: vec![],
        }
    }

    #[test]
    fn round_trips_through_json() {
        let set = DesiredShims {
            schema: SCHEMA,
            mode: Mode::Install,
            delivery: Delivery::DaemonSet,
            shims: vec![spin()],
            rollout: Rollout {
                max_concurrent_restarts: 1,
            },
        };
        let text = set.to_json();
        assert!(text.contains("\"SystemdCgroup\": true"), "{text}");
        assert_eq!(DesiredShims::from_json(&text).unwrap(), set);
    }

    #[test]
    fn rejects_other_schemas_and_unknown_fields() {
        let err = DesiredShims::from_json(
            r#"{"schema":3,"mode":"Install","rollout":{"maxConcurrentRestarts":1}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("has schema 3; this installer reads schemas 1 to 2"),
            "{err}"
        );
        let err = DesiredShims::from_json(r#"{"mode":"Install"}"#).unwrap_err();
        assert!(err.to_string().contains("has schema none"), "{err}");
        let err = DesiredShims::from_json(
            r#"{"schema":1,"mode":"Install","rollout":{"maxConcurrentRestarts":1},"extra":1}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }

    /// The documents each released schema was written as, pinned by their sha256: a released
    /// schema's documents never change (a changed format is a new schema). Add a line when a
    /// release writes a new schema; never edit one.
    const RELEASED: &[(u32, &str, &str)] = &[
        (
            1,
            "install.json",
            "8b2a8138f351c72d6071f0c9e504782d34f717748481eb67623a572ef90bddb8",
        ),
        (
            1,
            "uninstall.json",
            "44996a906d7db364472f3dc6dbfc12927a93f0817a3b3e8a3686ee91a9de4979",
        ),
        (
            2,
            "install.json",
            "e3781a30e4b6cd041fc1c7ce2f37b145a5e314dcbd45612b550518d3a81ff044",
        ),
        (
            2,
            "uninstall.json",
            "23a8fca3396793d34d6fb831a5d6f0b130fa11c9bfac7bd38721640c206ba426",
        ),
    ];

    fn golden_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test/golden/desired-set")
    }

    /// A set that uses every field of the format, so that any change of the written shape
    /// shows in its document.
    fn every_field() -> DesiredShims {
        let mut url = spin();
        url.pod_annotations = vec!["example.com/trace".into()];
        url.worker_pools = vec!["worker-a".into()];
        let image = DesiredShim {
            name: "gvisor".into(),
            handler: "runsc".into(),
            runtime_type: "io.containerd.runsc.v1".into(),
            version: "v1".into(),
            binaries: vec![Binary {
                name: "runsc".into(),
                source: BinarySource::Image {
                    image: "registry.example.com/gvisor@sha256:".to_string() + &"b".repeat(64),
                    path: "/payload/runsc".into(),
                    sha256: BTreeMap::from([(Arch::Arm64, "c".repeat(64))]),
                },
            }],
            oci_runtime: true,
            options: BTreeMap::from([
                (
                    "ConfigPath".into(),
                    OptionValue::String(format!("{CONFIG_DIR_PLACEHOLDER}/runsc.toml")),
                ),
                ("Priority".into(), OptionValue::Int(-3)),
                ("SystemdCgroup".into(), OptionValue::Bool(false)),
            ]),
            pod_annotations: vec![],
            privileged_without_host_devices: true,
            config_files: vec![ConfigFile {
                name: "runsc.toml".into(),
                content: format!("binary_name = \"{BIN_DIR_PLACEHOLDER}/runsc\"\n"),
            }],
            node_selector: BTreeMap::from([("example.com/sandbox".into(), "true".into())]),
            worker_pools: vec![],
        };
        DesiredShims {
            schema: SCHEMA,
            mode: Mode::Install,
            delivery: Delivery::Osc,
            shims: vec![image, url],
            rollout: Rollout {
                max_concurrent_restarts: 2,
            },
        }
    }

    fn sha256(text: &str) -> String {
        use sha2::{Digest, Sha256};
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What this build writes is the newest released schema's documents, byte for byte: a
    /// change of the format without a new schema fails here. `UPDATE_GOLDEN=1` writes the
    /// documents of a schema that is not released yet (not in `RELEASED`), never of one that is.
    #[test]
    fn this_build_writes_its_schema_s_released_documents() {
        let written = [
            ("install.json", every_field().to_json()),
            (
                "uninstall.json",
                DesiredShims::uninstall(Rollout {
                    max_concurrent_restarts: 1,
                })
                .to_json(),
            ),
        ];
        let dir = golden_dir().join(format!("schema-{SCHEMA}"));
        let released = RELEASED.iter().any(|(schema, _, _)| *schema == SCHEMA);
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") && !released {
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in &written {
                std::fs::write(dir.join(name), text).unwrap();
            }
        }
        assert!(
            released,
            "schema {SCHEMA} is not in RELEASED: add its documents' digests"
        );
        for (name, text) in &written {
            let path = dir.join(name);
            let stored = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                &stored, text,
                "this build writes {name} differently from released schema {SCHEMA}: a changed \
                 format is a new schema (SCHEMA + 1, its documents in test/golden/desired-set/)"
            );
        }
    }

    /// Released documents never change, this build reads every schema from N-1 to N, and
    /// refuses the older ones with an error that names what it reads.
    #[test]
    fn released_schemas_are_pinned_and_n_minus_1_is_read() {
        for (schema, name, digest) in RELEASED {
            let path = golden_dir().join(format!("schema-{schema}")).join(name);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                &sha256(&text),
                digest,
                "{} changed: released documents are fixed",
                path.display()
            );
            let read = DesiredShims::from_json(&text);
            if (OLDEST_READ_SCHEMA..=SCHEMA).contains(schema) {
                let set = read.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(set.schema, SCHEMA, "{}: converted", path.display());
            } else {
                let err = read.expect_err("older than N-1 is refused").to_string();
                assert!(
                    err.contains(&format!("reads schemas {OLDEST_READ_SCHEMA} to {SCHEMA}")),
                    "{err}"
                );
            }
        }
        // N-1 is always covered: its documents stay while this build reads them.
        for schema in OLDEST_READ_SCHEMA..=SCHEMA {
            assert!(
                RELEASED.iter().any(|(s, _, _)| *s == schema),
                "schema {schema} is read by this build but has no released documents"
            );
        }
    }
}
