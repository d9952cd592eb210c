//! Hostile Extensions through the actuator's pure steps (`shim::plan`): reconcile and restore
//! (`install`), delete (`uninstall`), the health check (`health`) and the offline renderer.
//! Whatever the Extension holds, each step answers without a panic, and the contract holds:
//! an invalid providerConfig is a configuration error on reconcile, delete still renders an
//! uninstall bundle (with the safe defaults: one restart slot), and no bundle names more
//! restart-budget Leases than validation allows.
//!
//! Input: byte 0 picks the Shoot's pools, byte 1 the mode. Even mode: the rest is the
//! providerConfig's JSON text as the API server would send it in the Extension. Odd mode: the
//! rest fills a template with hostile numbers, list lengths and string lengths (see
//! `templated`), so that huge and negative values are reached without a grammar.
#![no_main]

use std::sync::OnceLock;

use gardener_extension_containerd_shim::gardener::api::{ErrorCode, Extension, Shoot};
use gardener_extension_containerd_shim::gardener::error_codes::CodedError;
use gardener_extension_containerd_shim::gardener::imagevector::ImageVector;
use gardener_extension_containerd_shim::gardener::managed_resource::Manifest;
use gardener_extension_containerd_shim::shim::config::Catalog;
use gardener_extension_containerd_shim::shim::config::validate::MAX_CONCURRENT_RESTARTS;
use gardener_extension_containerd_shim::shim::controllers::{
    CatalogOptions, load_catalog_and_images,
};
use gardener_extension_containerd_shim::shim::error::ShimError;
use gardener_extension_containerd_shim::shim::offline::{OfflineError, render_extension};
use gardener_extension_containerd_shim::shim::plan::Plan;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const HEADER: &str = r#""apiVersion":"containerd-shim.extensions.gardener.cloud/v1alpha1","kind":"ContainerdShimConfig""#;

fn fixtures() -> &'static (Catalog, ImageVector) {
    static FIXTURES: OnceLock<(Catalog, ImageVector)> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        load_catalog_and_images(&CatalogOptions::default())
            .expect("the built-in catalog and image vector load")
    })
}

fn shoot(pools: u8) -> Shoot {
    let names = ["worker-a", "worker-b", "arm", "gpu"];
    let workers: Vec<Value> = names
        .iter()
        .take(usize::from(pools % 4) + 1)
        .enumerate()
        .map(|(i, name)| {
            json!({"name": name, "cri": {"name": if i == 3 { "docker" } else { "containerd" }},
                   "machine": {"type": "m", "architecture": if *name == "arm" { "arm64" } else { "amd64" }},
                   "minimum": 1, "maximum": 3})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
        "metadata": {"name": "fuzz", "namespace": "garden-fuzz"},
        "spec": {"kubernetes": {"version": "1.33.4"}, "provider": {"type": "local", "workers": workers}}
    }))
    .expect("the fuzz Shoot decodes")
}

/// Reads `N` bytes (zero-padded) from the front of `data`.
fn take<const N: usize>(data: &mut &[u8]) -> [u8; N] {
    let mut out = [0; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    *data = &data[n..];
    out
}

/// A providerConfig with hostile values taken from `data`: the restart budget as any JSON
/// number, `maxUnavailable` as a huge count or a percentage, and lists, maps and strings of
/// lengths up to tens of thousands.
fn templated(mut data: &[u8]) -> String {
    let [kind, lists, strings, dup] = take::<4>(&mut data);
    let big = u64::from_le_bytes(take::<8>(&mut data));
    let restarts = match kind % 6 {
        0 => big.to_string(),
        1 => (big as i64).to_string(),
        2 => format!("{:e}", f64::from_bits(big)).replace("inf", "1e999"),
        3 => (big % 200).to_string(),
        4 => format!("\"{big}\""),
        _ => "null".to_string(),
    };
    let unavailable = match kind / 6 % 4 {
        0 => (big as i64).to_string(),
        1 => format!("\"{}%\"", big as i64),
        2 => format!("\"{}%\"", big % 120),
        _ => (big % 5).to_string(),
    };
    let n = usize::from(lists) * usize::from(lists);
    let len = usize::from(strings) * usize::from(strings) * 16;
    let name = match strings % 3 {
        0 => "spin".to_string(),
        1 => "wasmtime".to_string(),
        _ => "x".repeat(len),
    };
    let list = |item: &str| vec![item; n].join(",");
    let shim = match lists % 5 {
        0 => format!(r#"{{"name":"{name}","workerPools":[{}]}}"#, list(r#""worker-a""#)),
        1 => format!(
            r#"{{"name":"{name}","runtimeClass":{{"tolerations":[{}]}}}}"#,
            list(r#"{"operator":"Exists"}"#)
        ),
        2 => format!(
            r#"{{"name":"{name}","options":{{{}}}}}"#,
            (0..n)
                .map(|i| format!(r#""K{i}":{}"#, big as i64))
                .collect::<Vec<_>>()
                .join(",")
        ),
        3 => format!(r#"{{"name":"{name}","podAnnotations":[{}]}}"#, list(r#""a/*""#)),
        _ => format!(
            r#"{{"name":"{name}","options":{{"A":{}1{}}}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        ),
    };
    let rollout = format!(r#""rollout":{{"maxConcurrentRestarts":{restarts},"maxUnavailable":{unavailable}}}"#);
    let shims = format!(r#""shims":[{}]"#, vec![shim.as_str(); usize::from(dup % 20) + 1].join(","));
    if dup % 2 == 0 {
        format!("{{{HEADER},{shims},{rollout}}}")
    } else {
        // A key given twice: the last one counts, as in the API server.
        format!(r#"{{{HEADER},{shims},{rollout},"rollout":{{"maxConcurrentRestarts":3}}}}"#)
    }
}

/// The Extension as the controller decodes it from the API server's JSON; `None` when that is
/// no JSON (the API server would refuse it).
fn extension(provider_config: &str) -> Option<Extension> {
    let text = format!(
        r#"{{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Extension","metadata":{{"name":"containerd-shim","namespace":"shoot--fuzz--x"}},"spec":{{"type":"containerd-shim","providerConfig":{provider_config}}}}}"#
    );
    serde_json::from_str(&text).ok()
}

/// The restart-budget Lease names the bundle's Role grants.
fn role_leases(manifests: &[Manifest]) -> usize {
    manifests
        .iter()
        .map(Manifest::value)
        .filter(|v| v["kind"] == "Role")
        .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|rule| rule["resourceNames"].as_array().map(Vec::len))
        .sum()
}

fuzz_target!(|data: &[u8]| {
    let [pools, mode, rest @ ..] = data else {
        return;
    };
    let provider_config = if mode % 2 == 0 {
        match std::str::from_utf8(rest) {
            Ok(text) => text.to_string(),
            Err(_) => return,
        }
    } else {
        templated(rest)
    };
    let Some(ext) = extension(&provider_config) else {
        return;
    };
    let (catalog, images) = fixtures();
    let plan = Plan { catalog, images };
    let shoot = shoot(*pools);

    let install = plan.install(&ext, &shoot);
    let uninstall = match plan.uninstall(&ext, &shoot) {
        Ok(uninstall) => uninstall,
        Err(e) => panic!("delete failed on the providerConfig: {e}"),
    };
    let leases = role_leases(&uninstall.manifests);
    assert!(
        (1..=MAX_CONCURRENT_RESTARTS as usize).contains(&leases),
        "{leases} Leases"
    );
    match &install {
        Ok(manifests) => {
            assert!(uninstall.invalid_config.is_none());
            assert_eq!(role_leases(manifests), leases);
            assert!(plan.health(&ext, &shoot).is_some());
        }
        Err(ShimError::Config(e)) => {
            assert_eq!(e.codes(), vec![ErrorCode::ConfigurationProblem], "{e}");
            assert!(!e.errors.is_empty(), "an error without problems");
            assert!(uninstall.invalid_config.is_some());
            assert_eq!(leases, 1, "delete with an invalid config uses the safe default");
            assert!(plan.health(&ext, &shoot).is_none());
        }
        // The catalog's images for an architecture: the operator's to fix, not a crash.
        Err(ShimError::Images(_)) => assert!(plan.health(&ext, &shoot).is_none()),
        Err(other) => panic!("unexpected error: {other}"),
    }
    match (render_extension(&ext, &shoot, catalog, images), &install) {
        (Ok(yaml), Ok(_)) => assert!(yaml.starts_with("---\n")),
        (Err(OfflineError::Extension { description, .. }), Err(e)) => {
            assert!(!description.is_empty(), "{e}")
        }
        (rendered, install) => panic!(
            "render and reconcile disagree: {:?} / {:?}",
            rendered.map(|_| ()),
            install.as_ref().map(|_| ())
        ),
    }
});
