//! The admission webhook (`gardener-extension-containerd-shim admission`, the real binary) behind
//! the real Gardener API server, registered with the webhook configuration the chart's
//! `application` part renders. Each test has a Project of its own and scopes its webhook
//! configuration to that Project's namespace, so tests running in parallel (one of them takes its
//! webhook down) never see each other's Shoots.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::helm;
use crate::support::poll;
use crate::support::process::{BIN, free_port, http_get, sample};
use crate::world::{CORE, Garden, ours, pool, shoot};

const WEBHOOK: &str = "validation.containerd-shim.extensions.gardener.cloud";
const REVIEWS: &str = "containerd_shim_admission_reviews_total";
const TIMEOUT: Duration = Duration::from_secs(60);

/// The webhook server as a child process, serving the control plane's certificate for
/// 127.0.0.1 (signed by the CA the webhook configuration names).
struct Webhook {
    child: Child,
    port: u16,
    health_port: u16,
    log: tempfile::NamedTempFile,
}

impl Webhook {
    async fn start(dir: &Path, port: u16) -> Webhook {
        let log = tempfile::NamedTempFile::new().unwrap();
        let health_port = free_port();
        let pki = dir.join("pki");
        let child = Command::new(BIN)
            .arg("admission")
            .arg(format!("--webhook-bind-address=127.0.0.1:{port}"))
            .arg(format!("--health-bind-address=127.0.0.1:{health_port}"))
            .arg(format!(
                "--tls-cert-file={}",
                pki.join("serving.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.join("serving.key").display()
            ))
            .arg("--log-format=text")
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        let webhook = Webhook {
            child,
            port,
            health_port,
            log,
        };
        poll::until("the webhook to be ready", TIMEOUT, || async {
            match http_get(webhook.health_port, "/readyz").await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; log:\n{}", webhook.logs())),
            }
        })
        .await;
        webhook
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Every review answered so far, whatever the outcome.
    async fn reviews(&self) -> f64 {
        let (_, metrics) = http_get(self.health_port, "/metrics").await.unwrap();
        [
            "allowed",
            "allowed_unchanged",
            "refused",
            "not_ours",
            "undecodable",
        ]
        .iter()
        .filter_map(|o| sample(&metrics, &format!("{REVIEWS}{{outcome=\"{o}\"}}")))
        .sum()
    }

    /// SIGTERM, and the exit it leads to.
    async fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let exited = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the webhook did not exit within {TIMEOUT:?} of SIGTERM; log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(exited.success(), "{exited}; log:\n{}", self.logs());
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- webhook log ---\n{}", self.logs());
        }
    }
}

/// The chart's webhook configuration for a webhook at 127.0.0.1:`port`, under a name of its
/// own and scoped to the test's Project namespace.
async fn register(garden: &Garden, namespace: &str, port: u16, policy: &str) -> String {
    let name = format!("containerd-shim-admission-{namespace}");
    let chart = helm::repo_file("charts/admission/charts/application");
    let ca = garden.dir.join("pki/ca.crt");
    let rendered = helm::helm(&[
        "template",
        "admission",
        &chart.to_string_lossy(),
        "--namespace",
        "garden",
        "--set",
        &format!("global.name={name}"),
        "--set",
        &format!("global.webhook.url=https://127.0.0.1:{port}/webhooks/validate-shoots"),
        "--set",
        &format!("global.webhook.failurePolicy={policy}"),
        "--set-file",
        &format!("global.webhook.caBundle={}", ca.display()),
    ]);
    let mut object = helm::find(
        &helm::parse(&rendered),
        "ValidatingWebhookConfiguration",
        Some(&name),
    )
    .clone();
    let project = namespace.trim_start_matches("garden-");
    object["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"test.containerd-shim/project": project}});
    let object: ValidatingWebhookConfiguration = serde_json::from_value(object).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(garden.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    name
}

fn shoots(garden: &Garden, namespace: &str) -> Api<DynamicObject> {
    garden.api(CORE, "v1beta1", "Shoot", Some(namespace))
}

/// Creates the Shoot; `dry_run` leaves nothing behind. The API server's refusal as text.
async fn apply(api: &Api<DynamicObject>, object: &Value, dry_run: bool) -> Result<(), String> {
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("creating the Shoot: {e}"),
    }
}

fn workers() -> Value {
    json!([pool("amd", "amd64", &[]), pool("arm", "arm64", &["gvisor"])])
}

fn with_shims(namespace: &str, name: &str, shims: Value) -> Value {
    shoot(
        namespace,
        name,
        workers(),
        json!([{"type": "other"}, ours(shims)]),
    )
}

/// Waits until gardener-apiserver has picked up the webhook configuration: an invalid Shoot
/// is refused by our webhook.
async fn wait_active(api: &Api<DynamicObject>, namespace: &str) {
    let invalid = with_shims(
        namespace,
        "probe",
        json!([{"name": "crun", "workerPools": ["nope"]}]),
    );
    poll::until(
        "the webhook configuration to take effect",
        TIMEOUT,
        || async {
            match apply(api, &invalid, true).await {
                Err(message) if message.contains(WEBHOOK) => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
}

fn assert_refused(result: Result<(), String>, path: &str, value: &str) {
    let message = result.expect_err("the Shoot must be refused");
    assert!(
        message.contains(&format!(
            "admission webhook \"{WEBHOOK}\" denied the request"
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("{path}: {value}")),
        "want `{path}: {value}` in: {message}"
    );
}

#[tokio::test]
async fn each_mistake_is_refused_at_apply_with_its_path_and_value() {
    let garden = Garden::connect().await;
    let namespace = garden.project("refuse").await;
    let api = shoots(&garden, &namespace);
    let webhook = Webhook::start(&garden.dir, free_port()).await;
    register(&garden, &namespace, webhook.port, "Fail").await;
    wait_active(&api, &namespace).await;

    // Valid: crun on both pools, the gVisor runtime extension on the arm pool.
    let valid = with_shims(
        &namespace,
        "valid",
        json!([{"name": "crun", "workerPools": ["amd", "arm"]}]),
    );
    apply(&api, &valid, false).await.unwrap();

    // A pool the Shoot does not have.
    let missing = with_shims(
        &namespace,
        "missing",
        json!([{"name": "crun", "workerPools": ["amd", "gpu"]}]),
    );
    assert_refused(
        apply(&api, &missing, true).await,
        "spec.extensions[1].providerConfig.shims[0].workerPools[1]",
        "\"gpu\" is not a worker pool of the Shoot",
    );

    // The catalog's wasmtime has amd64 binaries only.
    let arch = with_shims(
        &namespace,
        "arch",
        json!([{"name": "wasmtime", "workerPools": ["arm"]}]),
    );
    let message = apply(&api, &arch, true).await.expect_err("refused");
    assert!(message.contains(WEBHOOK), "{message}");
    assert!(
        message.contains("spec.extensions[1].providerConfig.shims[0]"),
        "{message}"
    );
    assert!(message.contains("arm64"), "{message}");

    // The catalog's gVisor takes handler runsc and RuntimeClass gvisor: the runtime extension's
    // on the arm pool.
    let collision = with_shims(
        &namespace,
        "collision",
        json!([{"name": "gvisor", "workerPools": ["arm"]}]),
    );
    assert_refused(
        apply(&api, &collision, true).await,
        "spec.extensions[1].providerConfig.shims[0]",
        "\"runsc\" is the default handler of this shim and collides with the containerd runtime of spec.provider.workers[1].cri.containerRuntimes[0].type \"gvisor\"",
    );

    // A typo in the providerConfig itself.
    let typo = with_shims(
        &namespace,
        "typo",
        json!([{"name": "Crun", "workerPools": ["amd"]}]),
    );
    assert_refused(
        apply(&api, &typo, true).await,
        "spec.extensions[1].providerConfig.shims[0].name",
        "\"Crun\"",
    );

    // Another CRI than containerd: Gardener's own validation refuses it before webhooks run.
    let mut other_cri = valid.clone();
    other_cri["metadata"]["name"] = json!("other-cri");
    other_cri["spec"]["provider"]["workers"][0]["cri"]["name"] = json!("docker");
    let message = apply(&api, &other_cri, true).await.expect_err("refused");
    assert!(
        message.contains("spec.provider.workers[0].cri.name"),
        "{message}"
    );
}

#[tokio::test]
async fn shoots_without_the_extension_are_never_sent_to_the_webhook() {
    let garden = Garden::connect().await;
    let namespace = garden.project("unsent").await;
    let api = shoots(&garden, &namespace);
    let webhook = Webhook::start(&garden.dir, free_port()).await;
    register(&garden, &namespace, webhook.port, "Fail").await;
    wait_active(&api, &namespace).await;

    let before = webhook.reviews().await;
    let without = shoot(&namespace, "without", workers(), json!([{"type": "other"}]));
    apply(&api, &without, false).await.unwrap();
    let mut disabled = ours(json!([{"name": "crun", "workerPools": ["nope"]}]));
    disabled["disabled"] = json!(true);
    let switched_off = shoot(&namespace, "off", workers(), json!([disabled]));
    apply(&api, &switched_off, false).await.unwrap();
    shoots(&garden, &namespace)
        .patch(
            "without",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        webhook.reviews().await,
        before,
        "Shoots without the extension (or with it disabled) reached the webhook"
    );

    // The count does move for a Shoot with the extension.
    let with = with_shims(
        &namespace,
        "with",
        json!([{"name": "crun", "workerPools": ["amd"]}]),
    );
    apply(&api, &with, false).await.unwrap();
    assert_eq!(webhook.reviews().await, before + 1.0);
}

#[tokio::test]
async fn a_webhook_outage_follows_the_failure_policy() {
    let garden = Garden::connect().await;
    let namespace = garden.project("outage").await;
    let api = shoots(&garden, &namespace);
    let port = free_port();
    let mut webhook = Webhook::start(&garden.dir, port).await;
    let name = register(&garden, &namespace, port, "Fail").await;
    wait_active(&api, &namespace).await;
    webhook.stop().await;

    // Fail: a Shoot with the extension cannot be created, one without it can.
    let valid = with_shims(
        &namespace,
        "valid",
        json!([{"name": "crun", "workerPools": ["amd"]}]),
    );
    let message = apply(&api, &valid, true)
        .await
        .expect_err("refused while the webhook is down");
    assert!(
        message.contains(&format!("failed calling webhook \"{WEBHOOK}\"")),
        "{message}"
    );
    let without = shoot(&namespace, "without", workers(), json!([{"type": "other"}]));
    apply(&api, &without, false).await.unwrap();

    // Ignore: admitted unchecked, even an invalid one.
    let configs = Api::<ValidatingWebhookConfiguration>::all(garden.client.clone());
    set_policy(&configs, &name, "Ignore").await;
    let invalid = with_shims(
        &namespace,
        "invalid",
        json!([{"name": "crun", "workerPools": ["gone"]}]),
    );
    poll::until("the Ignore policy to take effect", TIMEOUT, || async {
        apply(&api, &invalid, false).await
    })
    .await;

    // Back up with Fail: the Shoot admitted while the webhook was down can still be changed in
    // fields the checks do not read, but not in the extension's configuration.
    let webhook = Webhook::start(&garden.dir, port).await;
    set_policy(&configs, &name, "Fail").await;
    wait_active(&api, &namespace).await;
    let before = webhook.reviews().await;
    api.patch(
        "invalid",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .expect("an unrelated change of an invalid Shoot is admitted");
    assert_eq!(
        webhook.reviews().await,
        before + 1.0,
        "the update was reviewed"
    );
    let still_invalid = json!({"spec": {"extensions": [
        {"type": "other"},
        ours(json!([{"name": "crun", "workerPools": ["elsewhere"]}]))]}});
    let refused = api
        .patch(
            "invalid",
            &PatchParams::default(),
            &Patch::Merge(still_invalid),
        )
        .await
        .expect_err("a change of the configuration must leave it valid");
    assert!(
        refused
            .to_string()
            .contains("\"elsewhere\" is not a worker pool"),
        "{refused}"
    );
}

async fn set_policy(configs: &Api<ValidatingWebhookConfiguration>, name: &str, policy: &str) {
    let mut config = configs.get(name).await.unwrap();
    for hook in config.webhooks.iter_mut().flatten() {
        hook.failure_policy = Some(policy.to_string());
    }
    configs
        .replace(name, &PostParams::default(), &config)
        .await
        .unwrap();
}
