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

#[test]
fn every_catalog_entry_and_a_custom_shim_have_an_example() {
    let names: Vec<String> = examples().into_iter().map(|(name, _)| name).collect();
    for entry in catalog().names() {
        assert!(names.iter().any(|n| n == entry), "no example for {entry}");
    }
    assert!(names.iter().any(|n| n == "custom"));
}
