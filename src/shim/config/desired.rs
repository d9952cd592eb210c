//! [`ValidatedConfig`] to the node installer's desired set, with catalog images resolved
//! through the image vector.

use std::collections::BTreeMap;

use super::validate::{ValidatedConfig, ValidatedShim, ValidatedSource};
use crate::desired_shims::{Arch, Binary, BinarySource, DesiredShim, DesiredShims, Mode, SCHEMA};
use crate::gardener::api::common::ErrorCode;
use crate::gardener::error_codes::CodedError;
use crate::gardener::imagevector::{ImageVector, ImageVectorError};

/// Why the desired set could not be built: the operator's image vector does not serve the
/// catalog, which a shoot owner cannot fix (so no configuration-problem code).
#[derive(Debug, thiserror::Error)]
pub enum DesiredError {
    #[error("shim {shim:?}: cannot resolve image {image:?} for {arch}: {source}")]
    Image {
        shim: String,
        image: String,
        arch: &'static str,
        #[source]
        source: ImageVectorError,
    },
    /// Each pool has a DaemonSet of its own and a pool has one architecture, but the desired
    /// set names one image per shim for every pool it goes to: per-architecture images are not
    /// supported.
    #[error(
        "shim {shim:?}: image {image:?} resolves to different images per architecture ({}); a shim has one image reference for all its pools, so it needs one multi-arch image",
        .resolved.iter().map(|(arch, image)| format!("{}: {image}", arch.as_str())).collect::<Vec<_>>().join(", ")
    )]
    PerArchImages {
        shim: String,
        image: String,
        resolved: Vec<(Arch, String)>,
    },
}

impl CodedError for DesiredError {
    fn codes(&self) -> Vec<ErrorCode> {
        Vec::new()
    }
}

/// The desired set for the installer: shims sorted by name, in install mode.
pub fn desired_shims(
    config: &ValidatedConfig,
    images: &ImageVector,
) -> Result<DesiredShims, DesiredError> {
    let mut shims = config
        .shims
        .iter()
        .map(|shim| desired_shim(shim, config.kubernetes_version.as_deref(), images))
        .collect::<Result<Vec<_>, _>>()?;
    shims.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(DesiredShims {
        schema: SCHEMA,
        mode: Mode::Install,
        delivery: config.delivery.into(),
        shims,
        rollout: config.desired_rollout(),
    })
}

fn desired_shim(
    shim: &ValidatedShim,
    kubernetes_version: Option<&str>,
    images: &ImageVector,
) -> Result<DesiredShim, DesiredError> {
    let mut resolved: BTreeMap<&str, String> = BTreeMap::new();
    let mut binaries = Vec::new();
    for binary in &shim.binaries {
        let source = match &binary.source {
            ValidatedSource::CatalogImage { image_name, path } => {
                let image = match resolved.get(image_name.as_str()) {
                    Some(image) => image.clone(),
                    None => {
                        let image = resolve(shim, image_name, kubernetes_version, images)?;
                        resolved.insert(image_name, image.clone());
                        image
                    }
                };
                BinarySource::Image {
                    image,
                    path: path.clone(),
                    sha256: BTreeMap::new(),
                }
            }
            ValidatedSource::Image {
                image,
                path,
                sha256,
            } => BinarySource::Image {
                image: image.clone(),
                path: path.clone(),
                sha256: sha256.clone(),
            },
            ValidatedSource::Url { artifacts } => BinarySource::Url {
                artifacts: artifacts.clone(),
            },
        };
        binaries.push(Binary {
            name: binary.name.clone(),
            source,
        });
    }
    Ok(DesiredShim {
        name: shim.name.clone(),
        handler: shim.handler.clone(),
        runtime_type: shim.runtime_type.clone(),
        version: shim.version.clone(),
        binaries,
        oci_runtime: shim.oci_runtime,
        options: shim.options.clone(),
        pod_annotations: shim.pod_annotations.clone(),
        privileged_without_host_devices: shim.privileged_without_host_devices,
        config_files: shim.config_files.clone(),
        node_selector: shim.node_selector.clone(),
        worker_pools: shim.worker_pools.clone(),
    })
}

/// One image for every architecture the shim's pools run: the desired set is built once for the
/// shoot and cut per pool, so every pool the shim goes to gets the same image reference.
fn resolve(
    shim: &ValidatedShim,
    image_name: &str,
    kubernetes_version: Option<&str>,
    images: &ImageVector,
) -> Result<String, DesiredError> {
    let mut per_arch = Vec::new();
    let archs: Vec<Arch> = if shim.architectures.is_empty() {
        vec![Arch::Amd64]
    } else {
        shim.architectures.iter().copied().collect()
    };
    for arch in archs {
        let image = images
            .find_image(image_name, None, kubernetes_version, Some(arch.as_str()))
            .map_err(|source| DesiredError::Image {
                shim: shim.name.clone(),
                image: image_name.to_owned(),
                arch: arch.as_str(),
                source,
            })?;
        per_arch.push((arch, image.to_string()));
    }
    let first = per_arch
        .first()
        .map(|(_, image)| image.clone())
        .unwrap_or_default();
    if per_arch.iter().any(|(_, image)| *image != first) {
        return Err(DesiredError::PerArchImages {
            shim: shim.name.clone(),
            image: image_name.to_owned(),
            resolved: per_arch,
        });
    }
    Ok(first)
}
