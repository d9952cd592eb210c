//! What the fuzz targets that decode providerConfigs share: the built-in catalog and image
//! vector, and a Shoot with one to four worker pools (one of them arm64, one not containerd).

use std::sync::OnceLock;

use gardener_extension_containerd_shim::gardener::api::Shoot;
use gardener_extension_containerd_shim::gardener::imagevector::ImageVector;
use gardener_extension_containerd_shim::shim::config::Catalog;
use gardener_extension_containerd_shim::shim::controllers::{
    CatalogOptions, load_catalog_and_images,
};
use serde_json::{Value, json};

pub fn fixtures() -> &'static (Catalog, ImageVector) {
    static FIXTURES: OnceLock<(Catalog, ImageVector)> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        load_catalog_and_images(&CatalogOptions::default())
            .expect("the built-in catalog and image vector load")
    })
}

pub fn shoot(pools: u8) -> Shoot {
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
