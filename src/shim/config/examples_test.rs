//! Every file in `example/provider-config/` decodes, validates against a Shoot with the pool
//! `worker-a`, and converts to a desired set; and every catalog entry has an example.

use std::path::Path;

use super::test_support::{catalog, single_pool_shoot};
use super::{decode, desired, images, validate};

fn examples() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("example/provider-config");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_is_valid() {
    let catalog = catalog();
    let shoot = single_pool_shoot();
    let vector = images::embedded().unwrap();
    let examples = examples();
    assert!(!examples.is_empty());
    for (name, text) in examples {
        let config = decode::decode_yaml(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let validated =
            validate::validate(&config, &catalog, &shoot).unwrap_or_else(|e| panic!("{name}: {e}"));
        let set =
            desired::desired_shims(&validated, &vector).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!set.shims.is_empty(), "{name}");
        for shim in &set.shims {
            assert_eq!(shim.worker_pools, ["worker-a"], "{name}");
        }
    }
}

/// Kata is an operator's addition (example/kata/): its providerConfig is valid with the overlay
/// and the image vector entry next to it, and the built-in catalog alone refuses it.
#[test]
fn kata_example_is_valid_with_its_overlay_and_image() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("example/kata");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let config = decode::decode_yaml(&read("provider-config.yaml")).unwrap();
    let shoot = single_pool_shoot();
    assert!(validate::validate(&config, &catalog(), &shoot).is_err());
    let catalog = catalog()
        .with_overlay_yaml("kata", &read("shim-catalog-overlay.yaml"))
        .unwrap();
    let vector = images::embedded()
        .unwrap()
        .with_override_file(Some(&dir.join("imagevector-overwrite.yaml")))
        .unwrap();
    images::check_catalog_images(&vector, &catalog).unwrap();
    let validated = validate::validate(&config, &catalog, &shoot).unwrap();
    let set = desired::desired_shims(&validated, &vector).unwrap();
    assert_eq!(set.shims.len(), 1);
}

#[test]
fn every_catalog_entry_and_a_custom_shim_have_an_example() {
    let names: Vec<String> = examples().into_iter().map(|(name, _)| name).collect();
    for entry in catalog().names() {
        assert!(names.iter().any(|n| n == entry), "no example for {entry}");
    }
    assert!(names.iter().any(|n| n == "custom"));
}
