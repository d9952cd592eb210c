//! Everything under example/ is valid and consistent, the offline renderer turns the example
//! Extension into the expected bundle, the committed registration is current, and the shoot
//! owner's documentation covers every field of the providerConfig.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_containerd_shim::gardener::api::{Cluster, Extension, Shoot};
use gardener_extension_containerd_shim::shim::config::{self, Catalog};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-containerd-shim");
const SHOOT_NAMESPACE: &str = "shoot--local--local";
const REGISTRATION: &str = "example/controller-registration.yaml";
/// The overlay that adds the Kata entry, which is not built in.
const KATA: &str = "example/kata/shim-catalog-overlay.yaml";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml<T: serde::de::DeserializeOwned>(path: &str) -> T {
    gardener_extension_containerd_shim::gardener::api::from_yaml(&read(path))
        .unwrap_or_else(|e| panic!("{path} does not decode: {e}"))
}

/// Every YAML file under example/, relative to the repository.
fn example_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo("example"), &mut files);
    let root = repo("");
    let mut names: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// The example Shoot as the extension's typed view, and its raw object.
fn example_shoot() -> (Shoot, Value) {
    let raw: Value = yaml("example/shoot.yaml");
    let shoot: Shoot = serde_json::from_value(raw.clone())
        .unwrap_or_else(|e| panic!("example/shoot.yaml is not a Shoot: {e}"));
    (shoot, raw)
}

fn shoot_provider_config(raw_shoot: &Value) -> Value {
    raw_shoot["spec"]["extensions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["type"] == "containerd-shim")
        .map(|e| e["providerConfig"].clone())
        .expect("example/shoot.yaml enables the extension type containerd-shim")
}

#[test]
fn every_example_file_decodes() {
    let files = example_files();
    for expected in [
        "example/chart-values.yaml",
        "example/cluster.yaml",
        REGISTRATION,
        "example/extension.yaml",
        "example/shoot.yaml",
    ] {
        assert!(files.iter().any(|f| f == expected), "{expected} is missing");
    }
    for file in &files {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&read(file))
            .unwrap_or_else(|e| panic!("{file} is not valid YAML: {e}"));
        assert!(docs.iter().any(|d| !d.is_null()), "{file} is empty");
        if file.starts_with("example/provider-config/") {
            config::decode::decode_yaml(&read(file))
                .unwrap_or_else(|e| panic!("{file} is not a providerConfig: {e}"));
        }
    }
    let _: Extension = yaml("example/extension.yaml");
    let _: Cluster = yaml("example/cluster.yaml");
    let registration: Vec<Value> =
        serde_saphyr::from_multiple(&read(REGISTRATION)).expect("registration YAML");
    let kinds: Vec<&str> = registration
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["ControllerRegistration", "ControllerDeployment"]);
}

#[test]
fn example_extension_cluster_and_shoot_agree_and_validate() {
    let catalog = Catalog::builtin().expect("built-in catalog");
    let ext: Extension = yaml("example/extension.yaml");
    let cluster: Cluster = yaml("example/cluster.yaml");
    let (shoot, raw_shoot) = example_shoot();

    assert_eq!(ext.metadata.namespace.as_deref(), Some(SHOOT_NAMESPACE));
    assert_eq!(ext.metadata.name.as_deref(), Some("containerd-shim"));
    assert_eq!(ext.spec.type_, "containerd-shim");
    assert_eq!(cluster.metadata.name.as_deref(), Some(SHOOT_NAMESPACE));

    // The Cluster embeds the example Shoot, and the Extension carries its providerConfig, as
    // gardenlet would write them.
    assert_eq!(
        cluster.spec.shoot["spec"], raw_shoot["spec"],
        "example/cluster.yaml must embed the spec of example/shoot.yaml"
    );
    assert_eq!(
        ext.spec.provider_config.as_ref(),
        Some(&shoot_provider_config(&raw_shoot)),
        "example/extension.yaml must carry the providerConfig of example/shoot.yaml"
    );
    assert_eq!(
        cluster.spec.shoot["status"]["technicalID"], SHOOT_NAMESPACE,
        "the Cluster's Shoot lives in the Extension's namespace"
    );

    let cluster_shoot = cluster
        .shoot()
        .expect("the Cluster's Shoot decodes")
        .expect("the Cluster embeds a Shoot");
    let validated = config::load(ext.spec.provider_config.as_ref(), &catalog, &cluster_shoot)
        .unwrap_or_else(|e| panic!("the example Extension is invalid for its Cluster: {e}"));
    let classes: BTreeSet<&str> = validated
        .shims()
        .iter()
        .map(|s| s.runtime_class_name.as_str())
        .collect();
    assert_eq!(
        classes,
        BTreeSet::from(["gvisor", "wasmtime", "wasmtime-spin-v2"])
    );
    config::load(Some(&shoot_provider_config(&raw_shoot)), &catalog, &shoot)
        .unwrap_or_else(|e| panic!("the Shoot snippet's providerConfig is invalid: {e}"));

    // Every per-shim example also fits the example Shoot.
    for file in example_files()
        .iter()
        .filter(|f| f.starts_with("example/provider-config/"))
    {
        let value: Value = yaml(file);
        config::load(Some(&value), &catalog, &shoot)
            .unwrap_or_else(|e| panic!("{file} is invalid for example/shoot.yaml: {e}"));
    }
    // Kata is not built in: its example goes with the operator's overlay that adds it.
    let with_kata = catalog
        .with_overlay_yaml(KATA, &read(KATA))
        .expect("the built-in catalog with the Kata overlay");
    let value: Value = yaml("example/kata/provider-config.yaml");
    config::load(Some(&value), &with_kata, &shoot)
        .unwrap_or_else(|e| panic!("example/kata/provider-config.yaml is invalid: {e}"));
}

#[test]
fn render_prints_the_example_bundle() {
    let output = Command::new(BIN)
        .current_dir(repo(""))
        .args([
            "render",
            "-f",
            "example/extension.yaml",
            "--cluster",
            "example/cluster.yaml",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "render failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple(&stdout)
        .unwrap_or_else(|e| panic!("render printed no YAML stream: {e}\n{stdout}"));
    let kinds = crate::support::objects::kinds(&objects);
    assert!(
        kinds
            .iter()
            .any(|k| k.starts_with("ConfigMap/containerd-shim-installer-")),
        "the desired set's ConfigMap is missing from {kinds:?}"
    );
    for expected in [
        "DaemonSet/containerd-shim-installer-worker-a",
        "ServiceAccount/containerd-shim-installer",
        "RuntimeClass/gvisor",
        "RuntimeClass/wasmtime",
        "RuntimeClass/wasmtime-spin-v2",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} is missing from {kinds:?}"
        );
    }
    for kind in [
        "ClusterRole/",
        "ClusterRoleBinding/",
        "Role/",
        "RoleBinding/",
    ] {
        assert!(
            kinds.iter().any(|k| k.starts_with(kind)),
            "{kind} in {kinds:?}"
        );
    }
    let gvisor = objects
        .iter()
        .find(|o| o["kind"] == "RuntimeClass" && o["metadata"]["name"] == "gvisor")
        .expect("RuntimeClass gvisor");
    assert_eq!(gvisor["handler"], "runsc");
    assert_eq!(gvisor["scheduling"]["tolerations"][0]["key"], "sandboxed");
}

#[test]
fn committed_registration_is_generated_from_the_current_sources() {
    let output = Command::new(repo("hack/generate-controller-registration.sh"))
        .env_remove("CHART_REPOSITORY")
        .output()
        .unwrap_or_else(|e| panic!("cannot run hack/generate-controller-registration.sh: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8_lossy(&output.stdout).into_owned();
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(repo(REGISTRATION), &generated).expect("write the registration");
    }
    assert!(
        read(REGISTRATION) == generated,
        "{REGISTRATION} is stale: regenerate it with `make generate` and commit it"
    );

    let docs: Vec<Value> = serde_saphyr::from_multiple(&generated).expect("YAML");
    let registration = docs
        .iter()
        .find(|d| d["kind"] == "ControllerRegistration")
        .expect("ControllerRegistration");
    assert_eq!(registration["apiVersion"], "core.gardener.cloud/v1beta1");
    let resources = registration["spec"]["resources"]
        .as_array()
        .expect("resources");
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0]["kind"], "Extension");
    assert_eq!(resources[0]["type"], "containerd-shim");
    assert_eq!(resources[0]["primary"], true);
    assert!(
        resources[0]["autoEnable"].is_null(),
        "the extension is opt-in per shoot"
    );
    assert_eq!(
        registration["metadata"]["annotations"]["security.gardener.cloud/pod-security-enforce"],
        "restricted"
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "ControllerDeployment")
        .expect("ControllerDeployment");
    assert_eq!(deployment["apiVersion"], "core.gardener.cloud/v1");
    assert_eq!(
        registration["spec"]["deployment"]["deploymentRefs"][0]["name"],
        deployment["metadata"]["name"]
    );
    let reference = deployment["helm"]["ociRepository"]["ref"]
        .as_str()
        .expect("helm.ociRepository.ref");
    assert!(
        reference.ends_with(&format!(
            "/gardener-extension-containerd-shim:{}",
            env!("CARGO_PKG_VERSION")
        )),
        "{reference}"
    );
}

/// Every property name of a JSON schema, from the root and every definition.
fn schema_properties(schema: &Value, out: &mut BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            for value in map.values() {
                schema_properties(value, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                schema_properties(item, out);
            }
        }
        _ => {}
    }
}

#[test]
fn usage_doc_describes_every_provider_config_field() {
    let schema: Value =
        serde_json::from_str(&read("docs/reference/provider-config.schema.json")).expect("schema");
    let mut fields = BTreeSet::new();
    schema_properties(&schema, &mut fields);
    assert!(fields.len() > 30, "{fields:?}");
    let usage = read("docs/usage.md");
    let reference = usage
        .split("\n## providerConfig reference")
        .nth(1)
        .expect("docs/usage.md has a section \"## providerConfig reference\"");
    let reference = reference.split("\n## ").next().unwrap_or(reference);
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !reference.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "the providerConfig reference in docs/usage.md does not describe: {missing:?}"
    );
    // And every catalog shim has an example there.
    let catalog = Catalog::builtin().expect("built-in catalog");
    for name in catalog.names() {
        assert!(
            usage.contains(&format!("name: {name}")),
            "docs/usage.md has no example for the catalog shim {name}"
        );
    }
}
