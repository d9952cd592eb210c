//! What a Shoot needs in a bare garden before the Gardener API server accepts it: a Project and
//! its namespace, a CloudProfile, credentials and their binding, and a ControllerRegistration for
//! every extension type the Shoot names (the API server refuses types nobody registered). No
//! gardener-controller-manager, scheduler or gardenlet runs: the Shoots are only admitted, never
//! reconciled.

use std::path::PathBuf;

use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{self, START_HINT, create_namespace, unique_name};

pub const CORE: &str = "core.gardener.cloud";

/// The garden's API (the seed kube-apiserver of the control plane, with gardener-apiserver
/// behind it) and the control plane's directory.
pub struct Garden {
    pub client: Client,
    pub dir: PathBuf,
}

impl Garden {
    pub async fn connect() -> Garden {
        let env = support::Env::load();
        let text = std::fs::read_to_string(env.dir.join("env")).unwrap();
        let kubeconfig = text
            .lines()
            .find_map(|l| l.strip_prefix("GARDEN_KUBECONFIG="))
            .unwrap_or_else(|| {
                panic!(
                    "the control plane in {} has no garden: start it with `hack/control-plane.sh run --garden -- ...` ({START_HINT})",
                    env.dir.display()
                )
            });
        let client = support::client_from(std::path::Path::new(kubeconfig)).await;
        Garden {
            client,
            dir: env.dir,
        }
    }

    pub fn api(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Creates `object`; an object that exists already is fine (cluster-wide fixtures that
    /// tests running in parallel share).
    pub async fn ensure(&self, group: &str, version: &str, object: Value) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        let api = self.api(group, version, &kind, namespace.as_deref());
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating {kind} {:?}: {e}", object.metadata.name),
        }
    }

    /// A project of its own for a test: its namespace (as gardener-controller-manager would
    /// create it), the Project, and credentials bound for the provider `local`. Returns the
    /// namespace.
    pub async fn project(&self, test: &str) -> String {
        self.shared_fixtures().await;
        // Project names have at most 10 characters: 4 of the test's, 6 random.
        let unique = unique_name(test);
        let suffix = unique.rsplit('-').next().unwrap_or_default();
        let name = format!("{}{suffix}", &test[..test.len().min(4)]);
        let namespace = format!("garden-{name}");
        create_namespace(
            &self.client,
            &namespace,
            &[
                ("project.gardener.cloud/name", name.as_str()),
                ("gardener.cloud/role", "project"),
                ("test.containerd-shim/project", name.as_str()),
            ],
        )
        .await;
        self.ensure(
            CORE,
            "v1beta1",
            json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Project",
                   "metadata": {"name": name},
                   "spec": {"namespace": namespace}}),
        )
        .await;
        self.ensure(
            "",
            "v1",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "local", "namespace": namespace},
                   "data": {"token": "dGVzdA=="}}),
        )
        .await;
        self.ensure(
            "security.gardener.cloud",
            "v1alpha1",
            json!({"apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
                   "metadata": {"name": "local", "namespace": namespace},
                   "provider": {"type": "local"},
                   "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": "local", "namespace": namespace}}),
        )
        .await;
        namespace
    }

    /// The CloudProfile and the ControllerRegistrations every test's Shoots use.
    async fn shared_fixtures(&self) {
        self.ensure(
            CORE,
            "v1beta1",
            json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "CloudProfile",
                   "metadata": {"name": "local-gvisor"},
                   "spec": {
                       "type": "local",
                       "kubernetes": {"versions": [{"version": "1.33.2"}]},
                       "machineImages": [{"name": "local", "versions": [{
                           "version": "1.0.0",
                           "cri": [{"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]}],
                           "architectures": ["amd64", "arm64"]}]}],
                       "machineTypes": [
                           {"name": "local", "cpu": "1", "gpu": "0", "memory": "1Gi", "usable": true, "architecture": "amd64"},
                           {"name": "local-arm", "cpu": "1", "gpu": "0", "memory": "1Gi", "usable": true, "architecture": "arm64"}],
                       "regions": [{"name": "local"}]}}),
        )
        .await;
        for (name, resources) in [
            (
                "provider-local",
                json!([{"kind": "Infrastructure", "type": "local"},
                       {"kind": "ControlPlane", "type": "local"},
                       {"kind": "Worker", "type": "local"},
                       {"kind": "OperatingSystemConfig", "type": "local"}]),
            ),
            (
                "networking-calico",
                json!([{"kind": "Network", "type": "calico"}]),
            ),
            (
                "runtime-gvisor",
                json!([{"kind": "ContainerRuntime", "type": "gvisor"}]),
            ),
            (
                "containerd-shim",
                json!([{"kind": "Extension", "type": "containerd-shim"}]),
            ),
            (
                "other-extension",
                json!([{"kind": "Extension", "type": "other"}]),
            ),
        ] {
            self.ensure(
                CORE,
                "v1beta1",
                json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "ControllerRegistration",
                       "metadata": {"name": name},
                       "spec": {"resources": resources}}),
            )
            .await;
        }
    }
}

/// A Shoot of the `local` provider with these worker pools and extensions.
pub fn shoot(namespace: &str, name: &str, workers: Value, extensions: Value) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Shoot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "cloudProfile": {"kind": "CloudProfile", "name": "local-gvisor"},
            "region": "local",
            "credentialsBindingName": "local",
            "kubernetes": {"version": "1.33.2"},
            "networking": {"type": "calico", "nodes": "10.10.0.0/16"},
            "provider": {"type": "local", "workers": workers},
            "extensions": extensions
        }
    })
}

/// An amd64 pool (`arch` "arm64" for the arm machine type), containerd, with these
/// `cri.containerRuntimes` types.
pub fn pool(name: &str, arch: &str, runtimes: &[&str]) -> Value {
    let machine_type = if arch == "arm64" {
        "local-arm"
    } else {
        "local"
    };
    let runtimes: Vec<Value> = runtimes.iter().map(|t| json!({"type": t})).collect();
    let mut cri = json!({"name": "containerd"});
    if !runtimes.is_empty() {
        cri["containerRuntimes"] = Value::Array(runtimes);
    }
    json!({
        "name": name,
        "minimum": 1,
        "maximum": 1,
        "machine": {"type": machine_type, "image": {"name": "local", "version": "1.0.0"},
                    "architecture": arch},
        "cri": cri
    })
}

/// The `containerd-shim` entry with these shims.
pub fn ours(shims: Value) -> Value {
    json!({"type": "containerd-shim", "providerConfig": {
        "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
        "kind": "ContainerdShimConfig",
        "shims": shims}})
}
