//! A table of broken providerConfigs: each must fail with `ERR_CONFIGURATION_PROBLEM` and a
//! message that names the exact field path and the offending value.

use serde_json::{Value, json};

use super::test_support::{catalog, config, sha, shoot};
use super::types::{API_VERSION, KIND};
use crate::gardener::api::common::ErrorCode;
use crate::gardener::error_codes::CodedError;

struct Case {
    name: &'static str,
    provider_config: Value,
    path: &'static str,
    value: &'static str,
}

fn custom(binary: Value) -> Value {
    json!({
        "name": "foo",
        "custom": {"runtimeType": "io.containerd.foo.v1", "version": "v1", "binaries": [binary]},
        "workerPools": ["worker-a"]
    })
}

fn url_binary(url: &str, sha256: &str) -> Value {
    json!({"name": "containerd-shim-foo-v1", "url": {"amd64": {"url": url, "sha256": sha256}}})
}

fn image_binary(reference: &str, path: &str) -> Value {
    json!({"name": "containerd-shim-foo-v1", "image": {"ref": reference, "path": path}})
}

fn one(shim: Value) -> Value {
    config(json!([shim]))
}

/// A providerConfig whose one custom shim would pass but for what `spoil` changes.
fn custom_spoiled(spoil: impl FnOnce(&mut Value)) -> Value {
    let mut shim = custom(image_binary("example.com/foo:v1", "/foo"));
    spoil(&mut shim);
    one(shim)
}

fn rollout(rollout: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND, "rollout": rollout})
}

fn cases() -> Vec<Case> {
    let good_url = "https://example.com/shim";
    let osc = |shim: Value| {
        let mut config = one(shim);
        config["delivery"] = json!("osc");
        config
    };
    vec![
        Case {
            name: "unknown delivery",
            provider_config: json!({"apiVersion": API_VERSION, "kind": KIND, "delivery": "agent"}),
            path: "providerConfig.delivery",
            value: "agent",
        },
        Case {
            name: "a node selector within a pool with delivery osc",
            provider_config: osc(json!({"name": "crun", "nodeSelector": {"example.com/kvm": "true"}})),
            path: "providerConfig.shims[0].nodeSelector",
            value: "example.com/kvm: true",
        },
        Case {
            name: "a binary from a URL with delivery osc",
            provider_config: osc(custom(url_binary(good_url, &sha('a')))),
            path: "providerConfig.shims[0].custom.binaries[0].url",
            value: "containerd-shim-foo-v1",
        },
        Case {
            name: "unknown field in a shim",
            provider_config: one(json!({"name": "spin", "hanlder": "x"})),
            path: "providerConfig.shims[0].hanlder",
            value: "hanlder",
        },
        Case {
            name: "unknown top-level field",
            provider_config: json!({"apiVersion": API_VERSION, "kind": KIND, "shimz": []}),
            path: "providerConfig.shimz",
            value: "shimz",
        },
        Case {
            name: "unknown field in runtimeClass",
            provider_config: one(json!({"name": "spin", "runtimeClass": {"handlr": "x"}})),
            path: "providerConfig.shims[0].runtimeClass.handlr",
            value: "handlr",
        },
        Case {
            name: "wrong apiVersion",
            provider_config: json!({"apiVersion": "example.com/v1", "kind": KIND}),
            path: "providerConfig.apiVersion",
            value: "\"example.com/v1\"",
        },
        Case {
            name: "wrong kind",
            provider_config: json!({"apiVersion": API_VERSION, "kind": "ShimConfig"}),
            path: "providerConfig.kind",
            value: "\"ShimConfig\"",
        },
        Case {
            name: "duplicate shim names",
            provider_config: config(json!([{"name": "spin"}, {"name": "spin"}])),
            path: "providerConfig.shims[1].name",
            value: "\"spin\"",
        },
        Case {
            name: "duplicate handlers",
            provider_config: config(json!([
                {"name": "spin"},
                {"name": "spin-old", "catalog": {"name": "spin"}, "runtimeClass": {"name": "spin-old"}}
            ])),
            path: "providerConfig.shims[1].runtimeClass.handler",
            value: "\"spin\"",
        },
        Case {
            name: "duplicate RuntimeClass names",
            provider_config: config(json!([
                {"name": "spin"},
                {"name": "wasmtime", "workerPools": ["worker-a"], "runtimeClass": {"name": "wasmtime-spin-v2"}}
            ])),
            path: "providerConfig.shims[1].runtimeClass.name",
            value: "\"wasmtime-spin-v2\"",
        },
        Case {
            name: "handler is not a DNS-1123 label",
            provider_config: one(json!({"name": "spin", "runtimeClass": {"handler": "Spin_V2"}})),
            path: "providerConfig.shims[0].runtimeClass.handler",
            value: "\"Spin_V2\"",
        },
        Case {
            name: "handler runc is reserved",
            provider_config: one(json!({"name": "spin", "runtimeClass": {"handler": "runc"}})),
            path: "providerConfig.shims[0].runtimeClass.handler",
            value: "\"runc\"",
        },
        Case {
            name: "RuntimeClass name is not a DNS-1123 subdomain",
            provider_config: one(json!({"name": "spin", "runtimeClass": {"name": "Bad_Name"}})),
            path: "providerConfig.shims[0].runtimeClass.name",
            value: "\"Bad_Name\"",
        },
        Case {
            name: "non-https URL",
            provider_config: one(custom(url_binary("http://example.com/shim", &sha('a')))),
            path: "providerConfig.shims[0].custom.binaries[0].url.amd64.url",
            value: "\"http://example.com/shim\"",
        },
        Case {
            name: "URL with credentials",
            provider_config: one(custom(url_binary("https://u:p@example.com/shim", &sha('a')))),
            path: "providerConfig.shims[0].custom.binaries[0].url.amd64.url",
            value: "\"https://u:p@example.com/shim\"",
        },
        Case {
            name: "missing sha256",
            provider_config: one(custom(json!({
                "name": "containerd-shim-foo-v1", "url": {"amd64": {"url": good_url}}
            }))),
            path: "providerConfig.shims[0].custom.binaries[0].url.amd64.sha256",
            value: "is required but missing",
        },
        Case {
            name: "malformed sha256",
            provider_config: one(custom(url_binary(good_url, "xyz"))),
            path: "providerConfig.shims[0].custom.binaries[0].url.amd64.sha256",
            value: "\"xyz\"",
        },
        Case {
            name: "upper-case sha256",
            provider_config: one(custom(url_binary(good_url, &sha('A')))),
            path: "providerConfig.shims[0].custom.binaries[0].url.amd64.sha256",
            value: "\"AAAAAAAA",
        },
        Case {
            name: "URL without any architecture",
            provider_config: one(custom(json!({"name": "containerd-shim-foo-v1", "url": {}}))),
            path: "providerConfig.shims[0].custom.binaries[0].url",
            value: "{}",
        },
        Case {
            name: "URL download missing for an architecture of the pools",
            provider_config: one(json!({
                "name": "foo",
                "custom": {"runtimeType": "io.containerd.foo.v1", "version": "v1",
                           "binaries": [url_binary(good_url, &sha('a'))]}
            })),
            path: "providerConfig.shims[0].custom.binaries[0].url",
            value: "\"worker-b\"",
        },
        Case {
            name: "unknown catalog entry by shim name",
            provider_config: one(json!({"name": "foo"})),
            path: "providerConfig.shims[0].name",
            value: "\"foo\"",
        },
        Case {
            name: "unknown catalog entry",
            provider_config: one(json!({"name": "x", "catalog": {"name": "nope"}})),
            path: "providerConfig.shims[0].catalog.name",
            value: "\"nope\"",
        },
        Case {
            name: "unknown catalog version",
            provider_config: one(json!({"name": "spin", "catalog": {"name": "spin", "version": "v9"}})),
            path: "providerConfig.shims[0].catalog.version",
            value: "\"v9\"",
        },
        Case {
            name: "pool the Shoot does not have",
            provider_config: one(json!({"name": "spin", "workerPools": ["nope"]})),
            path: "providerConfig.shims[0].workerPools[0]",
            value: "\"nope\"",
        },
        Case {
            name: "pool with another CRI",
            provider_config: one(json!({"name": "spin", "workerPools": ["legacy"]})),
            path: "providerConfig.shims[0].workerPools[0]",
            value: "\"legacy\"",
        },
        Case {
            name: "empty pool list",
            provider_config: one(json!({"name": "spin", "workerPools": []})),
            path: "providerConfig.shims[0].workerPools",
            value: "[]",
        },
        Case {
            name: "catalog shim on an architecture it does not support",
            provider_config: one(json!({"name": "wasmtime", "workerPools": ["worker-a", "worker-b"]})),
            path: "providerConfig.shims[0].workerPools[1]",
            value: "\"worker-b\"",
        },
        Case {
            name: "option key the shim does not accept",
            provider_config: one(json!({"name": "spin", "options": {"Foo": true}})),
            path: "providerConfig.shims[0].options[Foo]",
            value: "\"Foo\"",
        },
        Case {
            name: "option with the wrong type",
            provider_config: one(json!({"name": "spin", "options": {"SystemdCgroup": "yes"}})),
            path: "providerConfig.shims[0].options[SystemdCgroup]",
            value: "\"yes\"",
        },
        Case {
            name: "option fixed by the catalog",
            provider_config: one(json!({"name": "gvisor", "options": {"ConfigPath": "/etc/x.toml"}})),
            path: "providerConfig.shims[0].options[ConfigPath]",
            value: "\"ConfigPath\"",
        },
        Case {
            name: "custom option key that is not a TOML bare key",
            provider_config: custom_spoiled(|shim| shim["options"] = json!({"a.b": 1})),
            path: "providerConfig.shims[0].options[a.b]",
            value: "\"a.b\"",
        },
        Case {
            name: "path-like binary name",
            provider_config: one(custom(json!({
                "name": "../x", "url": {"amd64": {"url": good_url, "sha256": sha('a')}}
            }))),
            path: "providerConfig.shims[0].custom.binaries[0].name",
            value: "\"../x\"",
        },
        Case {
            name: "path-like shim name",
            provider_config: one(json!({"name": "../x", "catalog": {"name": "spin"}})),
            path: "providerConfig.shims[0].name",
            value: "\"../x\"",
        },
        Case {
            name: "path-like custom version",
            provider_config: custom_spoiled(|shim| shim["custom"]["version"] = json!("../v1")),
            path: "providerConfig.shims[0].custom.version",
            value: "\"../v1\"",
        },
        Case {
            name: "relative path in an image",
            provider_config: one(custom(image_binary("example.com/foo:v1", "bin/../foo"))),
            path: "providerConfig.shims[0].custom.binaries[0].image.path",
            value: "\"bin/../foo\"",
        },
        Case {
            name: "invalid image reference",
            provider_config: one(custom(image_binary("Example.com/Foo", "/foo"))),
            path: "providerConfig.shims[0].custom.binaries[0].image.ref",
            value: "\"Example.com/Foo\"",
        },
        Case {
            name: "malformed runtime type",
            provider_config: custom_spoiled(|shim| {
                shim["custom"]["runtimeType"] = json!("containerd-shim-foo-v1")
            }),
            path: "providerConfig.shims[0].custom.runtimeType",
            value: "\"containerd-shim-foo-v1\"",
        },
        Case {
            name: "custom shim claiming runc",
            provider_config: custom_spoiled(|shim| {
                shim["custom"]["runtimeType"] = json!("io.containerd.runc.v2")
            }),
            path: "providerConfig.shims[0].custom.runtimeType",
            value: "\"io.containerd.runc.v2\"",
        },
        Case {
            name: "custom shim without binaries",
            provider_config: custom_spoiled(|shim| shim["custom"]["binaries"] = json!([])),
            path: "providerConfig.shims[0].custom.binaries",
            value: "[]",
        },
        Case {
            name: "both catalog and custom",
            provider_config: custom_spoiled(|shim| shim["catalog"] = json!({"name": "spin"})),
            path: "providerConfig.shims[0]",
            value: "both catalog and custom",
        },
        Case {
            name: "binary with both image and url",
            provider_config: one(custom(json!({
                "name": "containerd-shim-foo-v1",
                "image": {"ref": "example.com/foo:v1", "path": "/foo"},
                "url": {"amd64": {"url": good_url, "sha256": sha('a')}}
            }))),
            path: "providerConfig.shims[0].custom.binaries[0]",
            value: "both image and url",
        },
        Case {
            name: "too many shims",
            provider_config: config(Value::Array(
                (0..17).map(|i| json!({"name": format!("s{i}"), "catalog": {"name": "spin"},
                                       "runtimeClass": {"name": format!("s{i}"), "handler": format!("s{i}")}}))
                    .collect(),
            )),
            path: "providerConfig.shims",
            value: "17 entries",
        },
        Case {
            name: "over-long string",
            provider_config: one(json!({"name": "x".repeat(5000)})),
            path: "providerConfig.shims[0].name",
            value: "5000 characters",
        },
        Case {
            name: "node selector key with invalid syntax",
            provider_config: one(json!({"name": "spin", "nodeSelector": {"bad key!": "x"}})),
            path: "providerConfig.shims[0].nodeSelector[bad key!]",
            value: "\"bad key!\"",
        },
        Case {
            name: "node selector value with invalid syntax",
            provider_config: one(json!({"name": "spin", "nodeSelector": {"example.com/x": "a b"}})),
            path: "providerConfig.shims[0].nodeSelector[example.com/x]",
            value: "\"a b\"",
        },
        Case {
            name: "node selector on the readiness label",
            provider_config: one(json!({"name": "spin",
                "nodeSelector": {"containerd-shim.extensions.gardener.cloud/spin": "ready"}})),
            path: "providerConfig.shims[0].nodeSelector[containerd-shim.extensions.gardener.cloud/spin]",
            value: "\"containerd-shim.extensions.gardener.cloud/spin\"",
        },
        Case {
            name: "overhead that is not a quantity",
            provider_config: one(json!({"name": "spin",
                "runtimeClass": {"overhead": {"podFixed": {"cpu": "lots"}}}})),
            path: "providerConfig.shims[0].runtimeClass.overhead.podFixed.cpu",
            value: "\"lots\"",
        },
        Case {
            name: "negative overhead",
            provider_config: one(json!({"name": "spin",
                "runtimeClass": {"overhead": {"podFixed": {"memory": "-1Mi"}}}})),
            path: "providerConfig.shims[0].runtimeClass.overhead.podFixed.memory",
            value: "\"-1Mi\"",
        },
        Case {
            name: "toleration with Exists and a value",
            provider_config: one(json!({"name": "spin",
                "runtimeClass": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}})),
            path: "providerConfig.shims[0].runtimeClass.tolerations[0].value",
            value: "\"v\"",
        },
        Case {
            name: "toleration with an unknown effect",
            provider_config: one(json!({"name": "spin",
                "runtimeClass": {"tolerations": [{"key": "k", "effect": "Sometimes"}]}})),
            path: "providerConfig.shims[0].runtimeClass.tolerations[0].effect",
            value: "Sometimes",
        },
        Case {
            name: "pod annotation wildcard for everything",
            provider_config: one(json!({"name": "spin", "podAnnotations": ["*"]})),
            path: "providerConfig.shims[0].podAnnotations[0]",
            value: "\"*\"",
        },
        Case {
            name: "zero concurrent restarts",
            provider_config: rollout(json!({"maxConcurrentRestarts": 0})),
            path: "providerConfig.rollout.maxConcurrentRestarts",
            value: "0",
        },
        Case {
            name: "maxUnavailable above 100%",
            provider_config: rollout(json!({"maxUnavailable": "150%"})),
            path: "providerConfig.rollout.maxUnavailable",
            value: "\"150%\"",
        },
        Case {
            name: "maxUnavailable zero",
            provider_config: rollout(json!({"maxUnavailable": 0})),
            path: "providerConfig.rollout.maxUnavailable",
            value: "0",
        },
    ]
}

#[test]
fn every_bad_config_names_path_and_value_with_configuration_problem() {
    let catalog = catalog();
    let shoot = shoot();
    let cases = cases();
    assert!(cases.len() >= 30, "the table should stay broad");
    for case in cases {
        let err = match super::load(Some(&case.provider_config), &catalog, &shoot) {
            Ok(_) => panic!("{}: accepted", case.name),
            Err(err) => err,
        };
        assert_eq!(
            err.codes(),
            vec![ErrorCode::ConfigurationProblem],
            "{}",
            case.name
        );
        let matching: Vec<_> = err.errors.iter().filter(|e| e.path == case.path).collect();
        assert!(
            matching.iter().any(|e| e.detail.contains(case.value)),
            "{}: no error at {} mentioning {}; got:\n{err}",
            case.name,
            case.path,
            case.value
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("{}: ", case.path)) && message.contains(case.value),
            "{}: message lacks path or value:\n{message}",
            case.name
        );
        assert_eq!(
            err.errors.len(),
            1,
            "{}: expected exactly one problem, got:\n{err}",
            case.name
        );
    }
}

#[test]
fn all_problems_are_reported_together() {
    let provider_config = config(json!([
        {"name": "spin", "runtimeClass": {"handler": "Spin_V2"}},
        {"name": "wasmtime", "workerPools": ["nope"], "options": {"Foo": 1}},
        {"name": "unknown"}
    ]));
    let err = super::load(Some(&provider_config), &catalog(), &shoot()).unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "providerConfig.shims[0].runtimeClass.handler",
            "providerConfig.shims[1].workerPools[0]",
            "providerConfig.shims[1].options[Foo]",
            "providerConfig.shims[2].name",
        ],
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("providerConfig.shims[0].runtimeClass.handler: \"Spin_V2\" is not a valid DNS-1123 label"),
        "{err}"
    );
}

#[test]
fn a_shoot_without_an_admission_policy_api_is_refused_naming_its_version() {
    let mut old = shoot();
    old.spec.kubernetes.version = "1.28.15".into();
    let provider_config = config(json!([{"name": "spin"}]));
    let err = super::load(Some(&provider_config), &catalog(), &old).unwrap_err();
    assert_eq!(err.codes(), vec![ErrorCode::ConfigurationProblem]);
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["Shoot.spec.kubernetes.version"], "{err}");
    assert!(err.to_string().contains("\"1.28.15\" is too old"), "{err}");
}

#[test]
fn the_operators_custom_shim_rules_are_enforced_naming_field_and_value() {
    use super::custom_policy::CustomShimPolicy;
    let strict = |allowed: bool| {
        let mut catalog = catalog();
        catalog.custom_shims = CustomShimPolicy::new(
            allowed,
            &["github.com".to_string()],
            &["ghcr.io/example".to_string()],
        )
        .unwrap();
        catalog
    };

    let url_shim = one(custom(url_binary("https://evil.example/shim", &sha('a'))));
    let err = super::load(Some(&url_shim), &strict(true), &shoot()).unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(
        err.errors[0].path,
        "providerConfig.shims[0].custom.binaries[0].url.amd64.url"
    );
    assert!(
        err.errors[0]
            .detail
            .starts_with("\"https://evil.example/shim\" downloads from host \"evil.example\""),
        "{err}"
    );
    let github = one(custom(url_binary("https://github.com/o/r/shim", &sha('a'))));
    assert!(super::load(Some(&github), &strict(true), &shoot()).is_ok());

    let image_shim = one(custom(image_binary("docker.io/someone/shim:v1", "/shim")));
    let err = super::load(Some(&image_shim), &strict(true), &shoot()).unwrap_err();
    assert_eq!(
        err.errors[0].path,
        "providerConfig.shims[0].custom.binaries[0].image.ref"
    );
    assert!(
        err.errors[0].detail.contains("\"docker.io/someone/shim\""),
        "{err}"
    );
    let ours = one(custom(image_binary("ghcr.io/example/shim:v1", "/shim")));
    assert!(super::load(Some(&ours), &strict(true), &shoot()).is_ok());

    let err = super::load(Some(&ours), &strict(false), &shoot()).unwrap_err();
    assert_eq!(err.codes(), vec![ErrorCode::ConfigurationProblem]);
    assert_eq!(err.errors[0].path, "providerConfig.shims[0].custom");
    assert!(
        err.errors[0].detail.contains("not allowed by the operator"),
        "{err}"
    );
    let catalog_shim = one(json!({"name": "spin"}));
    assert!(super::load(Some(&catalog_shim), &strict(false), &shoot()).is_ok());
}
