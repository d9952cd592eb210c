//! A custom shim's own fields: its runtime type and version, and its binaries from images or
//! URLs, checked against the operator's custom-shim policy and the selected pools'
//! architectures.

use std::collections::BTreeMap;

use super::custom_policy::CustomShimPolicy;
use super::error::{FieldError, FieldPath, quote};
use super::pools::SelectedPool;
use super::syntax;
use super::types::{self, CustomShim};
use super::validated::{ValidatedBinary, ValidatedSource};
use crate::desired_shims::{Arch, UrlArtifact};

/// Most binaries of one custom shim.
pub const MAX_BINARIES: usize = 8;

/// containerd's own runc runtime types; a custom shim must bring its own runtime type.
const BUILTIN_RUNTIME_TYPES: &[&str] = &["io.containerd.runc.v1", "io.containerd.runc.v2"];

/// `runtimeType` and `version` of a custom shim.
pub(super) fn validate_custom_header(
    custom: &CustomShim,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    let at = path.child("runtimeType");
    if let Err(problem) = syntax::runtime_type(&custom.runtime_type) {
        errors.push(FieldError::invalid(&at, &custom.runtime_type, problem));
    } else if BUILTIN_RUNTIME_TYPES.contains(&custom.runtime_type.as_str()) {
        errors.push(FieldError::invalid(
            &at,
            &custom.runtime_type,
            "is containerd's built-in runc runtime; a custom shim needs its own runtime type",
        ));
    }
    if let Err(problem) = syntax::version(&custom.version) {
        errors.push(FieldError::invalid(
            &path.child("version"),
            &custom.version,
            problem,
        ));
    }
}

/// The binaries of a custom shim, checked against the architectures of the selected pools.
pub(super) fn custom_binaries(
    custom: &CustomShim,
    path: &FieldPath,
    pools: &[SelectedPool],
    policy: &CustomShimPolicy,
    errors: &mut Vec<FieldError>,
) -> Vec<ValidatedBinary> {
    let list = path.child("binaries");
    if custom.binaries.is_empty() {
        errors.push(FieldError::new(
            &list,
            "[] must list at least one binary (the shim first)",
        ));
    }
    if custom.binaries.len() > MAX_BINARIES {
        errors.push(FieldError::new(
            &list,
            format!(
                "{} entries exceed the limit of {MAX_BINARIES}",
                custom.binaries.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (j, binary) in custom.binaries.iter().enumerate() {
        let at = list.index(j);
        if let Err(problem) = syntax::file_name(&binary.name) {
            errors.push(FieldError::invalid(
                &at.child("name"),
                &binary.name,
                problem,
            ));
        } else if custom.binaries[..j].iter().any(|b| b.name == binary.name) {
            errors.push(FieldError::invalid(
                &at.child("name"),
                &binary.name,
                "is listed twice",
            ));
        }
        let source = match (&binary.image, &binary.url) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(&at, "sets both image and url; choose one"));
                None
            }
            (None, None) => {
                errors.push(FieldError::new(
                    &at,
                    "sets neither image nor url; choose one",
                ));
                None
            }
            (Some(image), None) => image_source(image, &at.child("image"), policy, errors),
            (None, Some(url)) => url_source(url, &at.child("url"), pools, policy, errors),
        };
        if let Some(source) = source {
            out.push(ValidatedBinary {
                name: binary.name.clone(),
                source,
            });
        }
    }
    out
}

fn image_source(
    image: &types::ImageFile,
    path: &FieldPath,
    policy: &CustomShimPolicy,
    errors: &mut Vec<FieldError>,
) -> Option<ValidatedSource> {
    let before = errors.len();
    if let Err(problem) = syntax::image_reference(&image.reference)
        .and_then(|()| policy.check_image(&image.reference))
    {
        errors.push(FieldError::invalid(
            &path.child("ref"),
            &image.reference,
            problem,
        ));
    }
    if let Err(problem) = syntax::absolute_path(&image.path) {
        errors.push(FieldError::invalid(
            &path.child("path"),
            &image.path,
            problem,
        ));
    }
    let mut sha256 = BTreeMap::new();
    let digests = image.sha256.clone().unwrap_or_default();
    for (arch, digest) in [(Arch::Amd64, &digests.amd64), (Arch::Arm64, &digests.arm64)] {
        let Some(digest) = digest else { continue };
        match syntax::sha256_hex(digest) {
            Ok(()) => {
                sha256.insert(arch, digest.clone());
            }
            Err(problem) => errors.push(FieldError::invalid(
                &path.child("sha256").child(arch.as_str()),
                digest,
                problem,
            )),
        }
    }
    (errors.len() == before).then(|| ValidatedSource::Image {
        image: image.reference.clone(),
        path: image.path.clone(),
        sha256,
    })
}

fn url_source(
    url: &types::UrlFile,
    path: &FieldPath,
    pools: &[SelectedPool],
    policy: &CustomShimPolicy,
    errors: &mut Vec<FieldError>,
) -> Option<ValidatedSource> {
    let before = errors.len();
    let mut artifacts = BTreeMap::new();
    for (arch, artifact) in [(Arch::Amd64, &url.amd64), (Arch::Arm64, &url.arm64)] {
        let Some(artifact) = artifact else { continue };
        let at = path.child(arch.as_str());
        if let Err(problem) =
            syntax::https_url(&artifact.url).and_then(|()| policy.check_url(&artifact.url))
        {
            errors.push(FieldError::invalid(
                &at.child("url"),
                &artifact.url,
                problem,
            ));
        }
        if let Err(problem) = syntax::sha256_hex(&artifact.sha256) {
            errors.push(FieldError::invalid(
                &at.child("sha256"),
                &artifact.sha256,
                problem,
            ));
        }
        artifacts.insert(
            arch,
            UrlArtifact {
                url: artifact.url.clone(),
                sha256: artifact.sha256.clone(),
            },
        );
    }
    if artifacts.is_empty() {
        errors.push(FieldError::new(
            path,
            "{} must give a download for at least one architecture (amd64, arm64)",
        ));
    }
    for pool in pools {
        if !artifacts.is_empty() && !artifacts.contains_key(&pool.arch) {
            errors.push(FieldError::new(
                path,
                format!(
                    "has no {} download, but worker pool {} runs {}",
                    pool.arch.as_str(),
                    quote(&pool.name),
                    pool.arch.as_str()
                ),
            ));
        }
    }
    (errors.len() == before).then_some(ValidatedSource::Url { artifacts })
}
