//! Properties over generated inputs: conversion is deterministic, every validation error is
//! rooted at `providerConfig`, and decoding arbitrary JSON never panics.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::desired::desired_shims;
use super::test_support::{catalog, config, shoot};
use super::{decode, images, load};

/// Arbitrary JSON, bounded in size and depth.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{0,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names and values a real providerConfig uses, so that generated configs get past the
/// first serde error often enough to exercise validation.
fn near_valid_shim() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("spin"),
        Just("wasmtime"),
        Just("gvisor"),
        Just("kata-qemu"),
        Just("foo"),
        Just("Bad_Name"),
        Just("../x"),
        Just(""),
    ];
    let handler = prop_oneof![
        Just(None),
        Just(Some("runc")),
        Just(Some("h1")),
        Just(Some("H!"))
    ];
    let pools = prop_oneof![
        Just(None),
        Just(Some(vec!["worker-a"])),
        Just(Some(vec!["worker-b"])),
        Just(Some(vec!["legacy"])),
        Just(Some(vec!["nope", "worker-a"])),
        Just(Some(vec![])),
    ];
    let option = prop_oneof![
        Just(None),
        Just(Some(("SystemdCgroup", json!(true)))),
        Just(Some(("SystemdCgroup", json!("yes")))),
        Just(Some(("ConfigPath", json!("/x")))),
        Just(Some(("Unknown", json!(1)))),
    ];
    let custom = prop_oneof![
        Just(None),
        Just(Some(
            json!({"runtimeType": "io.containerd.foo.v1", "version": "v1",
            "binaries": [{"name": "containerd-shim-foo-v1",
                          "image": {"ref": "example.com/foo:v1", "path": "/foo"}}]})
        )),
        Just(Some(json!({"runtimeType": "bad", "version": "../x",
            "binaries": [{"name": "../x", "url": {"amd64": {"url": "http://x", "sha256": "no"}}}]}))),
    ];
    (name, handler, pools, option, custom).prop_map(|(name, handler, pools, option, custom)| {
        let mut shim = json!({"name": name});
        if let Some(handler) = handler {
            shim["runtimeClass"] = json!({"handler": handler});
        }
        if let Some(pools) = pools {
            shim["workerPools"] = json!(pools);
        }
        if let Some((key, value)) = option {
            shim["options"] = json!({ key: value });
        }
        if let Some(custom) = custom {
            shim["custom"] = custom;
        }
        shim
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn conversion_is_deterministic(shims in prop::collection::vec(near_valid_shim(), 0..4)) {
        let provider_config = config(Value::Array(shims));
        let catalog = catalog();
        let shoot = shoot();
        let vector = images::embedded().unwrap();
        let first = load(Some(&provider_config), &catalog, &shoot);
        let second = load(Some(&provider_config.clone()), &catalog, &shoot);
        prop_assert_eq!(&first, &second);
        if let (Ok(a), Ok(b)) = (first, second) {
            let a = desired_shims(&a, &vector).map(|set| set.to_json());
            let b = desired_shims(&b, &vector).map(|set| set.to_json());
            prop_assert_eq!(a.ok(), b.ok());
        }
    }

    #[test]
    fn every_error_is_rooted_at_provider_config(shims in prop::collection::vec(near_valid_shim(), 0..4)) {
        let provider_config = config(Value::Array(shims));
        if let Err(err) = load(Some(&provider_config), &catalog(), &shoot()) {
            prop_assert!(!err.errors.is_empty());
            for error in &err.errors {
                prop_assert!(error.path.starts_with("providerConfig"), "{}", error);
                prop_assert!(error.to_string().starts_with("providerConfig"), "{}", error);
            }
        }
    }

    #[test]
    fn decoding_arbitrary_json_never_panics(value in any_json()) {
        let _ = decode::decode(Some(&value));
        let _ = load(Some(&value), &catalog(), &shoot());
    }

    #[test]
    fn decoding_arbitrary_shims_never_panics(shims in prop::collection::vec(any_json(), 0..4)) {
        let provider_config = config(Value::Array(shims));
        if let Err(err) = load(Some(&provider_config), &catalog(), &shoot()) {
            for error in &err.errors {
                prop_assert!(error.path.starts_with("providerConfig"), "{}", error);
            }
        }
    }
}
