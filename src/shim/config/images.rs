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

    /// The repository prefix of the payload images this repository builds.
    const OUR_PAYLOADS: &str = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions/containerd-shim-payload/";

    /// Payloads built by hack/tools/build.sh (a function `build_<entry>`): (catalog entry, its
    /// version variable in hack/tools/versions.env, for a Go module the wrapper module under
    /// hack/tools/ and the module).
    type ToolBuild = (
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
    );
    const FROM_TOOLS: &[ToolBuild] = &[
        ("crun", "CRUN_VERSION", None),
        (
            "gvisor",
            "GVISOR_VERSION",
            Some(("gvisor", "gvisor.dev/gvisor")),
        ),
    ];

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

    /// `KEY=value` of a shell variable file (hack/tools/versions.env, lib.sh).
    fn shell_var(file: &str, key: &str) -> String {
        repo_file(file)
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{file} sets no {key}"))
    }

    /// Every payload image of ours is built by this repository, from the Wasm workspace or by
    /// hack/tools/build.sh: no catalog entry names an image of ours that nothing builds.
    #[test]
    fn our_payload_images_are_built_with_the_catalog_version_and_layout() {
        let vector = embedded().unwrap();
        let catalog = Catalog::builtin().unwrap();
        let mut from_tools = Vec::new();
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
                for binary in &entry.binaries {
                    assert_eq!(
                        binary.path,
                        format!("/payload/{}", binary.name),
                        "{name}: our payloads keep every file flat under /payload/"
                    );
                }
                assert!(
                    FROM_TOOLS.iter().any(|(entry, ..)| entry == name),
                    "{name}: {repository} is ours, but nothing in this repository builds it"
                );
                from_tools.push(name.as_str());
            }
        }
        let mut expected: Vec<&str> = FROM_TOOLS.iter().map(|(e, ..)| *e).collect();
        expected.sort_unstable();
        from_tools.sort_unstable();
        from_tools.dedup();
        assert_eq!(
            from_tools, expected,
            "payloads built by hack/tools/build.sh"
        );
    }

    /// A payload built by hack/tools/build.sh: the version pinned in versions.env is the
    /// catalog's only version, a wrapper Go module requires exactly it, build.sh writes every
    /// binary of the entry under payload/ and builds every architecture the entry offers.
    #[test]
    fn payloads_from_tools_build_the_catalog_version_and_files() {
        let catalog = Catalog::builtin().unwrap();
        let build_script = repo_file("hack/tools/build.sh");
        for (name, version_var, go_module) in FROM_TOOLS {
            let entry = catalog.get(name).unwrap();
            let pinned = shell_var("hack/tools/versions.env", version_var);
            assert_eq!(
                entry.versions.keys().collect::<Vec<_>>(),
                [&pinned],
                "{name}: the catalog offers the version {version_var} pins"
            );
            assert_eq!(entry.default_version, pinned, "{name}: default version");
            if let Some((wrapper, module)) = go_module {
                let go_mod = repo_file(&format!("hack/tools/{wrapper}/go.mod"));
                assert!(
                    go_mod
                        .lines()
                        .any(|l| l.split_whitespace().take(2).eq([*module, pinned.as_str()])),
                    "hack/tools/{wrapper}/go.mod does not require {module} {pinned}: run make tools-modules"
                );
                assert!(
                    repo_file(&format!("hack/tools/{wrapper}/go.sum"))
                        .contains(&format!("{module} {pinned} h1:")),
                    "hack/tools/{wrapper}/go.sum lacks {module} {pinned}: run make tools-modules"
                );
            }
            let function = build_script
                .split(&format!("\nbuild_{name}() {{\n"))
                .nth(1)
                .and_then(|rest| rest.split("\n}\n").next())
                .unwrap_or_else(|| panic!("hack/tools/build.sh has no build_{name}"));
            for binary in &entry.binaries {
                assert!(
                    function.contains(&format!("/payload/{}\"", binary.name)),
                    "build_{name} in hack/tools/build.sh does not write payload/{}",
                    binary.name
                );
            }
            let architectures = shell_var(
                "hack/tools/lib.sh",
                &format!("{}_ARCHITECTURES", name.to_uppercase()),
            );
            let built: Vec<&str> = architectures.split_whitespace().collect();
            let offered: Vec<&str> = entry.architectures.iter().map(|a| a.as_str()).collect();
            assert_eq!(built, offered, "{name}: architectures built and offered");
        }
    }
}
