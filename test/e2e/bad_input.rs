//! A catalogue of malformed providerConfigs and Extensions against the real binary. Each one the
//! API server stores must end with a clear `lastError` (naming the field, with
//! `ERR_CONFIGURATION_PROBLEM` where the shoot owner can fix it) or, where it is not ours, be
//! left alone; the process never panics and keeps serving: a good Extension created last
//! converges. What the API server refuses itself is recorded and checked at the decode layer.

use std::time::Duration;

use futures::StreamExt;
use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ErrorCode, Extension, OperationState,
};
use gardener_extension_containerd_shim::shim::config::decode;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::process::Replica;
use crate::support::{self, gardenlet, objects, poll};

const EXTENSION: &str = "containerd-shim";
const HEADER: &str = r#""apiVersion":"containerd-shim.extensions.gardener.cloud/v1alpha1","kind":"ContainerdShimConfig""#;

/// What must happen to one input.
#[derive(Clone, Debug)]
enum Expect {
    /// `lastOperation` Error and a `lastError` containing this text, coded
    /// `ERR_CONFIGURATION_PROBLEM`.
    ConfigProblem(&'static str),
    /// Not this controller's object (other class or type): no status, no finalizer.
    Ignored,
    /// The API server refuses it; the decode layer is checked instead.
    Rejected,
    /// Valid after all (the API server normalised it): converges.
    Converges,
}

struct Case {
    name: &'static str,
    /// The raw JSON text of `spec.providerConfig`, or `None` for no field at all.
    provider_config: Option<String>,
    /// Overrides of the Extension envelope.
    api_version: &'static str,
    kind: &'static str,
    spec_type: &'static str,
    class: Option<&'static str>,
    /// A query string for the create request (`fieldValidation=Strict`).
    query: &'static str,
    /// The Cluster's Shoot carries another extension's providerConfig nested 300 levels deep.
    deep_shoot: bool,
    expect: Expect,
}

fn case(name: &'static str, provider_config: impl Into<String>, expect: Expect) -> Case {
    Case {
        name,
        provider_config: Some(provider_config.into()),
        api_version: "extensions.gardener.cloud/v1alpha1",
        kind: "Extension",
        spec_type: EXTENSION,
        class: None,
        query: "",
        deep_shoot: false,
        expect,
    }
}

/// `{<header>, <rest>}`.
fn cfg(rest: &str) -> String {
    if rest.is_empty() {
        format!("{{{HEADER}}}")
    } else {
        format!("{{{HEADER},{rest}}}")
    }
}

fn shim(body: &str) -> String {
    cfg(&format!(r#""shims":[{body}]"#))
}

fn custom(binary: &str) -> String {
    shim(&format!(
        r#"{{"name":"foo","custom":{{"runtimeType":"io.containerd.foo.v1","version":"v1","binaries":[{binary}]}}}}"#
    ))
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

fn sha() -> String {
    "a".repeat(64)
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let mut cases = vec![
        // Wrong types.
        case(
            "shims is a string",
            cfg(r#""shims":"spin""#),
            ConfigProblem("providerConfig.shims"),
        ),
        case(
            "shims is an object",
            cfg(r#""shims":{"name":"spin"}"#),
            ConfigProblem("providerConfig.shims"),
        ),
        case(
            "shims is null",
            cfg(r#""shims":null"#),
            ConfigProblem("providerConfig.shims"),
        ),
        case(
            "a shim is null",
            cfg(r#""shims":[null]"#),
            ConfigProblem("providerConfig.shims[0]"),
        ),
        case(
            "a shim is a string",
            cfg(r#""shims":["spin"]"#),
            ConfigProblem("providerConfig.shims[0]"),
        ),
        case(
            "name is a number",
            shim(r#"{"name":123}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "runtimeClass is a list",
            shim(r#"{"name":"spin","runtimeClass":[]}"#),
            ConfigProblem("providerConfig.shims[0].runtimeClass"),
        ),
        case(
            "options is a list",
            shim(r#"{"name":"spin","options":["a"]}"#),
            ConfigProblem("providerConfig.shims[0].options"),
        ),
        case(
            "rollout is a string",
            cfg(r#""rollout":"fast""#),
            ConfigProblem("providerConfig.rollout"),
        ),
        case(
            "negative maxConcurrentRestarts",
            cfg(r#""rollout":{"maxConcurrentRestarts":-1}"#),
            ConfigProblem("providerConfig.rollout.maxConcurrentRestarts"),
        ),
        case(
            "maxConcurrentRestarts 1e30",
            cfg(r#""rollout":{"maxConcurrentRestarts":1e30}"#),
            ConfigProblem("providerConfig.rollout.maxConcurrentRestarts"),
        ),
        case(
            "float option",
            shim(r#"{"name":"spin","options":{"SystemdCgroup":1.5}}"#),
            ConfigProblem("providerConfig.shims[0].options[SystemdCgroup]"),
        ),
        case(
            "option integer beyond i64",
            shim(r#"{"name":"spin","options":{"SystemdCgroup":99999999999999999999999}}"#),
            ConfigProblem("providerConfig.shims[0].options[SystemdCgroup]"),
        ),
        case(
            "option is an object",
            shim(r#"{"name":"spin","options":{"SystemdCgroup":{"a":1}}}"#),
            ConfigProblem("providerConfig.shims[0].options[SystemdCgroup]"),
        ),
        // Huge values.
        case(
            "1 MiB shim name",
            shim(&format!(r#"{{"name":"{}"}}"#, "x".repeat(1 << 20))),
            // Longer than the controller parses at all.
            ConfigProblem("providerConfig: cannot be decoded: its text is 1048"),
        ),
        case(
            "200 KiB shim name",
            shim(&format!(r#"{{"name":"{}"}}"#, "x".repeat(200 << 10))),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "10 000 shims",
            cfg(&format!(
                r#""shims":[{}]"#,
                vec![r#"{"name":"spin"}"#; 10_000].join(",")
            )),
            ConfigProblem("providerConfig.shims: 10000 entries exceed"),
        ),
        case(
            "65 option keys",
            shim(&format!(
                r#"{{"name":"spin","options":{{{}}}}}"#,
                (0..65)
                    .map(|i| format!(r#""K{i}":true"#))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            ConfigProblem("providerConfig.shims[0].options: 65 keys exceed"),
        ),
        case(
            "5000-character option value",
            shim(&format!(
                r#"{{"name":"spin","options":{{"SystemdCgroup":"{}"}}}}"#,
                "y".repeat(5000)
            )),
            ConfigProblem("providerConfig.shims[0].options[SystemdCgroup]"),
        ),
        case(
            "nesting depth 20",
            shim(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(20)
            )),
            ConfigProblem("nesting exceeds the limit"),
        ),
        case(
            "nesting depth 100",
            shim(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(100)
            )),
            ConfigProblem("nesting exceeds the limit"),
        ),
        // Deeper than serde_json's default recursion limit (128) in the clients that decode it.
        case(
            "nesting depth 200",
            shim(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(200)
            )),
            ConfigProblem("nesting exceeds the limit"),
        ),
        // Unicode.
        case(
            "RTL override in a shim name",
            shim(r#"{"name":"\u202espin"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "zero-width space in a shim name",
            shim(r#"{"name":"spin\u200b"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "emoji shim name",
            shim(r#"{"name":"🚀"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "emoji handler",
            shim(r#"{"name":"spin","runtimeClass":{"handler":"spin-🚀"}}"#),
            ConfigProblem("providerConfig.shims[0].runtimeClass.handler"),
        ),
        case(
            "zero-width node selector key",
            shim(r#"{"name":"spin","nodeSelector":{"example.com/\u200bx":"y"}}"#),
            ConfigProblem("providerConfig.shims[0].nodeSelector"),
        ),
        case(
            "NUL in a shim name",
            shim(r#"{"name":"spin\u0000"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "empty shim name",
            shim(r#"{"name":""}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        // Path traversal.
        case(
            "../x as a shim name",
            shim(r#"{"name":"../x","catalog":{"name":"spin"}}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "../x as a binary name",
            custom(&format!(
                r#"{{"name":"../x","url":{{"amd64":{{"url":"https://example.com/x","sha256":"{}"}}}}}}"#,
                sha()
            )),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].name"),
        ),
        case(
            "/etc/passwd as a binary name",
            custom(&format!(
                r#"{{"name":"/etc/passwd","url":{{"amd64":{{"url":"https://example.com/x","sha256":"{}"}}}}}}"#,
                sha()
            )),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].name"),
        ),
        case(
            "traversal in an image path",
            custom(
                r#"{"name":"containerd-shim-foo-v1","image":{"ref":"example.com/foo:v1","path":"/opt/../../etc/shadow"}}"#,
            ),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].image.path"),
        ),
        case(
            "relative image path",
            custom(
                r#"{"name":"containerd-shim-foo-v1","image":{"ref":"example.com/foo:v1","path":"etc/passwd"}}"#,
            ),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].image.path"),
        ),
        case(
            "file URL",
            custom(&format!(
                r#"{{"name":"containerd-shim-foo-v1","url":{{"amd64":{{"url":"file:///etc/passwd","sha256":"{}"}}}}}}"#,
                sha()
            )),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].url.amd64.url"),
        ),
        case(
            "../ in a custom version",
            shim(&format!(
                r#"{{"name":"foo","custom":{{"runtimeType":"io.containerd.foo.v1","version":"../../v1","binaries":[{{"name":"containerd-shim-foo-v1","url":{{"amd64":{{"url":"https://example.com/x","sha256":"{}"}}}}}}]}}}}"#,
                sha()
            )),
            ConfigProblem("providerConfig.shims[0].custom.version"),
        ),
        // Wrong API.
        case(
            "unknown providerConfig apiVersion",
            r#"{"apiVersion":"containerd-shim.extensions.gardener.cloud/v9","kind":"ContainerdShimConfig"}"#,
            ConfigProblem("providerConfig.apiVersion"),
        ),
        case(
            "unknown providerConfig kind",
            r#"{"apiVersion":"containerd-shim.extensions.gardener.cloud/v1alpha1","kind":"ShimConfig"}"#,
            ConfigProblem("providerConfig.kind"),
        ),
        case(
            "no apiVersion or kind",
            r#"{"shims":[{"name":"spin"}]}"#,
            ConfigProblem("providerConfig.apiVersion: is missing"),
        ),
        case(
            "apiVersion is a number",
            r#"{"apiVersion":1,"kind":"ContainerdShimConfig"}"#,
            ConfigProblem("providerConfig.apiVersion"),
        ),
        case(
            "unknown top-level field",
            cfg(r#""shimz":[]"#),
            ConfigProblem("unknown field \"shimz\""),
        ),
        case(
            "unknown shim field",
            shim(r#"{"name":"spin","hanlder":"x"}"#),
            ConfigProblem("unknown field \"hanlder\""),
        ),
        // Semantics.
        case(
            "shim not in the catalog",
            shim(r#"{"name":"doesnotexist"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "unknown catalog version",
            shim(r#"{"name":"spin","catalog":{"name":"spin","version":"v0.0.0-nope"}}"#),
            ConfigProblem("providerConfig.shims[0].catalog.version"),
        ),
        case(
            "unknown worker pool",
            shim(r#"{"name":"spin","workerPools":["nope"]}"#),
            ConfigProblem("providerConfig.shims[0].workerPools[0]"),
        ),
        case(
            "duplicate shim names",
            cfg(r#""shims":[{"name":"spin"},{"name":"spin"}]"#),
            ConfigProblem("providerConfig.shims[1].name"),
        ),
        case(
            "reserved handler runc",
            shim(r#"{"name":"spin","runtimeClass":{"handler":"runc"}}"#),
            ConfigProblem("providerConfig.shims[0].runtimeClass.handler"),
        ),
        case(
            "overhead that is no quantity",
            shim(r#"{"name":"spin","runtimeClass":{"overhead":{"podFixed":{"cpu":"lots"}}}}"#),
            ConfigProblem("providerConfig.shims[0].runtimeClass.overhead.podFixed.cpu"),
        ),
        case(
            "toleration with an unknown operator",
            shim(
                r#"{"name":"spin","runtimeClass":{"tolerations":[{"key":"k","operator":"Sometimes"}]}}"#,
            ),
            ConfigProblem("providerConfig.shims[0].runtimeClass.tolerations[0]"),
        ),
        case(
            "non-https URL",
            custom(&format!(
                r#"{{"name":"containerd-shim-foo-v1","url":{{"amd64":{{"url":"http://example.com/x","sha256":"{}"}}}}}}"#,
                sha()
            )),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].url.amd64.url"),
        ),
        case(
            "malformed sha256",
            custom(
                r#"{"name":"containerd-shim-foo-v1","url":{"amd64":{"url":"https://example.com/x","sha256":"xyz"}}}"#,
            ),
            ConfigProblem("providerConfig.shims[0].custom.binaries[0].url.amd64.sha256"),
        ),
        // Duplicate keys: the API server keeps the last one by default (with a warning).
        case(
            "duplicate key, last one bad",
            cfg(r#""shims":[{"name":"spin"}],"shims":[{"name":"doesnotexist"}]"#),
            ConfigProblem("providerConfig.shims[0].name"),
        ),
        case(
            "duplicate key, last one good",
            cfg(r#""shims":[{"name":"doesnotexist"}],"shims":[{"name":"spin"}]"#),
            Converges,
        ),
        // What the API server refuses.
        case("providerConfig is a string", r#""spin""#, Rejected),
        case("providerConfig is a list", r#"[{"name":"spin"}]"#, Rejected),
        case("providerConfig is a number", "42", Rejected),
        case(
            "nesting depth 10 000",
            shim(&format!(
                r#"{{"name":"spin","options":{{"A":{}}}}}"#,
                nested(10_000)
            )),
            Rejected,
        ),
        Case {
            query: "?fieldValidation=Strict",
            ..case(
                "duplicate key with strict field validation",
                cfg(r#""shims":[],"shims":[]"#),
                Rejected,
            )
        },
        // Normalised by the API server: null for an object field is dropped, which is "no shims".
        case("providerConfig is null", "null", Converges),
    ];
    // The Extension envelope.
    cases.push(Case {
        class: Some("seed"),
        ..case("class seed", shim(r#"{"name":"spin"}"#), Ignored)
    });
    cases.push(Case {
        class: Some("bogus"),
        ..case("unknown class", shim(r#"{"name":"doesnotexist"}"#), Ignored)
    });
    cases.push(Case {
        spec_type: "containerd-shim-other",
        ..case("other type", shim(r#"{"name":"doesnotexist"}"#), Ignored)
    });
    cases.push(Case {
        api_version: "extensions.gardener.cloud/v9",
        ..case(
            "unknown Extension apiVersion",
            shim(r#"{"name":"spin"}"#),
            Rejected,
        )
    });
    cases.push(Case {
        kind: "Extensionz",
        ..case(
            "unknown Extension kind",
            shim(r#"{"name":"spin"}"#),
            Rejected,
        )
    });
    cases.push(Case {
        provider_config: None,
        ..case("no providerConfig at all", "", Converges)
    });
    // The Cluster is the shoot owner's too: another extension's providerConfig in the Shoot,
    // nested deeper than the JSON decoder's limit, must not stop this one.
    cases.push(Case {
        deep_shoot: true,
        ..case(
            "Shoot with a 300-level providerConfig of another extension",
            shim(r#"{"name":"spin"}"#),
            Converges,
        )
    });
    cases.push(Case {
        deep_shoot: true,
        ..case(
            "deep Shoot and a bad providerConfig",
            shim(r#"{"name":"doesnotexist"}"#),
            ConfigProblem("providerConfig.shims[0].name"),
        )
    });
    cases
}

/// The Extension as raw JSON (so duplicate keys and huge documents reach the API server as
/// written).
fn body(case: &Case, ns: &str, timestamp: &str) -> String {
    let class = case
        .class
        .map(|c| format!(r#","class":"{c}""#))
        .unwrap_or_default();
    let provider_config = case
        .provider_config
        .as_ref()
        .map(|p| format!(r#","providerConfig":{p}"#))
        .unwrap_or_default();
    format!(
        r#"{{"apiVersion":"{}","kind":"{}","metadata":{{"name":"{EXTENSION}","namespace":"{ns}","annotations":{{"gardener.cloud/operation":"reconcile","gardener.cloud/timestamp":"{timestamp}"}}}},"spec":{{"type":"{}"{class}{provider_config}}}}}"#,
        case.api_version, case.kind, case.spec_type
    )
}

/// POSTs the raw Extension; `Err` carries the API server's refusal.
async fn create_raw(seed: &Client, ns: &str, query: &str, body: String) -> Result<(), String> {
    let request = http::Request::post(format!(
        "/apis/extensions.gardener.cloud/v1alpha1/namespaces/{ns}/extensions{query}"
    ))
    .header("Content-Type", "application/json")
    .body(body.into_bytes())
    .map_err(|e| e.to_string())?;
    match seed.request_text(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(format!("{} {}", status.code, status.message)),
        Err(e) => Err(e.to_string()),
    }
}

async fn shoot_namespace(seed: &Client, test: &str, deep_shoot: bool) -> String {
    let ns = support::create_shoot_namespace(seed, test).await;
    let mut shoot = objects::shoot(&ns);
    if deep_shoot {
        // Built as a value: the JSON parser would refuse to read it back (its limit is 128).
        let mut deep = json!(1);
        for _ in 0..300 {
            deep = Value::Array(vec![deep]);
        }
        shoot["spec"]["extensions"] =
            json!([{"type": "other-extension", "providerConfig": {"a": deep}}]);
    }
    Api::<Cluster>::all(seed.clone())
        .create(&PostParams::default(), &objects::cluster(&ns, shoot))
        .await
        .unwrap_or_else(|e| panic!("create Cluster {ns}: {e}"));
    ns
}

/// Why the stored Extension does not (yet) show what the case expects.
fn judge(expect: &Expect, ext: &Extension) -> Result<(), String> {
    let status = ext.status.clone().unwrap_or_default();
    match expect {
        Expect::ConfigProblem(needle) => {
            let error = status.last_error.as_ref().ok_or("no lastError yet")?;
            let state = status.last_operation.as_ref().map(|o| o.state);
            if state != Some(OperationState::Error) {
                return Err(format!("lastOperation state {state:?}"));
            }
            if !error.description.contains(needle) {
                return Err(format!(
                    "lastError does not name {needle:?}: {}",
                    error.description
                ));
            }
            if !error.codes.contains(&ErrorCode::ConfigurationProblem) {
                return Err(format!("codes {:?}", error.codes));
            }
            if error.description.len() > 4096 {
                return Err(format!(
                    "lastError is {} bytes long",
                    error.description.len()
                ));
            }
            Ok(())
        }
        Expect::Ignored => {
            if ext.status.is_some() || !ext.finalizers().is_empty() {
                return Err(format!(
                    "touched: status {:?}, finalizers {:?}",
                    ext.status,
                    ext.finalizers()
                ));
            }
            Ok(())
        }
        Expect::Converges => gardenlet::check_extension_object(ext).map_err(|e| format!("{e:?}")),
        Expect::Rejected => Err("a rejected case has no object".into()),
    }
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_never_stops_the_controller() {
    let c = support::Clusters::connect().await;
    support::bundles::remove_leftovers(&c.seed, &c.shoot).await;
    let system = support::unique_name("extension-containerd-shim");
    support::create_namespace(&c.seed, &system, &[]).await;
    let controller = Replica::spawn(
        "controller",
        &c.env.seed_kubeconfig,
        &system,
        &["--healthcheck-period=5s"],
    );
    controller.wait_ready().await;
    let pid = controller.pid().expect("the controller runs");

    let cases = cases();
    let timestamp = jiff::Timestamp::now().to_string();
    // Create every case in a shoot namespace of its own.
    let created: Vec<(usize, String, Result<(), String>)> =
        futures::stream::iter(cases.iter().enumerate())
            .map(|(i, case)| {
                let seed = c.seed.clone();
                let timestamp = timestamp.clone();
                async move {
                    let ns = shoot_namespace(&seed, &format!("bad{i}"), case.deep_shoot).await;
                    let result =
                        create_raw(&seed, &ns, case.query, body(case, &ns, &timestamp)).await;
                    (i, ns, result)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;

    let mut rejected = Vec::new();
    let mut stored = Vec::new();
    for (i, ns, result) in created {
        let case = &cases[i];
        match (result, &case.expect) {
            (Err(refusal), Expect::Rejected) => rejected.push((case.name, refusal)),
            (Err(refusal), _) => panic!("the API server refused {:?}: {refusal}", case.name),
            (Ok(()), Expect::Rejected) => panic!(
                "the API server stored {:?}, which this catalogue expects it to refuse",
                case.name
            ),
            (Ok(()), _) => stored.push((i, ns)),
        }
    }
    eprintln!(
        "{} inputs, {} refused by the API server:",
        cases.len(),
        rejected.len()
    );
    for (name, refusal) in &rejected {
        let short: String = refusal.chars().take(200).collect();
        eprintln!("  refused: {name}: {short}");
    }

    // The good Extension, created last, converges while the bad ones fail and retry.
    let good = shoot_namespace(&c.seed, "good", false).await;
    let good_api: Api<Extension> = Api::namespaced(c.seed.clone(), &good);
    good_api
        .create(
            &PostParams::default(),
            &objects::extension(
                &good,
                EXTENSION,
                Some(
                    json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                            "kind": "ContainerdShimConfig", "shims": [{"name": "spin"}]}),
                ),
            ),
        )
        .await
        .expect("create the good Extension");
    let ts = gardenlet::request_reconcile(&good_api, EXTENSION).await;
    gardenlet::wait_ready(&good_api, EXTENSION, Some(&ts)).await;

    // Every stored case reaches its expected state.
    poll::until(
        "every stored input to reach its expected state",
        Duration::from_secs(120),
        || async {
            let mut wrong = Vec::new();
            for (i, ns) in &stored {
                let case = &cases[*i];
                let api: Api<Extension> = Api::namespaced(c.seed.clone(), ns);
                let ext = api.get(EXTENSION).await.map_err(|e| e.to_string())?;
                if let Err(why) = judge(&case.expect, &ext) {
                    let short: String = why.chars().take(300).collect();
                    wrong.push(format!("{}: {short}", case.name));
                }
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(format!("{} not there yet: {wrong:#?}", wrong.len()))
            }
        },
    )
    .await;
    for (i, ns) in &stored {
        let case = &cases[*i];
        let ext = Api::<Extension>::namespaced(c.seed.clone(), ns)
            .get(EXTENSION)
            .await
            .expect("get");
        if let Some(e) = ext.status.and_then(|s| s.last_error) {
            let short: String = e.description.chars().take(160).collect();
            eprintln!("  {}: {short}", case.name);
        }
    }

    // The process stayed up and never panicked.
    assert_eq!(controller.pid(), Some(pid), "the controller restarted");
    controller.wait_ready().await;
    let logs = controller.logs();
    assert!(!logs.contains("panicked"), "{logs}");
    // Still serving: a reconcile request on the good one is answered after all that.
    let ts = gardenlet::request_reconcile(&good_api, EXTENSION).await;
    gardenlet::wait_ready(&good_api, EXTENSION, Some(&ts)).await;

    // A new process starts with all of it in its first lists (a restart, an update, a
    // fail-over): it becomes ready and serves the good one again.
    drop(controller);
    let restarted = Replica::spawn(
        "controller-restarted",
        &c.env.seed_kubeconfig,
        &system,
        &["--healthcheck-period=5s"],
    );
    restarted.wait_ready().await;
    let ts = gardenlet::request_reconcile(&good_api, EXTENSION).await;
    gardenlet::wait_ready(&good_api, EXTENSION, Some(&ts)).await;
    let logs = restarted.logs();
    assert!(!logs.contains("panicked"), "{logs}");

    // The refused inputs, at the decode layer.
    decode_layer_refuses_what_the_api_server_refuses();
    assert!(
        cases.len() >= 40,
        "the catalogue must hold at least 40 inputs, has {}",
        cases.len()
    );
}

/// What the API server refuses (a providerConfig that is no object, nesting deeper than its
/// limit, duplicate keys under strict validation) still gets a clear answer from the decoder,
/// which the offline renderer and any other caller use.
fn decode_layer_refuses_what_the_api_server_refuses() {
    let message = |value: &Value| -> String {
        match decode::decode(Some(value)) {
            Ok(c) => panic!("decoded {value:.100}: {c:?}"),
            Err(e) => {
                assert_eq!(
                    gardener_extension_containerd_shim::gardener::error_codes::CodedError::codes(
                        &e
                    ),
                    vec![ErrorCode::ConfigurationProblem]
                );
                e.to_string()
            }
        }
    };
    for value in [
        json!("spin"),
        json!([{"name": "spin"}]),
        json!(42),
        json!(true),
    ] {
        let text = message(&value);
        assert!(
            text.contains("providerConfig: expected an object"),
            "{text}"
        );
    }
    // Depth 10 000, built without the JSON parser (whose own limit is 128 levels); decoded on
    // a thread with room for dropping it.
    let deep = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let mut value = json!(1);
            for _ in 0..10_000 {
                value = Value::Array(vec![value]);
            }
            let config = json!({
                "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                "kind": "ContainerdShimConfig",
                "shims": [{"name": "spin", "options": {"A": value}}]
            });
            decode::decode(Some(&config)).map_err(|e| e.to_string())
        })
        .expect("spawn")
        .join()
        .expect("decoding depth 10 000 must not crash");
    let text = deep.expect_err("depth 10 000 must be refused");
    assert!(
        text.contains("providerConfig.shims[0].options[A]") && text.contains("nesting exceeds"),
        "{text}"
    );
    // Duplicate keys cannot survive JSON decoding into a value (the last one wins, as in the
    // API server); in YAML, the offline renderer's format, they are an error.
    let yaml = "apiVersion: containerd-shim.extensions.gardener.cloud/v1alpha1\nkind: ContainerdShimConfig\nshims: []\nshims: []\n";
    let err = decode::decode_yaml(yaml).expect_err("duplicate YAML keys");
    assert!(err.to_string().contains("providerConfig"), "{err}");
}
