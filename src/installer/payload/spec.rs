//! What a shim's versioned directory must contain on this node: each file, where it comes from,
//! and its sha256. The directory's name is the shim's version plus a digest of this list, so
//! equal content always lands in the same directory and different content never overwrites.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::desired_shims::{
    Arch, BIN_DIR_PLACEHOLDER, Binary, BinarySource, CONFIG_DIR_PLACEHOLDER, DesiredShim,
    UrlArtifact,
};
use crate::installer::digest::{sha256_file, sha256_hex};
use crate::installer::error::InstallerError;

use super::layout::Layout;

/// Where one file of a version directory comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileSource {
    /// A file an init container staged in the pod (a path in this process's file system).
    Staged(PathBuf),
    /// An HTTPS download.
    Url(String),
    /// Generated content (a shim's config file with placeholders resolved).
    Inline(String),
}

/// One file of a version directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadFile {
    /// Path inside the version directory: `bin/<name>` or `config/<name>`.
    pub rel: PathBuf,
    pub mode: u32,
    pub source: FileSource,
    /// Lower-case hex sha256 the file must have.
    pub sha256: String,
}

/// A shim's version directory as this node needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadSpec {
    pub shim: String,
    pub version: String,
    /// `<version>-<first 12 hex digits of the content digest>`.
    pub dir: String,
    pub files: Vec<PayloadFile>,
}

impl PayloadSpec {
    /// Human-readable origin of a file, for error messages.
    pub fn describe(source: &FileSource) -> String {
        match source {
            FileSource::Staged(path) => format!("staged file {}", path.display()),
            FileSource::Url(url) => url.clone(),
            FileSource::Inline(_) => "generated content".into(),
        }
    }
}

/// Caches the sha256 of staged files by (path, size, mtime): hashing a large binary on every
/// check period would be wasted work, and the staging volume does not change under a pod.
#[derive(Default)]
pub struct DigestCache {
    entries: Mutex<BTreeMap<PathBuf, CachedDigest>>,
}

/// Size, modification time and sha256 of a staged file.
type CachedDigest = (u64, Option<SystemTime>, String);

impl DigestCache {
    pub fn sha256_of(&self, path: &Path) -> std::io::Result<String> {
        let meta = std::fs::metadata(path)?;
        let key = (meta.len(), meta.modified().ok());
        if let Ok(entries) = self.entries.lock()
            && let Some((len, modified, digest)) = entries.get(path)
            && (*len, *modified) == key
        {
            return Ok(digest.clone());
        }
        let digest = sha256_file(path)?;
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(path.to_path_buf(), (key.0, key.1, digest.clone()));
        }
        Ok(digest)
    }
}

/// A file or directory name we put on the host: one plain path segment.
fn safe_name(value: &str) -> bool {
    !value.is_empty()
        && value != "."
        && value != ".."
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

fn valid_sha256(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Resolves a desired shim for a node of `arch`: staged files are hashed (and checked against
/// the expected digest when the desired set gives one); URLs must be https and carry a sha256.
pub fn resolve(
    shim: &DesiredShim,
    arch: Arch,
    staging_dir: &Path,
    layout: &Layout,
    cache: &DigestCache,
) -> Result<PayloadSpec, InstallerError> {
    let invalid = |message: String| InstallerError::InvalidShim {
        shim: shim.name.clone(),
        message,
    };
    if !safe_name(&shim.name) {
        return Err(invalid(format!(
            "name {:?} is not a plain file name",
            shim.name
        )));
    }
    if !safe_name(&shim.version) {
        return Err(invalid(format!(
            "version {:?} must consist of letters, digits, '.', '_', '-' and '+'",
            shim.version
        )));
    }
    if shim.binaries.is_empty() {
        return Err(invalid("has no binaries".into()));
    }
    let mut files = Vec::new();
    for binary in &shim.binaries {
        if !safe_name(&binary.name) {
            return Err(invalid(format!(
                "binary name {:?} is not a plain file name",
                binary.name
            )));
        }
        let (source, sha256) = match &binary.source {
            BinarySource::Image { image, sha256, .. } => {
                staged_binary(shim, binary, image, sha256, arch, staging_dir, cache)?
            }
            BinarySource::Url { artifacts } => downloaded_binary(shim, binary, artifacts, arch)?,
        };
        files.push(PayloadFile {
            rel: Path::new("bin").join(&binary.name),
            mode: 0o755,
            source,
            sha256,
        });
    }
    let bin_dir = layout.bin_dir(&shim.name);
    let config_dir = layout.config_dir(&shim.name);
    for config in &shim.config_files {
        if !safe_name(&config.name) {
            return Err(invalid(format!(
                "config file name {:?} is not a plain file name",
                config.name
            )));
        }
        let content = config
            .content
            .replace(CONFIG_DIR_PLACEHOLDER, &config_dir.to_string_lossy())
            .replace(BIN_DIR_PLACEHOLDER, &bin_dir.to_string_lossy());
        files.push(PayloadFile {
            rel: Path::new("config").join(&config.name),
            mode: 0o644,
            sha256: sha256_hex(content.as_bytes()),
            source: FileSource::Inline(content),
        });
    }
    let digest = payload_digest(&files);
    Ok(PayloadSpec {
        shim: shim.name.clone(),
        version: shim.version.clone(),
        dir: format!("{}-{}", shim.version, &digest[..12]),
        files,
    })
}

fn payload_error(shim: &DesiredShim, binary: &Binary, message: String) -> InstallerError {
    InstallerError::Payload {
        shim: shim.name.clone(),
        binary: binary.name.clone(),
        message,
    }
}

/// A binary an init container staged from an image: hashed, and checked when the desired set
/// gives the digest for `arch`.
fn staged_binary(
    shim: &DesiredShim,
    binary: &Binary,
    image: &str,
    sha256: &BTreeMap<Arch, String>,
    arch: Arch,
    staging_dir: &Path,
    cache: &DigestCache,
) -> Result<(FileSource, String), InstallerError> {
    let staged = staging_dir.join(&shim.name).join(&binary.name);
    let actual = cache.sha256_of(&staged).map_err(|err| {
        payload_error(
            shim,
            binary,
            format!(
                "cannot read {} (staged from image {image} by an init container): {err}",
                staged.display()
            ),
        )
    })?;
    if let Some(expected) = sha256.get(&arch) {
        let expected = expected.to_ascii_lowercase();
        if expected != actual {
            return Err(InstallerError::ChecksumMismatch {
                shim: shim.name.clone(),
                binary: binary.name.clone(),
                source_desc: format!("image {image} (staged at {})", staged.display()),
                expected,
                actual,
            });
        }
    }
    Ok((FileSource::Staged(staged), actual))
}

/// A binary to download for `arch`: over https, with the sha256 the desired set gives.
fn downloaded_binary(
    shim: &DesiredShim,
    binary: &Binary,
    artifacts: &BTreeMap<Arch, UrlArtifact>,
    arch: Arch,
) -> Result<(FileSource, String), InstallerError> {
    let Some(artifact) = artifacts.get(&arch) else {
        return Err(payload_error(
            shim,
            binary,
            format!(
                "no download for architecture {} (have: {})",
                arch.as_str(),
                artifacts
                    .keys()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    if !artifact.url.starts_with("https://") {
        return Err(payload_error(
            shim,
            binary,
            format!("URL {} is not https", artifact.url),
        ));
    }
    let expected = artifact.sha256.to_ascii_lowercase();
    if !valid_sha256(&expected) {
        return Err(payload_error(
            shim,
            binary,
            format!(
                "sha256 {:?} of {} is not 64 hex digits",
                artifact.sha256, artifact.url
            ),
        ));
    }
    Ok((FileSource::Url(artifact.url.clone()), expected))
}

/// The digest of a payload's file list, which names its directory: any change of a file's
/// content, mode or name gives a new directory.
fn payload_digest(files: &[PayloadFile]) -> String {
    let mut digest = Sha256::new();
    for file in files {
        digest.update(format!(
            "{}\t{:o}\t{}\n",
            file.rel.display(),
            file.mode,
            file.sha256
        ));
    }
    hex::encode(digest.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired_shims::{Binary, ConfigFile, UrlArtifact};

    fn shim(source: BinarySource) -> DesiredShim {
        DesiredShim {
            oci_runtime: false,
            name: "gvisor".into(),
            handler: "runsc".into(),
            runtime_type: "io.containerd.runsc.v1".into(),
            version: "20250101".into(),
            binaries: vec![Binary {
                name: "containerd-shim-runsc-v1".into(),
                source,
            }],
            options: BTreeMap::new(),
            pod_annotations: vec![],
            privileged_without_host_devices: false,
            config_files: vec![ConfigFile {
                name: "runsc.toml".into(),
                content: "binary = \"{{binDir}}/runsc\"\n".into(),
            }],
            node_selector: BTreeMap::new(),
            worker_pools: vec![],
        }
    }

    #[test]
    fn staged_files_are_hashed_and_checked() {
        let staging = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(staging.path().join("gvisor")).unwrap();
        std::fs::write(
            staging.path().join("gvisor/containerd-shim-runsc-v1"),
            b"binary",
        )
        .unwrap();
        let layout = Layout::new("/var/lib/x");
        let cache = DigestCache::default();
        let image = |sha: Option<&str>| BinarySource::Image {
            image: "example.com/gvisor:1".into(),
            path: "/bin/shim".into(),
            sha256: sha
                .map(|s| BTreeMap::from([(Arch::Amd64, s.to_string())]))
                .unwrap_or_default(),
        };
        let spec = resolve(
            &shim(image(None)),
            Arch::Amd64,
            staging.path(),
            &layout,
            &cache,
        )
        .unwrap();
        assert_eq!(spec.files[0].sha256, sha256_hex(b"binary"));
        assert!(spec.dir.starts_with("20250101-") && spec.dir.len() == 9 + 12);
        let FileSource::Inline(content) = &spec.files[1].source else {
            panic!("{spec:?}")
        };
        assert_eq!(
            content,
            "binary = \"/var/lib/x/current/gvisor/bin/runsc\"\n"
        );

        // The expected digest of the node's architecture is enforced; another arch's is not.
        let good = sha256_hex(b"binary");
        resolve(
            &shim(image(Some(&good))),
            Arch::Amd64,
            staging.path(),
            &layout,
            &cache,
        )
        .unwrap();
        let err = resolve(
            &shim(image(Some(&"0".repeat(64)))),
            Arch::Amd64,
            staging.path(),
            &layout,
            &cache,
        )
        .unwrap_err();
        assert!(
            matches!(err, InstallerError::ChecksumMismatch { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("example.com/gvisor:1"), "{err}");
        resolve(
            &shim(image(Some(&"0".repeat(64)))),
            Arch::Arm64,
            staging.path(),
            &layout,
            &cache,
        )
        .unwrap();

        // Missing staged file: says where it should have been.
        let err = resolve(
            &shim(image(None)),
            Arch::Amd64,
            Path::new("/nowhere"),
            &layout,
            &cache,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/nowhere/gvisor/containerd-shim-runsc-v1"),
            "{err}"
        );
    }

    #[test]
    fn urls_need_https_a_digest_and_the_nodes_arch() {
        let layout = Layout::new("/var/lib/x");
        let cache = DigestCache::default();
        let url = |url: &str, sha: &str| BinarySource::Url {
            artifacts: BTreeMap::from([(
                Arch::Amd64,
                UrlArtifact {
                    url: url.into(),
                    sha256: sha.into(),
                },
            )]),
        };
        let sha = "a".repeat(64);
        let spec = resolve(
            &shim(url("https://e.com/s", &sha)),
            Arch::Amd64,
            Path::new("/s"),
            &layout,
            &cache,
        )
        .unwrap();
        assert_eq!(
            spec.files[0].source,
            FileSource::Url("https://e.com/s".into())
        );
        let other = resolve(
            &shim(url("https://e.com/s", &"b".repeat(64))),
            Arch::Amd64,
            Path::new("/s"),
            &layout,
            &cache,
        )
        .unwrap();
        assert_ne!(spec.dir, other.dir, "other content, other directory");
        for (source, arch, expected) in [
            (url("http://e.com/s", &sha), Arch::Amd64, "not https"),
            (url("https://e.com/s", "xyz"), Arch::Amd64, "64 hex digits"),
            (
                url("https://e.com/s", &sha),
                Arch::Arm64,
                "no download for architecture arm64",
            ),
        ] {
            let err = resolve(&shim(source), arch, Path::new("/s"), &layout, &cache)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        }
        let mut bad = shim(url("https://e.com/s", &sha));
        bad.version = "../1".into();
        assert!(resolve(&bad, Arch::Amd64, Path::new("/s"), &layout, &cache).is_err());
    }
}
