//! The extension's image vector: `charts/images.yaml`, embedded at build time and overridden
//! at run time through `IMAGEVECTOR_OVERWRITE`.

use super::catalog::Catalog;
use super::syntax;
use crate::gardener::imagevector::{Image, ImageVector, ImageVectorError};

/// Image-vector name of the seed controller.
pub const CONTROLLER_IMAGE: &str = "gardener-extension-containerd-shim";

/// Image-vector name of the node installer.
pub const INSTALLER_IMAGE: &str = "containerd-shim-installer";

const EMBEDDED: &str = include_str!("../../../charts/images.yaml");

/// The embedded image vector, without overrides.
pub fn embedded() -> Result<ImageVector, ImageVectorError> {
    ImageVector::from_yaml("charts/images.yaml", EMBEDDED)
}

/// The embedded image vector merged with the operator's override from `IMAGEVECTOR_OVERWRITE`.
pub fn image_vector() -> Result<ImageVector, ImageVectorError> {
    embedded()?.with_env_override()
}

/// Every image the extension may hand to a shoot, resolved once: the installer, and every
/// version of every catalog entry on each architecture the entry supports. The controller runs
/// this at start-up, so an overlay or image-vector override that names a missing image or
/// writes an unusable reference stops it there, not when a shoot first selects the entry.
pub fn check_catalog_images(vector: &ImageVector, catalog: &Catalog) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut check = |what: String, image: Result<Image, ImageVectorError>| match image {
        Ok(image) => {
            if let Err(problem) = syntax::image_reference(&image.to_string()) {
                problems.push(format!("{what}: {image} {problem}"));
            }
        }
        Err(e) => problems.push(format!("{what}: {e}")),
    };
    check(
        format!("image {INSTALLER_IMAGE:?}"),
        own_image(vector, INSTALLER_IMAGE),
    );
    for (name, entry) in &catalog.shims {
        for (version, spec) in &entry.versions {
            for arch in &entry.architectures {
                check(
                    format!(
                        "catalog.shims[{name}].versions[{version}] ({}): image {:?}",
                        arch.as_str(),
                        spec.image
                    ),
                    vector.find_image(&spec.image, None, None, Some(arch.as_str())),
                );
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// One of the extension's own images. Entries without a tag get the extension's version,
/// so a release does not need to rewrite `images.yaml`.
pub fn own_image(vector: &ImageVector, name: &str) -> Result<Image, ImageVectorError> {
    Ok(vector
        .find_image(name, None, None, None)?
        .with_optional_tag(concat!("v", env!("CARGO_PKG_VERSION"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::config::catalog::Catalog;

    #[test]
    fn embedded_vector_has_our_images_and_every_catalog_image() {
        let vector = embedded().unwrap();
        for name in [CONTROLLER_IMAGE, INSTALLER_IMAGE] {
            let image = own_image(&vector, name).unwrap();
            assert!(
                image
                    .to_string()
                    .ends_with(concat!(":v", env!("CARGO_PKG_VERSION"))),
                "{image}"
            );
        }
        let catalog = Catalog::builtin().unwrap();
        for entry in catalog.shims.values() {
            for version in entry.versions.values() {
                for arch in &entry.architectures {
                    let image = vector.find_image(
                        &version.image,
                        None,
                        Some("1.33.0"),
                        Some(arch.as_str()),
                    );
                    assert!(image.is_ok(), "{} ({arch:?}): {image:?}", version.image);
                }
            }
        }
    }

    /// The repository prefix of the payload images this repository builds
    /// (hack/images/payloads/<catalog entry>/Dockerfile).
    const OUR_PAYLOADS: &str = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions/containerd-shim-payload/";

    fn repo_file(path: &str) -> String {
        let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
    }

    /// Whether `name` is a Wasm shim of hack/images/payloads/wasm (a package of that name
    /// there); if so, checks that the package builds the catalog's version and binary.
    fn wasm_payload_is_built_as_cataloged(
        name: &str,
        version: &str,
        entry: &crate::shim::config::catalog::CatalogEntry,
    ) -> bool {
        let manifest = format!("hack/images/payloads/wasm/{name}/Cargo.toml");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(&manifest);
        if !path.exists() {
            return false;
        }
        let cargo = repo_file(&manifest);
        assert!(
            cargo.contains(&format!("\nversion = \"{version}\"\n")),
            "{manifest} does not build version {version} (the catalog's)"
        );
        // hack/nodes/wasm-images.sh builds for the build machine's architecture only (no
        // arm64 standard library is reachable: hack/images/payloads/wasm/README.md).
        assert_eq!(
            entry
                .architectures
                .iter()
                .map(|a| a.as_str())
                .collect::<Vec<_>>(),
            ["amd64"],
            "{name}: its payload is built for amd64 only"
        );
        assert_eq!(entry.binaries.len(), 1, "{name}: one shim binary");
        let binary = &entry.binaries[0];
        assert_eq!(binary.path, format!("/payload/{}", binary.name), "{name}");
        assert!(
            cargo.contains(&format!("name = \"{}\"\n", binary.name)),
            "{manifest} does not build {}",
            binary.name
        );
        true
    }

    #[test]
    fn our_payload_images_are_built_with_the_catalog_version_and_layout() {
        let vector = embedded().unwrap();
        let catalog = Catalog::builtin().unwrap();
        let build_script = repo_file("hack/images/payloads/build.sh");
        // The entry -> image-name table of build.sh: lines `  [<entry>]=<image>`.
        let table: std::collections::BTreeMap<&str, &str> = build_script
            .lines()
            .filter_map(|line| line.trim().strip_prefix('['))
            .filter_map(|rest| rest.split_once("]="))
            .collect();
        let mut ours = std::collections::BTreeMap::new();
        for (name, entry) in &catalog.shims {
            for (version, spec) in &entry.versions {
                let image = vector
                    .find_image(&spec.image, None, Some("1.33.0"), None)
                    .unwrap();
                let repository = image.repository.as_deref().unwrap_or_default();
                if !repository.starts_with(OUR_PAYLOADS) {
                    continue;
                }
                assert_eq!(
                    image.tag.as_deref(),
                    Some(version.as_str()),
                    "{name}: the payload's tag is the catalog version"
                );
                if wasm_payload_is_built_as_cataloged(name, version, entry) {
                    continue;
                }
                ours.insert(name.as_str(), spec.image.as_str());
                let dockerfile = repo_file(&format!("hack/images/payloads/{name}/Dockerfile"));
                assert!(
                    dockerfile.contains(&format!("\nARG VERSION={version}\n")),
                    "hack/images/payloads/{name}/Dockerfile does not build version {version}"
                );
                for binary in &entry.binaries {
                    assert_eq!(
                        binary.path,
                        format!("/payload/{}", binary.name),
                        "{name}: our payloads keep every file flat under /payload/"
                    );
                    assert!(
                        dockerfile.contains(&format!("/out/payload/{}\n", binary.name))
                            || dockerfile.contains(&format!("/out/payload/{}; \\", binary.name)),
                        "hack/images/payloads/{name}/Dockerfile does not write {}",
                        binary.path
                    );
                }
                for arch in &entry.architectures {
                    assert!(
                        dockerfile.contains(&format!("{})", arch.as_str()))
                            || dockerfile.contains(&format!("!= {}", arch.as_str())),
                        "hack/images/payloads/{name}/Dockerfile does not handle {arch:?}"
                    );
                }
            }
        }
        assert_eq!(
            table, ours,
            "hack/images/payloads/build.sh must list exactly the entries whose payload is ours"
        );
    }
}
