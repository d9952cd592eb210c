//! providerConfig decoding, validation, desired-set conversion and rendering: whatever a shoot
//! owner writes, the controller answers with a bundle or a configuration error, never a panic.
//!
//! Input: first byte selects the encoding (even: JSON, odd: YAML as the offline renderer reads
//! it), the second how many worker pools the Shoot has; the rest is the providerConfig text.
#![no_main]

use gardener_extension_containerd_shim::gardener::api::{ErrorCode, Extension};
use gardener_extension_containerd_shim::gardener::error_codes::CodedError;
use gardener_extension_containerd_shim::shim::config::{self, decode};
use gardener_extension_containerd_shim::shim::offline::{OfflineError, render_extension};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

mod common;

use common::{fixtures, shoot};

fuzz_target!(|data: &[u8]| {
    let [encoding, pools, rest @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (catalog, images) = fixtures();
    let shoot = shoot(*pools);
    let value = if encoding % 2 == 0 {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => v,
            Err(_) => return,
        }
    } else {
        // The YAML path decodes on its own; then the same value goes through the JSON path.
        match decode::decode_yaml(text) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.codes(), vec![ErrorCode::ConfigurationProblem]),
        }
        match serde_saphyr_value(text) {
            Some(v) => v,
            None => return,
        }
    };
    // Decoding and validation alone: every rejection is the shoot owner's to fix.
    if let Err(e) = config::load(Some(&value), catalog, &shoot) {
        assert_eq!(e.codes(), vec![ErrorCode::ConfigurationProblem], "{e}");
        assert!(!e.errors.is_empty(), "an error without problems");
        for problem in &e.errors {
            assert!(problem.path.starts_with("providerConfig"), "{problem}");
        }
    }
    // The whole pipeline the actuator runs.
    let mut ext: Extension = serde_json::from_value(json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Extension",
        "metadata": {"name": "containerd-shim", "namespace": "shoot--fuzz--x"},
        "spec": {"type": "containerd-shim"}
    }))
    .expect("the fuzz Extension decodes");
    ext.spec.provider_config = Some(value);
    match render_extension(&ext, &shoot, catalog, images) {
        Ok(yaml) => assert!(yaml.starts_with("---\n"), "{yaml}"),
        Err(OfflineError::Extension { description, .. }) => {
            assert!(!description.is_empty())
        }
        Err(other) => panic!("unexpected error kind: {other}"),
    }
});

/// The YAML text as a JSON value, parsed the way `decode_yaml` and `render` parse it.
fn serde_saphyr_value(text: &str) -> Option<Value> {
    if text.len() > decode::MAX_BYTES {
        return None;
    }
    serde_saphyr::from_str::<Value>(text).ok()
}
