//! The seed chart with the real helm: it lints, renders with and without the values gardenlet
//! injects and with the example values, and what it renders is what the binary and Gardener
//! expect (flags the binary accepts, the image the image vector names, the well-known labels,
//! a pod the restricted Pod Security Standard admits). test/e2e/rbac.rs proves its RBAC.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use gardener_extension_containerd_shim::gardener::imagevector::ImageVector;
use gardener_extension_containerd_shim::shim::config::{Catalog, images};
use gardener_extension_containerd_shim::shim::osc_webhook::CONFIGURATION;
use serde_json::Value;

#[path = "../support/helm.rs"]
pub(crate) mod helm;

use crate::support::{self, poll};

const RELEASE: &str = "containerd-shim";
const NAMESPACE: &str = "extension-containerd-shim-a1b2c";
const NAME: &str = "gardener-extension-containerd-shim";
const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-containerd-shim");

/// What gardenlet mixes into the values on a seed (gardener-contract.md §5.2).
pub(crate) const GARDENLET_VALUES: &str = r#"
gardener:
  version: v1.149.3
  garden:
    clusterIdentity: garden-local
  gardenlet:
    featureGates: {}
  seed:
    name: local
    clusterIdentity: seed-local
    provider: local
    region: local
    labels: {}
    annotations: {}
    spec:
      provider:
        type: local
        region: local
"#;

/// What gardener-operator mixes in when it deploys the extension into the runtime cluster.
const RUNTIME_CLUSTER_VALUES: &str = r#"
gardener:
  version: v1.149.3
  runtimeCluster:
    enabled: true
    priorityClassName: gardener-garden-system-200
"#;

fn values_file(dir: &tempfile::TempDir, name: &str, content: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap_or_else(|e| panic!("writing {name}: {e}"));
    path
}

fn deployment(objects: &[Value]) -> &Value {
    helm::find(objects, "Deployment", Some(NAME))
}

fn container(objects: &[Value]) -> &Value {
    &deployment(objects)["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .unwrap_or_else(|| panic!("the container has no args"))
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

fn env_var<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    container(objects)["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
}

/// The built-in catalog with the overlay the chart rendered into its ConfigMap, as the
/// controller loads it.
fn rendered_catalog(objects: &[Value]) -> Catalog {
    let overlay = config_map_data(
        objects,
        "gardener-extension-containerd-shim-shim-catalog",
        "catalog-overlay.yaml",
    );
    Catalog::builtin()
        .expect("built-in catalog")
        .with_overlay_yaml("chart", overlay)
        .expect("the rendered overlay is a valid catalog overlay")
}

fn config_map_data<'a>(objects: &'a [Value], name: &str, key: &str) -> &'a str {
    helm::find(objects, "ConfigMap", Some(name))["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap {name} has no key {key}"))
}

/// The binary parses every flag the chart passes (clap validates all arguments before it
/// acts on `--help`).
fn assert_binary_accepts(args: &[String]) {
    let output = Command::new(BIN)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    assert!(
        output.status.success(),
        "the binary refuses the chart's arguments {args:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn chart_lints_with_every_kind_of_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gardenlet = values_file(&dir, "gardenlet.yaml", GARDENLET_VALUES);
    let runtime = values_file(&dir, "runtime.yaml", RUNTIME_CLUSTER_VALUES);
    let example = helm::repo_file("example/chart-values.yaml");
    let chart = helm::chart_dir();
    let chart = chart.to_string_lossy();
    for files in [
        vec![],
        vec![gardenlet.as_path()],
        vec![runtime.as_path()],
        vec![example.as_path(), gardenlet.as_path()],
    ] {
        let mut cmd: Vec<String> = vec!["lint".into(), "--strict".into(), chart.to_string()];
        for f in &files {
            cmd.extend(["--values".to_string(), f.to_string_lossy().into_owned()]);
        }
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let out = helm::helm(&cmd);
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn default_values_render_a_complete_secure_deployment_without_gardener_values() {
    let objects = helm::template(RELEASE, NAMESPACE, &[]);
    assert_eq!(
        helm::kinds(&objects),
        [
            "ClusterRole/extensions.gardener.cloud:extension-containerd-shim",
            "ClusterRoleBinding/extensions.gardener.cloud:extension-containerd-shim",
            "Deployment/gardener-extension-containerd-shim",
            "MutatingWebhookConfiguration/gardener-extension-containerd-shim-osc",
            "PodDisruptionBudget/gardener-extension-containerd-shim",
            "Role/gardener-extension-containerd-shim",
            "RoleBinding/gardener-extension-containerd-shim",
            "Service/gardener-extension-containerd-shim",
            "Service/gardener-extension-containerd-shim-metrics",
            "ServiceAccount/gardener-extension-containerd-shim",
            "VerticalPodAutoscaler/gardener-extension-containerd-shim",
        ]
    );
    for object in &objects {
        let cluster_scoped = [
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        ];
        if !cluster_scoped.iter().any(|k| object["kind"] == *k) {
            assert_eq!(object["metadata"]["namespace"], NAMESPACE, "{object}");
        }
    }

    let deploy = deployment(&objects);
    let pod = &deploy["spec"]["template"];
    let spec = &pod["spec"];
    let c = container(&objects);
    let args = args(&objects);

    // The image the binary itself considers its own: one image vector for both.
    let vector = images::embedded().expect("embedded image vector");
    let own = images::own_image(&vector, images::CONTROLLER_IMAGE).expect("controller image");
    assert_eq!(c["image"], own.to_string());

    // Flags, the subcommand and the namespaces.
    assert_eq!(args[0], "run");
    assert!(args.contains(&format!("--heartbeat-namespace={NAMESPACE}")));
    assert!(args.contains(&"--leader-election=true".to_string()));
    assert!(args.contains(&"--leader-election-id=containerd-shim-leader-election".to_string()));
    assert!(args.contains(&"--health-bind-address=:8081".to_string()));
    assert!(args.contains(&"--metrics-bind-address=:8080".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--gardener-version")));
    assert!(!args.iter().any(|a| a.starts_with("--shim-catalog-overlay")));
    assert!(!args.iter().any(|a| a.starts_with("--disable-controllers")));
    assert!(args.contains(&"--allow-custom-shims=true".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--custom-shim-")));
    assert_binary_accepts(&args);
    let leader_ns =
        env_var(&objects, "LEADER_ELECTION_NAMESPACE").expect("LEADER_ELECTION_NAMESPACE");
    assert_eq!(
        leader_ns["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert!(env_var(&objects, "IMAGEVECTOR_OVERWRITE").is_none());

    // Probes on the health port.
    let health_port = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "health")
        .expect("a health port");
    assert_eq!(health_port["containerPort"], 8081);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "health");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "health");

    // Gardener's conventions for seed extensions.
    assert_eq!(spec["priorityClassName"], "gardener-system-900");
    assert_eq!(spec["serviceAccountName"], NAME);
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["networking.gardener.cloud/to-dns"], "allowed");
    assert_eq!(
        labels["networking.gardener.cloud/to-runtime-apiserver"],
        "allowed"
    );
    // The health check and the uninstall read each shoot's API server.
    assert_eq!(
        labels["networking.resources.gardener.cloud/to-all-shoots-kube-apiserver-tcp-443"],
        "allowed"
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "8080");
    assert_eq!(annotations["prometheus.io/name"], NAME);
    assert_eq!(
        deploy["metadata"]["labels"]["high-availability-config.resources.gardener.cloud/type"],
        "controller"
    );

    // The restricted Pod Security Standard (the registration's enforce level).
    assert_restricted(spec);

    // PDB and VPA select and target this Deployment.
    let selector = &deploy["spec"]["selector"]["matchLabels"];
    let pdb = helm::find(&objects, "PodDisruptionBudget", Some(NAME));
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], selector);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let vpa = helm::find(&objects, "VerticalPodAutoscaler", Some(NAME));
    assert_eq!(vpa["apiVersion"], "autoscaling.k8s.io/v1");
    assert_eq!(vpa["spec"]["targetRef"]["name"], NAME);
    assert_eq!(
        vpa["spec"]["resourcePolicy"]["containerPolicies"][0]["containerName"],
        c["name"]
    );
    let service = helm::find(
        &objects,
        "Service",
        Some("gardener-extension-containerd-shim-metrics"),
    );
    assert_eq!(&service["spec"]["selector"], selector);

    // RBAC binds the chart's ServiceAccount; the Role covers the Leases the flags name.
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        let binding = helm::find(&objects, kind, None);
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]),
            "{kind}"
        );
    }
    let role = helm::find(&objects, "Role", None);
    let names: BTreeSet<&str> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["resourceNames"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "containerd-shim-leader-election",
            "gardener-extension-heartbeat",
            "gardener-extension-containerd-shim-webhook-certs",
        ])
    );
}

/// What the restricted Pod Security Standard requires of the pod and its containers.
fn assert_restricted(spec: &Value) {
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{spec}");
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{spec}"
    );
    assert!(
        spec["hostNetwork"].is_null() && spec["hostPID"].is_null() && spec["hostIPC"].is_null()
    );
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        assert!(
            // Of the volume types the restricted standard allows, those the chart uses.
            ["configMap", "projected", "emptyDir"]
                .iter()
                .any(|t| volume[*t].is_object()),
            "volume type not allowed: {volume}"
        );
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{c}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{c}");
        assert_eq!(
            sc["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{c}"
        );
        assert!(sc["capabilities"]["add"].is_null(), "{c}");
        assert!(
            sc["privileged"].is_null() || sc["privileged"] == false,
            "{c}"
        );
        assert!(
            c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|p| p["hostPort"].is_null())
        );
    }
}

#[test]
fn gardener_values_set_the_version_and_the_runtime_clusters_priority_class() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gardenlet = values_file(&dir, "gardenlet.yaml", GARDENLET_VALUES);
    let objects = helm::template(RELEASE, NAMESPACE, &[gardenlet.as_path()]);
    let args = args(&objects);
    assert!(
        args.contains(&"--gardener-version=v1.149.3".to_string()),
        "{args:?}"
    );
    assert_binary_accepts(&args);
    assert_eq!(
        deployment(&objects)["spec"]["template"]["spec"]["priorityClassName"],
        "gardener-system-900"
    );

    let runtime = values_file(&dir, "runtime.yaml", RUNTIME_CLUSTER_VALUES);
    let objects = helm::template(RELEASE, NAMESPACE, &[runtime.as_path()]);
    assert_eq!(
        deployment(&objects)["spec"]["template"]["spec"]["priorityClassName"],
        "gardener-garden-system-200"
    );
}

#[test]
fn example_values_mount_the_image_vector_override_and_the_catalog_overlay() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gardenlet = values_file(&dir, "gardenlet.yaml", GARDENLET_VALUES);
    let example = helm::repo_file("example/chart-values.yaml");
    let objects = helm::template(
        RELEASE,
        NAMESPACE,
        &[example.as_path(), gardenlet.as_path()],
    );
    let deploy = deployment(&objects);
    let spec = &deploy["spec"]["template"]["spec"];
    let c = container(&objects);
    let args = args(&objects);
    assert_binary_accepts(&args);
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_restricted(spec);
    assert!(
        args.contains(&"--max-concurrent-reconciles=10".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--healthcheck-period=1m".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--uninstall-timeout=15m".to_string()),
        "{args:?}"
    );

    // Where each ConfigMap is mounted: the paths the env variable and the flag name.
    let mount_of = |volume: &str| -> String {
        let config_map = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == volume)
            .unwrap_or_else(|| panic!("no volume {volume}"))["configMap"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(!config_map.is_empty(), "{volume} is no ConfigMap volume");
        c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == volume)
            .unwrap_or_else(|| panic!("{volume} is not mounted"))["mountPath"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    let overwrite_path = env_var(&objects, "IMAGEVECTOR_OVERWRITE").expect("IMAGEVECTOR_OVERWRITE")
        ["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        overwrite_path,
        format!(
            "{}/images_overwrite.yaml",
            mount_of("imagevector-overwrite")
        )
    );
    let overwrite = config_map_data(
        &objects,
        "gardener-extension-containerd-shim-imagevector-overwrite",
        "images_overwrite.yaml",
    );
    let merged = images::embedded()
        .expect("embedded image vector")
        .merge(ImageVector::from_yaml("overwrite", overwrite).expect("the override parses"));
    let installer = images::own_image(&merged, images::INSTALLER_IMAGE).expect("installer");
    assert!(
        installer
            .to_string()
            .starts_with("registry.example.com/mirror/containerd-shim-installer:"),
        "{installer}"
    );

    let overlay_flag = args
        .iter()
        .find_map(|a| a.strip_prefix("--shim-catalog-overlay="))
        .expect("--shim-catalog-overlay");
    assert_eq!(
        overlay_flag,
        format!("{}/catalog-overlay.yaml", mount_of("shim-catalog"))
    );
    let catalog = rendered_catalog(&objects);
    assert!(catalog.get("crun").is_none(), "the null survives the chart");
    assert!(catalog.get("spin").is_some());

    // A change of either ConfigMap rolls the Deployment.
    let annotations = &deploy["spec"]["template"]["metadata"]["annotations"];
    assert!(annotations["checksum/configmap-imagevector-overwrite"].is_string());
    assert!(annotations["checksum/configmap-shim-catalog"].is_string());

    let monitor = helm::find(&objects, "ServiceMonitor", Some(NAME));
    assert_eq!(monitor["metadata"]["labels"]["prometheus"], "seed");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );
}

#[test]
fn catalog_overlay_as_a_map_and_disabled_controllers_reach_the_binary() {
    let dir = tempfile::tempdir().expect("temp dir");
    let values = values_file(
        &dir,
        "values.yaml",
        "shimCatalog:\n  shims:\n    wasmtime: null\n    spin:\n      defaultVersion: v0.24.0\n\
         disableControllers: [healthcheck]\nvpa:\n  enabled: false\n\
         customShims:\n  allowed: false\n  downloadHosts: [github.com, '*.example.com']\n  imageRegistries: [ghcr.io/example]\n\
         image:\n  repository: registry.example.com/ext\n  tag: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
    );
    let objects = helm::template(RELEASE, NAMESPACE, &[values.as_path()]);
    let args = args(&objects);
    assert!(args.contains(&"--disable-controllers=healthcheck".to_string()));
    for flag in [
        "--allow-custom-shims=false",
        "--custom-shim-download-hosts=github.com,*.example.com",
        "--custom-shim-image-registries=ghcr.io/example",
    ] {
        assert!(
            args.contains(&flag.to_string()),
            "{flag} missing in {args:?}"
        );
    }
    assert_binary_accepts(&args);
    assert!(
        !helm::kinds(&objects)
            .iter()
            .any(|k| k.starts_with("VerticalPodAutoscaler/"))
    );
    assert_eq!(
        container(&objects)["image"],
        "registry.example.com/ext@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    let catalog = rendered_catalog(&objects);
    assert!(catalog.get("wasmtime").is_none());
}

#[test]
fn chart_versions_follow_the_crate_and_the_image_vector_is_shared() {
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(helm::chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        chart["version"], version,
        "Chart.yaml's version must be Cargo.toml's"
    );
    assert_eq!(chart["appVersion"], format!("v{version}"));

    // charts/images.yaml is the one image vector: the binary embeds it and the chart reads it
    // through its images.yaml link, which `helm package` resolves into the package.
    let source = std::fs::read_to_string(helm::repo_file("charts/images.yaml")).expect("images");
    let in_chart =
        std::fs::read_to_string(helm::chart_dir().join("images.yaml")).expect("chart images");
    assert_eq!(source, in_chart);
    let link = std::fs::symlink_metadata(helm::chart_dir().join("images.yaml")).expect("stat");
    assert!(
        link.file_type().is_symlink(),
        "charts/gardener-extension-containerd-shim/images.yaml must stay a link to ../images.yaml"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let chart_path = helm::chart_dir();
    let out = helm::helm(&[
        "package",
        &chart_path.to_string_lossy(),
        "--destination",
        &dir.path().to_string_lossy(),
    ]);
    let package = dir
        .path()
        .join(format!("gardener-extension-containerd-shim-{version}.tgz"));
    assert!(package.is_file(), "{out}");
    let objects = helm::parse(&helm::helm(&[
        "template",
        RELEASE,
        &package.to_string_lossy(),
        "--namespace",
        NAMESPACE,
    ]));
    let vector = images::embedded().expect("embedded image vector");
    let own = images::own_image(&vector, images::CONTROLLER_IMAGE).expect("controller image");
    assert_eq!(container(&objects)["image"], own.to_string());
}

#[test]
fn operations_doc_lists_every_flag_of_run() {
    let output = Command::new(BIN)
        .args(["run", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let flags: BTreeSet<String> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("--"))
        .filter_map(|l| l.split([' ', '=', '[', '<']).next().map(str::to_string))
        .filter(|f| f != "--help")
        .collect();
    assert!(flags.len() > 20, "{flags:?}");
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .expect("docs/operations.md");
    // The section "## Flags", up to the next section.
    let doc = doc
        .split("\n## Flags")
        .nth(1)
        .expect("docs/operations.md has a section \"## Flags\"");
    let doc = doc.split("\n## ").next().unwrap_or(doc);
    let missing: Vec<&String> = flags
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "the Flags section of docs/operations.md does not describe these flags of `run`: {missing:?}"
    );
    // And the doc names no flag the binary does not have.
    let documented: BTreeSet<String> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("--") && !s.contains(' '))
        .map(|s| s.split('=').next().unwrap_or(s).to_string())
        .collect();
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|f| !flags.contains(*f) && f.as_str() != "--help")
        .collect();
    assert!(
        unknown.is_empty(),
        "the Flags section of docs/operations.md names flags `run` does not have: {unknown:?}"
    );
}

/// The grants of `rules` on `resource`.
fn grants_on(rules: &Value, resource: &str) -> BTreeSet<(String, String, String, String)> {
    helm::named_grants(rules)
        .into_iter()
        .filter(|(_, r, _, _)| r == resource)
        .collect()
}

fn grant(group: &str, resource: &str, verb: &str, names: &str) -> (String, String, String, String) {
    (group.into(), resource.into(), verb.into(), names.into())
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> &'a str {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
}

const CERTS_SECRET: &str = "gardener-extension-containerd-shim-webhook-certs";

#[test]
fn the_osc_webhook_gets_its_service_a_writable_cert_dir_and_rbac_on_its_own_objects_only() {
    let objects = helm::template(RELEASE, NAMESPACE, &[]);
    let args = args(&objects);
    assert_binary_accepts(&args);
    let c = container(&objects);

    // The controller registers the Service the chart renders, in the pod's namespace.
    assert_eq!(flag_value(&args, "--webhook-config-mode"), "service");
    assert_eq!(flag_value(&args, "--webhook-config-service-name"), NAME);
    let service = helm::find(&objects, "Service", Some(NAME));
    let ports = service["spec"]["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(
        ports[0]["port"].to_string(),
        flag_value(&args, "--webhook-config-service-port")
    );
    assert_eq!(ports[0]["port"], 443);
    assert_eq!(ports[0]["targetPort"], "webhook");
    assert_eq!(
        &service["spec"]["selector"],
        &deployment(&objects)["spec"]["selector"]["matchLabels"]
    );
    let webhook_port = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "webhook")
        .expect("a webhook container port");
    assert_eq!(webhook_port["containerPort"], 10250);
    assert_eq!(flag_value(&args, "--webhook-bind-address"), ":10250");
    assert_eq!(flag_value(&args, "--webhook-resync-period"), "1h");
    let namespace =
        env_var(&objects, "WEBHOOK_CONFIG_NAMESPACE").expect("WEBHOOK_CONFIG_NAMESPACE");
    assert_eq!(
        namespace["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    // The seed's API server reaches the webhook port, and only that one, through the
    // NetworkPolicy gardener-resource-manager derives from the annotation.
    let open: Value = serde_json::from_str(
        service["metadata"]["annotations"]["networking.resources.gardener.cloud/from-world-to-ports"]
            .as_str()
            .expect("from-world-to-ports annotation"),
    )
    .expect("JSON ports");
    assert_eq!(
        open,
        serde_json::json!([{"port": 10250, "protocol": "TCP"}])
    );

    // The certificate directory is a writable emptyDir (the root filesystem is read-only).
    let cert_dir = flag_value(&args, "--webhook-cert-dir");
    let mount = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["mountPath"] == cert_dir)
        .unwrap_or_else(|| panic!("nothing mounted at {cert_dir}"));
    assert_ne!(mount["readOnly"], true);
    let volume = deployment(&objects)["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount["name"])
        .expect("the cert dir's volume");
    assert!(volume["emptyDir"].is_object(), "{volume}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);

    // The configuration the chart owns: empty (the controller fills it in), and left alone by
    // gardener-resource-manager after it created it.
    let config = helm::find(
        &objects,
        "MutatingWebhookConfiguration",
        Some(CONFIGURATION),
    );
    assert!(config.get("webhooks").is_none(), "{config}");
    assert_eq!(
        config["metadata"]["annotations"]["resources.gardener.cloud/ignore"],
        "true"
    );

    // RBAC: the certificate Secret by name in the release namespace (create cannot be limited
    // by name), the configuration by name and only patch, so it cannot come back after
    // uninstalling.
    let role = helm::find(&objects, "Role", Some(NAME));
    assert_eq!(
        grants_on(&role["rules"], "secrets"),
        BTreeSet::from([
            grant("", "secrets", "create", ""),
            grant("", "secrets", "get", CERTS_SECRET),
            grant("", "secrets", "update", CERTS_SECRET),
        ])
    );
    let cluster_role = helm::find(&objects, "ClusterRole", None);
    assert_eq!(
        grants_on(&cluster_role["rules"], "mutatingwebhookconfigurations"),
        BTreeSet::from([grant(
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "patch",
            CONFIGURATION
        )])
    );
    let admission: BTreeSet<_> = helm::named_grants(&cluster_role["rules"])
        .into_iter()
        .filter(|(g, _, _, _)| g == "admissionregistration.k8s.io")
        .collect();
    assert_eq!(admission.len(), 1, "{admission:?}");
}

#[test]
fn webhook_disabled_renders_none_of_it_and_disables_the_controller() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (disabled, expected) in [
        ("[heartbeat]", "--disable-controllers=heartbeat,osc-webhook"),
        ("[osc-webhook]", "--disable-controllers=osc-webhook"),
    ] {
        let values = values_file(
            &dir,
            "values.yaml",
            &format!("webhook:\n  enabled: false\ndisableControllers: {disabled}\n"),
        );
        let objects = helm::template(RELEASE, NAMESPACE, &[values.as_path()]);
        let args = args(&objects);
        assert!(args.contains(&expected.to_string()), "{args:?}");
        assert!(
            !args.iter().any(|a| a.starts_with("--webhook-")),
            "{args:?}"
        );
        assert_binary_accepts(&args);
        assert!(env_var(&objects, "WEBHOOK_CONFIG_NAMESPACE").is_none());
        let kinds = helm::kinds(&objects);
        assert!(
            !kinds
                .iter()
                .any(|k| k.starts_with("MutatingWebhookConfiguration/")
                    || k == &format!("Service/{NAME}")),
            "{kinds:?}"
        );
        let c = container(&objects);
        assert!(
            !c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "webhook")
        );
        assert!(c.get("volumeMounts").is_none(), "{c}");
        let role = helm::find(&objects, "Role", Some(NAME));
        assert!(grants_on(&role["rules"], "secrets").is_empty());
        let cluster_role = helm::find(&objects, "ClusterRole", None);
        assert!(grants_on(&cluster_role["rules"], "mutatingwebhookconfigurations").is_empty());
    }
}

/// A seed client acting as `user` (no groups besides `system:authenticated`).
async fn seed_client_as(env: &support::Env, user: &str) -> kube::Client {
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(&env.seed_kubeconfig).expect("seed kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_string());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("impersonating kubeconfig");
    kube::Client::try_from(config).expect("impersonating client")
}

/// The chart's rule on the webhook configuration, on the real API server: the server-side
/// apply the controller sends fills in the configuration the chart created, but cannot create
/// it (an apply that creates is authorised as `create`), so a configuration that uninstalling
/// deleted stays deleted. Names are this test's own, and the webhook selects a label no
/// namespace carries, so that the configuration never reaches other tests' objects.
#[tokio::test]
async fn the_controller_may_fill_in_the_charts_webhook_configuration_but_not_create_it() {
    use gardener_extension_containerd_shim::gardener::webhook::registration::Endpoint;
    use gardener_extension_containerd_shim::shim::osc_webhook::{PATH, configuration};
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    let c = support::Clusters::connect().await;
    let objects = helm::template(RELEASE, NAMESPACE, &[]);
    let name = support::unique_name("containerd-shim-osc");
    let user = support::unique_name("chart-webhook-user");

    // The chart's MutatingWebhookConfiguration rule, for this test's configuration only.
    let rule = helm::find(&objects, "ClusterRole", None)["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["resources"] == serde_json::json!(["mutatingwebhookconfigurations"]))
        .expect("a rule on mutatingwebhookconfigurations")
        .clone();
    assert_eq!(rule["resourceNames"], serde_json::json!([CONFIGURATION]));
    let mut rule = rule;
    rule["resourceNames"] = serde_json::json!([name]);
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user}, "rules": [rule],
    }))
    .expect("ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("ClusterRoleBinding");
    let roles: Api<ClusterRole> = Api::all(c.seed.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(c.seed.clone());
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("ClusterRole");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("ClusterRoleBinding");

    // The controller's own configuration (service mode, as the chart runs it), renamed.
    let endpoint = Endpoint::Service {
        namespace: NAMESPACE.into(),
        name: NAME.into(),
        port: 443,
    };
    let mut desired = configuration(
        &endpoint,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    );
    desired.metadata.name = Some(name.clone());
    for webhook in desired.webhooks.iter_mut().flatten() {
        webhook.namespace_selector = Some(
            serde_json::from_value(serde_json::json!({"matchLabels": {name.clone(): "true"}}))
                .expect("selector"),
        );
    }
    let as_controller: Api<MutatingWebhookConfiguration> =
        Api::all(seed_client_as(&c.env, &user).await);
    let admin: Api<MutatingWebhookConfiguration> = Api::all(c.seed.clone());
    let apply = || {
        let api = as_controller.clone();
        let desired = desired.clone();
        let name = name.clone();
        async move {
            api.patch(
                &name,
                &PatchParams::apply("gardener-extension-containerd-shim").force(),
                &Patch::Apply(&desired),
            )
            .await
        }
    };
    let refused_create = |result: Result<MutatingWebhookConfiguration, kube::Error>| match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            assert!(
                status.message.contains("cannot create resource"),
                "{}",
                status.message
            );
        }
        other => panic!("an apply of a missing configuration was not refused: {other:?}"),
    };

    // Without the chart's object, the apply is an attempt to create it: refused. The rule is
    // in effect once a patch of an existing object passes (below); poll until then so that a
    // refusal here is not just RBAC not having seen the binding yet.
    let mut skeleton: MutatingWebhookConfiguration = serde_json::from_value(
        helm::find(
            &objects,
            "MutatingWebhookConfiguration",
            Some(CONFIGURATION),
        )
        .clone(),
    )
    .expect("the chart's MutatingWebhookConfiguration");
    skeleton.metadata.name = Some(name.clone());
    poll::until(
        "the chart's rule to take effect",
        poll::DEFAULT_TIMEOUT,
        || async {
            admin
                .create(&PostParams::default(), &skeleton)
                .await
                .map_err(|e| e.to_string())?;
            let result = apply().await.map_err(|e| e.to_string());
            admin
                .delete(&name, &DeleteParams::default())
                .await
                .map_err(|e| e.to_string())?;
            gone(&admin, &name).await;
            result
        },
    )
    .await;
    refused_create(apply().await);

    // Helm (or gardener-resource-manager) creates the empty object; the apply fills it in and
    // keeps the release's labels.
    admin
        .create(&PostParams::default(), &skeleton)
        .await
        .expect("the chart's configuration");
    let applied = apply().await.expect("apply to the chart's configuration");
    let webhook = &applied.webhooks.as_ref().expect("webhooks")[0];
    let ca = webhook.client_config.ca_bundle.as_ref().expect("caBundle");
    assert!(!ca.0.is_empty());
    let service = webhook.client_config.service.as_ref().expect("service");
    assert_eq!(
        (
            service.namespace.as_str(),
            service.name.as_str(),
            service.port,
            service.path.as_deref()
        ),
        (NAMESPACE, NAME, Some(443), Some(PATH))
    );
    assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
    let labels = applied.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("app.kubernetes.io/instance").map(String::as_str),
        Some(RELEASE),
        "{labels:?}"
    );
    apply().await.expect("a second apply (the resync)");

    // Uninstalling deletes it; the controller cannot bring it back.
    admin
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    gone(&admin, &name).await;
    refused_create(apply().await);

    bindings
        .delete(&user, &DeleteParams::default())
        .await
        .expect("delete ClusterRoleBinding");
    roles
        .delete(&user, &DeleteParams::default())
        .await
        .expect("delete ClusterRole");
}

async fn gone<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    poll::until(
        &format!("{name} to be gone"),
        poll::DEFAULT_TIMEOUT,
        || async {
            match api.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("still there".to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}
