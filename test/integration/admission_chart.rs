//! The admission chart (charts/admission: `application` for the garden's API server, `runtime`
//! for the webhook server) with the real helm: it lints, renders, and what it renders is what
//! the binary and the Gardener API server expect (the flags the `admission` subcommand accepts,
//! the webhook path it serves, the label Gardener puts on Shoots, a pod the restricted Pod
//! Security Standard admits, no API permissions at all). test/integration/admission_webhook.rs
//! runs the webhook behind a real Gardener API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use gardener_extension_containerd_shim::admission::server::WEBHOOK_PATH;
use gardener_extension_containerd_shim::shim::config::images;
use serde_json::Value;

// chart.rs includes the same helm helpers privately; a copy of our own keeps that file as it is.
#[allow(clippy::duplicate_mod)]
#[path = "../support/helm.rs"]
mod helm;

const RELEASE: &str = "containerd-shim-admission";
const NAMESPACE: &str = "garden";
const NAME: &str = "gardener-extension-containerd-shim-admission";
const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-containerd-shim");
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n";

fn chart() -> PathBuf {
    helm::repo_file("charts/admission")
}

/// Values every install needs: the CA bundle and the serving certificate.
const REQUIRED: &str = r#"
global:
  webhook:
    caBundle: |
      -----BEGIN CERTIFICATE-----
      MIIBca
      -----END CERTIFICATE-----
runtime:
  tls:
    crt: "-----BEGIN CERTIFICATE-----\nMIIBcrt\n-----END CERTIFICATE-----\n"
    key: "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n"
"#;

fn values(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn render(chart: &Path, files: &[&Path]) -> Result<Vec<Value>, String> {
    let chart = chart.to_string_lossy().into_owned();
    let mut args: Vec<String> = vec![
        "template".into(),
        RELEASE.into(),
        chart,
        "--namespace".into(),
        NAMESPACE.into(),
    ];
    for f in files {
        args.extend(["--values".into(), f.to_string_lossy().into_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = helm::helm_output(&args);
    if ok {
        Ok(helm::parse(&stdout))
    } else {
        Err(stderr)
    }
}

fn webhook(objects: &[Value]) -> &Value {
    &helm::find(objects, "ValidatingWebhookConfiguration", Some(NAME))["webhooks"][0]
}

fn container(objects: &[Value]) -> &Value {
    &helm::find(objects, "Deployment", Some(NAME))["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn admission_chart_and_its_parts_lint() {
    let dir = tempfile::tempdir().unwrap();
    let required = values(&dir, "required.yaml", REQUIRED);
    let umbrella = chart();
    let out = helm::helm(&[
        "lint",
        "--strict",
        &umbrella.to_string_lossy(),
        "--values",
        &required.to_string_lossy(),
    ]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
    // Each part alone, as gardener-operator installs them into different clusters.
    let application = values(
        &dir,
        "application.yaml",
        &format!("global:\n  webhook:\n    caBundle: {CA:?}\n"),
    );
    let runtime = values(
        &dir,
        "runtime.yaml",
        "tls:\n  secretName: admission-serving-cert\n",
    );
    for (part, file) in [("application", &application), ("runtime", &runtime)] {
        let path = umbrella.join("charts").join(part);
        let out = helm::helm(&[
            "lint",
            "--strict",
            &path.to_string_lossy(),
            "--values",
            &file.to_string_lossy(),
        ]);
        assert!(out.contains("0 chart(s) failed"), "{part}: {out}");
    }
}

#[test]
fn admission_chart_renders_a_webhook_for_labelled_shoots_only() {
    let dir = tempfile::tempdir().unwrap();
    let required = values(&dir, "required.yaml", REQUIRED);
    let objects = render(&chart(), &[&required]).unwrap();
    assert_eq!(
        helm::kinds(&objects),
        [
            format!("Deployment/{NAME}"),
            format!("PodDisruptionBudget/{NAME}"),
            format!("Secret/{NAME}-tls"),
            format!("Service/{NAME}"),
            format!("ServiceAccount/{NAME}"),
            format!("ValidatingWebhookConfiguration/{NAME}"),
            format!("VerticalPodAutoscaler/{NAME}"),
        ]
    );
    let hook = webhook(&objects);
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]));
    let rule = &hook["rules"][0];
    assert_eq!(
        rule["apiGroups"],
        serde_json::json!(["core.gardener.cloud"])
    );
    assert_eq!(rule["resources"], serde_json::json!(["shoots"]));
    assert_eq!(rule["operations"], serde_json::json!(["CREATE", "UPDATE"]));
    assert_eq!(
        hook["objectSelector"]["matchLabels"]["extensions.extensions.gardener.cloud/containerd-shim"],
        "true"
    );
    assert_eq!(
        hook["matchConditions"][0]["expression"],
        "!has(object.metadata.deletionTimestamp)"
    );
    let service = &hook["clientConfig"]["service"];
    assert_eq!(service["name"], NAME);
    assert_eq!(service["namespace"], NAMESPACE);
    assert_eq!(service["path"], WEBHOOK_PATH, "the path the server serves");
    let ca = hook["clientConfig"]["caBundle"].as_str().unwrap();
    assert!(!ca.contains("BEGIN"), "caBundle is base64: {ca}");

    // The Service reaches the container's HTTPS port, which the server listens on.
    let svc = helm::find(&objects, "Service", Some(NAME));
    assert_eq!(svc["spec"]["ports"][0]["port"], service["port"]);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "https");
    let c = container(&objects);
    let https = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "https")
        .unwrap();
    let args = args(&objects);
    assert_eq!(args[0], "admission");
    assert!(
        args.contains(&format!(
            "--webhook-bind-address=:{}",
            https["containerPort"]
        )),
        "{args:?}"
    );
    let output = Command::new(BIN)
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the binary refuses the chart's arguments {args:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The extension's own image: the admission is a subcommand of the controller binary.
    let vector = images::embedded().unwrap();
    let own = images::own_image(&vector, images::CONTROLLER_IMAGE).unwrap();
    assert_eq!(c["image"], own.to_string());
}

#[test]
fn admission_pods_are_restricted_and_hold_no_api_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let required = values(&dir, "required.yaml", REQUIRED);
    let objects = render(&chart(), &[&required]).unwrap();
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        assert!(
            !["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"].contains(&kind),
            "the webhook reads nothing from any API server, yet the chart grants: {object}"
        );
    }
    let pod = &helm::find(&objects, "Deployment", Some(NAME))["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &container(&objects)["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let account = helm::find(&objects, "ServiceAccount", Some(NAME));
    assert_eq!(account["automountServiceAccountToken"], false);
    let pdb = helm::find(&objects, "PodDisruptionBudget", Some(NAME));
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
}

#[test]
fn admission_chart_options_reach_webhook_and_server() {
    let dir = tempfile::tempdir().unwrap();
    let required = values(&dir, "required.yaml", REQUIRED);
    let options = values(
        &dir,
        "options.yaml",
        r#"
global:
  webhook:
    failurePolicy: Ignore
    url: https://admission.example.com/webhooks/validate-shoots
runtime:
  tls:
    secretName: managed-cert
  customShims:
    allowed: false
  shimCatalog:
    shims:
      kata-qemu: null
"#,
    );
    let objects = render(&chart(), &[&required, &options]).unwrap();
    let hook = webhook(&objects);
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(
        hook["clientConfig"]["url"],
        "https://admission.example.com/webhooks/validate-shoots"
    );
    assert!(hook["clientConfig"]["service"].is_null());
    assert!(
        !helm::kinds(&objects)
            .iter()
            .any(|k| k.starts_with("Secret/")),
        "an existing Secret is used, none rendered"
    );
    let args = args(&objects);
    assert!(args.contains(&"--allow-custom-shims=false".to_string()));
    assert!(args.contains(
        &"--shim-catalog-overlay=/etc/containerd-shim/catalog/catalog-overlay.yaml".to_string()
    ));
    let overlay = helm::find(&objects, "ConfigMap", Some(&format!("{NAME}-shim-catalog")));
    assert!(
        overlay["data"]["catalog-overlay.yaml"]
            .as_str()
            .unwrap()
            .contains("kata-qemu")
    );

    let wrong = values(
        &dir,
        "wrong.yaml",
        "global:\n  webhook:\n    failurePolicy: Maybe\n",
    );
    let err = render(&chart(), &[&required, &wrong]).unwrap_err();
    assert!(
        err.contains("failurePolicy must be Fail or Ignore"),
        "{err}"
    );
    // Neither part renders without what it cannot default.
    let app = helm::repo_file("charts/admission/charts/application");
    let err = render(&app, &[]).unwrap_err();
    assert!(err.contains("caBundle is required"), "{err}");
    let runtime = helm::repo_file("charts/admission/charts/runtime");
    let err = render(&runtime, &[]).unwrap_err();
    assert!(err.contains("tls.crt is required"), "{err}");
}
