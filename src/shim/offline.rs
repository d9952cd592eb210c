//! The offline renderer: the shoot bundle an Extension would produce, without a cluster.
//! Invalid input fails with the same text and codes the controller writes into `lastError`.

use std::path::Path;

use serde_json::json;

use crate::gardener::api::{Cluster, ErrorCode, Extension, Shoot};
use crate::gardener::error_codes::CodedError;
use crate::gardener::extension::status::{descriptions, format_error_description};
use crate::gardener::imagevector::ImageVector;
use crate::shim::actuator::ShimError;
use crate::shim::config::{self, Catalog, desired, images};
use crate::shim::render::{self, BundleInput};

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid {kind}: {message}")]
    Decode {
        path: String,
        kind: &'static str,
        message: String,
    },
    /// The error the controller would report, as it would appear in `lastError`.
    #[error("{description}{}", codes_suffix(.codes))]
    Extension {
        description: String,
        codes: Vec<ErrorCode>,
    },
}

fn codes_suffix(codes: &[ErrorCode]) -> String {
    if codes.is_empty() {
        String::new()
    } else {
        format!(
            " [codes: {}]",
            codes
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn read_yaml<T: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &'static str,
) -> Result<T, OfflineError> {
    let text = std::fs::read_to_string(path).map_err(|source| OfflineError::Read {
        path: path.display().to_string(),
        source,
    })?;
    crate::gardener::api::from_yaml(&text).map_err(|message| OfflineError::Decode {
        path: path.display().to_string(),
        kind,
        message,
    })
}

/// The Shoot assumed without a Cluster: one containerd pool `worker`, plus every pool the
/// providerConfig names, all amd64.
fn assumed_shoot(ext: &Extension) -> Shoot {
    let mut pools = vec!["worker".to_string()];
    if let Some(shims) = ext
        .spec
        .provider_config
        .as_ref()
        .and_then(|c| c.get("shims"))
        .and_then(|s| s.as_array())
    {
        for shim in shims {
            for pool in shim
                .get("workerPools")
                .and_then(|p| p.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(name) = pool.as_str()
                    && !pools.iter().any(|p| p == name)
                {
                    pools.push(name.to_string());
                }
            }
        }
    }
    let workers: Vec<_> = pools
        .iter()
        .map(|name| json!({"name": name, "cri": {"name": "containerd"}, "machine": {"architecture": "amd64"}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "offline", "namespace": "garden-offline"},
        "spec": {"kubernetes": {"version": "1.33.0"}, "provider": {"workers": workers}}
    }))
    .unwrap_or_default()
}

/// Renders the bundle of `extension_file` (an Extension manifest) for the Shoot embedded in
/// `cluster_file`, or an assumed one. Returns the manifests as a YAML stream.
pub fn render_files(
    extension_file: &Path,
    cluster_file: Option<&Path>,
    catalog: &Catalog,
    images: &ImageVector,
) -> Result<String, OfflineError> {
    let ext: Extension = read_yaml(extension_file, "Extension")?;
    let shoot = match cluster_file {
        Some(path) => {
            let cluster: Cluster = read_yaml(path, "Cluster")?;
            cluster
                .shoot()
                .map_err(|e| OfflineError::Decode {
                    path: path.display().to_string(),
                    kind: "Cluster",
                    message: e.to_string(),
                })?
                .unwrap_or_else(|| assumed_shoot(&ext))
        }
        None => assumed_shoot(&ext),
    };
    render_extension(&ext, &shoot, catalog, images)
}

/// The bundle as YAML documents, or the controller's error.
pub fn render_extension(
    ext: &Extension,
    shoot: &Shoot,
    catalog: &Catalog,
    images: &ImageVector,
) -> Result<String, OfflineError> {
    let as_controller = |e: ShimError| OfflineError::Extension {
        description: format_error_description(descriptions::RECONCILE_ERROR, &e.to_string()),
        codes: e.codes(),
    };
    let validated =
        config::load_spec(&ext.spec, catalog, shoot).map_err(|e| as_controller(e.into()))?;
    let desired =
        desired::desired_shims(&validated, images).map_err(|e| as_controller(e.into()))?;
    let installer = images::own_image(images, images::INSTALLER_IMAGE)
        .map_err(|e| as_controller(ShimError::InstallerImage(e)))?
        .to_string();
    let bundle = render::render(&BundleInput::install(
        &validated, desired, &installer, shoot,
    ));
    let manifests = bundle
        .into_manifests()
        .map_err(|e| as_controller(e.into()))?;
    let mut out = String::new();
    for m in manifests {
        let yaml = serde_saphyr::to_string(m.value()).map_err(|e| OfflineError::Decode {
            path: "(rendered bundle)".to_string(),
            kind: "manifest",
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
    }
    Ok(out)
}
