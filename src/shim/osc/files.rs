//! The OSC files of one shim version.

use crate::desired_shims::{BinarySource, DesiredShim};
use crate::gardener::api::operating_system_config::{
    File, FileContent, FileContentImageRef, FileContentInline,
};

use super::OscError;
use super::layout::VersionDir;

/// `rwxr-xr-x`: containerd runs the binaries.
const BINARY_MODE: u32 = 0o755;
/// `rw-r--r--`: shims read their config as containerd's user (root), nothing in them is secret.
const CONFIG_MODE: u32 = 0o644;

/// The binaries (pulled by the node agent from their images) and config files (inline, with
/// the directories resolved) of a shim, in the version directory.
pub fn shim_files(shim: &DesiredShim, dir: &VersionDir) -> Result<Vec<File>, OscError> {
    let mut out = Vec::new();
    for binary in &shim.binaries {
        let (image, path) = match &binary.source {
            BinarySource::Image { image, path, .. } => (image, path),
            BinarySource::Url { .. } => {
                return Err(OscError::UrlBinary {
                    shim: shim.name.clone(),
                    binary: binary.name.clone(),
                });
            }
        };
        out.push(File {
            path: format!("{}/{}", dir.bin_dir(), binary.name),
            permissions: Some(BINARY_MODE),
            content: FileContent {
                image_ref: Some(FileContentImageRef {
                    image: image.clone(),
                    file_path_in_image: path.clone(),
                }),
                ..FileContent::default()
            },
            other: Default::default(),
        });
    }
    for config in &shim.config_files {
        out.push(File {
            path: format!("{}/{}", dir.config_dir(), config.name),
            permissions: Some(CONFIG_MODE),
            content: FileContent {
                inline: Some(FileContentInline {
                    encoding: String::new(),
                    data: dir.resolve(&config.content),
                }),
                ..FileContent::default()
            },
            other: Default::default(),
        });
    }
    Ok(out)
}
