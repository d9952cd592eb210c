//! The extension's image vector: `charts/images.yaml`, embedded at build time and overridden
//! at run time through `IMAGEVECTOR_OVERWRITE`.

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
}
