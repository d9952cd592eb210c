//! The seed chart as an OCI artifact: hack/package-chart.sh pushes it to the control plane's
//! registry (TLS, trusted through the control plane's CA), the generated ControllerDeployment
//! names it under `helm.ociRepository`, and the chart that reference resolves to installs into
//! the seed the way gardenlet installs a ControllerDeployment: the artifact's chart layer, with
//! the deployment's `helm.values` and the values gardenlet adds.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::DeleteParams;
use serde::Deserialize;
use serde_json::Value;

use crate::chart::helm;
use crate::support::{Env, START_HINT, client_from, create_namespace, unique_name};

const CHART: &str = "gardener-extension-containerd-shim";
/// The media types of a chart pushed by helm (Helm's OCI support).
const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
const CHART_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";

/// The control plane's registry: its address and the CA its certificate is issued by.
pub struct Registry {
    pub address: String,
    pub ca: PathBuf,
}

/// The registry of the running control plane (its env file: REGISTRY, REGISTRY_CA).
pub fn registry(env: &Env) -> Registry {
    let file = env.dir.join("env");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {START_HINT}", file.display()));
    let var = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                panic!(
                    "{} has no {key}: the control plane runs no registry; {START_HINT}",
                    file.display()
                )
            })
    };
    Registry {
        address: var("REGISTRY"),
        ca: PathBuf::from(var("REGISTRY_CA")),
    }
}

pub fn repo_path(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a command to success and returns its stdout; fails the test with its stderr.
pub fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// crane (CRANE_BIN, from `make tools`), trusting the registry's CA only.
pub fn crane(registry: &Registry) -> Command {
    let bin = std::env::var_os("CRANE_BIN").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "CRANE_BIN is not set: build the tools with `make tools` and export their paths with \
             `source <(hack/tools/env.sh | sed 's/^/export /')` (`make test` does both)"
        )
    });
    let mut command = Command::new(bin);
    command.env("SSL_CERT_FILE", &registry.ca);
    command
}

/// The fields of Gardener's ControllerDeployment (core.gardener.cloud/v1) that say where the
/// chart comes from and with which values.
#[derive(Debug, Deserialize)]
struct ControllerDeployment {
    helm: HelmControllerDeployment,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HelmControllerDeployment {
    oci_repository: OciRepository,
    #[serde(default)]
    values: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct OciRepository {
    #[serde(rename = "ref")]
    reference: Option<String>,
    repository: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
}

impl OciRepository {
    /// The artifact's reference as Gardener resolves it: `ref` wins, then the repository with
    /// the digest, then with the tag.
    fn url(&self) -> String {
        let url = match (&self.reference, &self.repository, &self.digest, &self.tag) {
            (Some(reference), ..) => reference.clone(),
            (None, Some(repository), Some(digest), _) => format!("{repository}@{digest}"),
            (None, Some(repository), None, Some(tag)) => format!("{repository}:{tag}"),
            _ => panic!("ociRepository names no artifact: {self:?}"),
        };
        url.trim_start_matches("oci://").to_owned()
    }
}

/// The ControllerDeployment of a generated registration file.
fn controller_deployment(file: &Path) -> ControllerDeployment {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
    let doc = docs
        .into_iter()
        .find(|d| d["kind"] == "ControllerDeployment")
        .unwrap_or_else(|| panic!("{} has no ControllerDeployment", file.display()));
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("the ControllerDeployment: {e}"))
}

#[tokio::test]
async fn the_chart_pushed_to_the_registry_installs_into_the_seed_from_its_controller_deployment() {
    let env = Env::load();
    let registry = registry(&env);
    let dir = tempfile::tempdir().expect("temporary directory");
    let helm_home = dir.path().join("helm");
    let chart_repository = format!(
        "{}/{}/charts/gardener/extensions",
        registry.address,
        unique_name("chart-oci")
    );

    // The release's push, with the registry trusted through the control plane's CA only.
    let pushed = run(Command::new(repo_path("hack/package-chart.sh"))
        .args(["--push", "--dir"])
        .arg(dir.path())
        .env("CHART_REPOSITORY", &chart_repository)
        .env("CHART_CA_FILE", &registry.ca)
        .env("HELM_CONFIG_HOME", &helm_home)
        .env("HELM_CACHE_HOME", &helm_home)
        .env("HELM_DATA_HOME", &helm_home));
    let digest = pushed
        .lines()
        .find_map(|l| l.strip_prefix("Digest: "))
        .unwrap_or_else(|| panic!("helm push reported no digest:\n{pushed}"))
        .trim()
        .to_owned();

    // The registration names that artifact by digest.
    let registration = dir.path().join("controller-registration.yaml");
    run(
        Command::new(repo_path("hack/generate-controller-registration.sh"))
            .arg(&registration)
            .env("CHART_REPOSITORY", &chart_repository)
            .env("CHART_DIGEST", &digest),
    );
    let mut deployment = controller_deployment(&registration);
    let url = deployment.helm.oci_repository.url();
    assert_eq!(url, format!("{chart_repository}/{CHART}@{digest}"));
    assert_eq!(
        deployment.helm.oci_repository.tag.as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );

    // What gardenlet pulls: the manifest the reference names, and its chart layer.
    let manifest: Value = serde_json::from_str(&run(crane(&registry).args(["manifest", &url])))
        .expect("the chart's manifest is JSON");
    assert_eq!(manifest["config"]["mediaType"], CHART_CONFIG, "{manifest}");
    let layers: Vec<&Value> = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["mediaType"] == CHART_LAYER)
        .collect();
    let [layer] = layers.as_slice() else {
        panic!("expected one chart layer: {manifest}");
    };
    let layer_digest = layer["digest"].as_str().expect("layer digest");
    let chart = dir.path().join("chart.tgz");
    let blob = crane(&registry)
        .args([
            "blob",
            &format!("{chart_repository}/{CHART}@{layer_digest}"),
        ])
        .output()
        .expect("crane blob");
    assert!(
        blob.status.success(),
        "{}",
        String::from_utf8_lossy(&blob.stderr)
    );
    std::fs::write(&chart, &blob.stdout).expect("writing the chart");

    // The operator's values in the ControllerDeployment: the test seed has no VPA CRDs, and the
    // webhook's cluster-wide MutatingWebhookConfiguration has one fixed name, which
    // osc_webhook.rs registers in the same seed at the same time (chart.rs creates the chart's
    // configuration in the API server under a name of its own).
    deployment.helm.values = Some(serde_json::json!({
        "vpa": {"enabled": false},
        "webhook": {"enabled": false},
    }));
    let operator_values = dir.path().join("operator.yaml");
    std::fs::write(
        &operator_values,
        serde_json::to_string(&deployment.helm.values).expect("values"),
    )
    .expect("writing values");
    let gardenlet_values = dir.path().join("gardenlet.yaml");
    std::fs::write(&gardenlet_values, crate::chart::GARDENLET_VALUES).expect("writing values");

    let seed = client_from(&env.seed_kubeconfig).await;
    let namespace = create_namespace(&seed, &unique_name("extension-containerd-shim"), &[]).await;
    let kubeconfig = env.seed_kubeconfig.to_string_lossy().into_owned();
    helm::helm(&[
        "install",
        "containerd-shim",
        &chart.to_string_lossy(),
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        &namespace,
        "--values",
        &operator_values.to_string_lossy(),
        "--values",
        &gardenlet_values.to_string_lossy(),
    ]);

    // The controller's Deployment is in the seed, running the image the image vector names.
    let installed = Api::<Deployment>::namespaced(seed.clone(), &namespace)
        .get(CHART)
        .await
        .unwrap_or_else(|e| panic!("the chart installed no Deployment {CHART}: {e}"));
    let image = installed
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image)
        .expect("the Deployment's container has an image");
    let vector =
        gardener_extension_containerd_shim::shim::config::images::embedded().expect("image vector");
    let expected = gardener_extension_containerd_shim::shim::config::images::own_image(
        &vector,
        "gardener-extension-containerd-shim",
    )
    .expect("the controller's image");
    assert_eq!(image, expected.to_string());

    helm::helm(&[
        "uninstall",
        "containerd-shim",
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        &namespace,
    ]);
    Api::<Namespace>::all(seed)
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {namespace}: {e}"));
}
