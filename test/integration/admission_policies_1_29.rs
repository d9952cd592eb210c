//! The installer's admission policies as a Kubernetes 1.29 shoot gets them
//! (`admissionregistration.k8s.io/v1beta1`), on a real kube-apiserver 1.29
//! (`KUBE_APISERVER_1_29_BIN`, built by `make tools`) with the beta API switched on the way the
//! Shoot must switch it on (feature gate `ValidatingAdmissionPolicy`, runtime config
//! `admissionregistration.k8s.io/v1beta1`). It shares the control plane's etcd (a prefix of its
//! own) and certificates. The installer's own RBAC and the policies are applied as the bundle
//! renders them; the installer acts with the node name the API server binds into its token
//! (impersonated, as in the v1 test of shim_lifecycle.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use gardener_extension_containerd_shim::gardener::managed_resource::Manifest;
use gardener_extension_containerd_shim::shim::config::admission::PolicyApi;
use gardener_extension_containerd_shim::shim::render::{admission, rbac};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiCapabilities;
use kube::{Api, Client, Discovery};
use serde_json::json;

use crate::support::impersonation::{client_of, installer_on, until_refused};
use crate::support::{self, poll, process};

const HINT: &str = "run `make tools` (or `hack/tools/build.sh kube129`) and \
                    `source <(hack/tools/env.sh | sed 's/^/export /')` (`make test` does both)";
const PREFIX: &str = "containerd-shim.extensions.gardener.cloud/";

/// A kube-apiserver 1.29 beside the control plane's, stopped when dropped.
struct ApiServer129 {
    child: Child,
    client: Client,
    kubeconfig: kube::config::Kubeconfig,
}

impl Drop for ApiServer129 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    let path = std::env::var_os("KUBE_APISERVER_1_29_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("KUBE_APISERVER_1_29_BIN is not set; {HINT}"));
    assert!(path.is_file(), "{} does not exist; {HINT}", path.display());
    path
}

/// `KEY=value` of the control plane's env file.
fn env_value(dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("env")).expect("the control plane's env file");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| panic!("{key} missing from {}/env", dir.display()))
}

async fn start() -> ApiServer129 {
    let env = support::Env::load();
    let dir = &env.dir;
    let port = process::free_port();
    let pki = |f: &str| dir.join("pki").join(f).display().to_string();
    let log = std::fs::File::create(dir.join("logs/kube-apiserver-1.29.log")).expect("log file");
    let child = Command::new(binary())
        .args([
            format!("--etcd-servers={}", env_value(dir, "ETCD_ENDPOINT")),
            format!("--etcd-prefix=/{}", support::unique_name("registry-1-29")),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", pki("serving.crt")),
            format!("--tls-private-key-file={}", pki("serving.key")),
            format!("--client-ca-file={}", pki("ca.crt")),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            format!("--service-account-issuer=https://127.0.0.1:{port}"),
            format!("--service-account-key-file={}", pki("sa.pub")),
            format!("--service-account-signing-key-file={}", pki("sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            "--authorization-mode=RBAC".to_string(),
            "--disable-admission-plugins=ServiceAccount".to_string(),
            "--endpoint-reconciler-type=none".to_string(),
            "--profiling=false".to_string(),
            "--feature-gates=ValidatingAdmissionPolicy=true".to_string(),
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true".to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start kube-apiserver 1.29: {e}"));
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(&env.shoot_kubeconfig).expect("shoot kubeconfig");
    for named in &mut kubeconfig.clusters {
        if let Some(cluster) = named.cluster.as_mut() {
            cluster.server = Some(format!("https://127.0.0.1:{port}"));
        }
    }
    let client = client_of(kubeconfig.clone()).await;
    let server = ApiServer129 {
        child,
        client,
        kubeconfig,
    };
    poll::until(
        "kube-apiserver 1.29 ready",
        poll::DEFAULT_TIMEOUT,
        || async {
            let version = server
                .client
                .apiserver_version()
                .await
                .map_err(|e| e.to_string())?;
            // The policies need kube-system, which the API server creates once it runs.
            Api::<k8s_openapi::api::core::v1::Namespace>::all(server.client.clone())
                .get("kube-system")
                .await
                .map_err(|e| e.to_string())?;
            if version.minor == "29" {
                Ok(())
            } else {
                Err(format!("{version:?}"))
            }
        },
    )
    .await;
    server
}

fn kind_of(manifest: &Manifest) -> kube::api::GroupVersionKind {
    let meta: kube::api::TypeMeta =
        serde_json::from_value(manifest.value().clone()).expect("apiVersion and kind");
    kube::api::GroupVersionKind::try_from(&meta).expect("group, version, kind")
}

/// Discovery once the API server serves every kind of `manifests`: a fresh kube-apiserver
/// answers requests before its discovery lists every built-in group.
async fn serving(client: &Client, manifests: &[Manifest]) -> Discovery {
    let kinds: Vec<_> = manifests.iter().map(kind_of).collect();
    poll::until(
        "kube-apiserver 1.29 serving every kind of the bundle",
        poll::DEFAULT_TIMEOUT,
        || async {
            let discovery = Discovery::new(client.clone())
                .run()
                .await
                .map_err(|e| e.to_string())?;
            match kinds.iter().find(|k| discovery.resolve_gvk(k).is_none()) {
                Some(missing) => Err(format!("{missing:?} not served")),
                None => Ok(discovery),
            }
        },
    )
    .await
}

/// Creates a rendered object through discovery (its API version must be served).
async fn create(client: &Client, discovery: &Discovery, manifest: Manifest) {
    let gvk = kind_of(&manifest);
    let value = manifest.into_value();
    let (resource, capabilities): (ApiResource, ApiCapabilities) = discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("kube-apiserver 1.29 does not serve {gvk:?}"));
    let object: DynamicObject = serde_json::from_value(value).expect("object");
    let api: Api<DynamicObject> = match (&capabilities.scope, object.metadata.namespace.as_deref())
    {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {gvk:?}: {e}"));
}

fn label_patch(key: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"labels": {key: "ready"}}}))
}

#[tokio::test]
async fn on_kubernetes_1_29_the_v1beta1_policies_confine_the_installer() {
    let server = start().await;
    let admin = server.client.clone();
    let mut manifests = vec![
        Manifest::from_resource(&rbac::service_account()).expect("manifest"),
        Manifest::from_resource(&rbac::cluster_role()).expect("manifest"),
        Manifest::from_resource(&rbac::cluster_role_binding()).expect("manifest"),
        Manifest::from_resource(&rbac::role(1)).expect("manifest"),
        Manifest::from_resource(&rbac::role_binding()).expect("manifest"),
    ];
    let policies = admission::policies(PolicyApi::V1Beta1, 1)
        .manifests()
        .expect("policies");
    assert!(
        policies
            .iter()
            .all(|m| m.value()["apiVersion"] == "admissionregistration.k8s.io/v1beta1"),
        "{policies:?}"
    );
    manifests.extend(policies);
    let discovery = serving(&admin, &manifests).await;
    for manifest in manifests {
        create(&admin, &discovery, manifest).await;
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    for name in ["node-a", "node-b"] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": "a"}}
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
    }

    let installer = installer_on(server.kubeconfig.clone(), "node-a").await;
    let as_installer: Api<Node> = Api::all(installer.clone());
    let ready = format!("{PREFIX}crun");
    // The API server loads RBAC objects, policies and bindings through informers, each in its
    // own time: every refusal is polled with dry-run requests (admission runs on them, nothing
    // is stored, so an attempt that slips through before the policy is loaded changes nothing),
    // and every permitted request is polled too.
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let ours = label_patch(&ready);
    let foreign = label_patch("pool");
    until_refused(
        "a label on the other Node",
        "may only change the Node it runs on",
        || as_installer.patch("node-b", &dry_run, &ours),
    )
    .await;
    until_refused(
        "a label outside the prefix on its own Node",
        "may only change labels under",
        || as_installer.patch("node-a", &dry_run, &foreign),
    )
    .await;
    let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
    until_refused(
        "a change of its own Node's spec",
        "may not change a Node's spec",
        || as_installer.patch("node-a", &dry_run, &cordon),
    )
    .await;
    poll::until(
        "its own Node's label under the prefix",
        poll::DEFAULT_TIMEOUT,
        || async {
            as_installer
                .patch("node-a", &PatchParams::default(), &label_patch(&ready))
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;

    let leases: Api<Lease> = Api::namespaced(installer, "kube-system");
    let lease = |name: &str| -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-system"}
        }))
        .expect("lease")
    };
    let create_dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let second_slot = lease("containerd-shim-restart-1");
    until_refused(
        "a Lease beyond the restart budget",
        "may only create its restart-budget Leases",
        || leases.create(&create_dry_run, &second_slot),
    )
    .await;
    // A permitted create is stored, so it is polled as a real one: the write goes to etcd,
    // which a loaded machine may answer late. A conflict means an earlier attempt was stored
    // although its answer was lost (nothing else writes to this API server's prefix).
    let first_slot = lease("containerd-shim-restart-0");
    poll::until("its restart slot", poll::DEFAULT_TIMEOUT, || async {
        match leases.create(&PostParams::default(), &first_slot).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}
