//! Gardener's image vector: the list of images an extension deploys, overridable by the
//! operator at run time.
//!
//! An extension embeds its `images.yaml`; the file named by the environment variable
//! [`OVERRIDE_ENV`] (the chart mounts it from a ConfigMap) is merged over it with Gardener's
//! rules, and components look images up with [`ImageVector::find_image`]:
//!
//! - entries merge when their key `(name, runtimeVersion, targetVersion, architectures)` is
//!   equal; a later entry with a new key is appended;
//! - in a merge, every field the override sets wins; an override `ref` clears
//!   `repository`/`tag`, an override `repository` drops the old `ref`;
//! - a lookup scores every entry of the name: an exact version constraint (`= ...` or a full
//!   `x.y.z`) scores 2, a range 1, no constraint 0; a single matching architecture scores 2,
//!   a multi-arch entry 1 (no `architectures` means amd64 and arm64; no requested architecture
//!   means amd64); the highest score wins, the first entry on a tie;
//! - an entry without `tag` gets `v<targetVersion>` when a target version is given.
//!
//! Version constraints are evaluated by [`constraint`]; see there for the supported syntax.

pub mod constraint;

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use self::constraint::{Constraint, normalize};
use crate::gardener::decode::{PathStyle, yaml_typed};

/// The environment variable naming the operator's override file.
pub const OVERRIDE_ENV: &str = "IMAGEVECTOR_OVERWRITE";

/// Tag prefix that makes a tag a digest (`repo@sha256:...` instead of `repo:tag`).
const SHA256_TAG_PREFIX: &str = "sha256:";

/// Upper bound on an image-vector file, checked before parsing it.
const MAX_FILE_BYTES: usize = 1024 * 1024;

/// The architectures an entry without `architectures` serves.
const DEFAULT_ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// The architecture assumed when a lookup names none.
const DEFAULT_ARCHITECTURE: &str = "amd64";

/// An image vector: the `images` of an `images.yaml` and its optional CA bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageVector {
    #[serde(default)]
    pub images: Vec<ImageSource>,
    /// A CA bundle for the registries; the override's replaces the embedded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
}

/// `caBundle` of an image vector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaBundle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
}

/// One entry. Unknown fields (Gardener's newer `labels`, `resourceId`, ...) are ignored, as
/// Gardener's own non-strict decoding does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSource {
    pub name: String,
    /// Where the image's source lives (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// A complete image reference; excludes `repository` and `tag`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Constraint on the Kubernetes version the image targets (the shoot's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// Constraint on the Kubernetes version the image runs on (the seed's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
}

/// A concrete image found by [`ImageVector::find_image`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    pub repository: Option<String>,
    pub tag: Option<String>,
    pub reference: Option<String>,
    pub version: Option<String>,
}

/// Image-vector problems: operator or packaging errors, never the shoot owner's.
#[derive(Debug, thiserror::Error)]
pub enum ImageVectorError {
    #[error("cannot read image vector {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("image vector {origin} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { origin: String },
    #[error("image vector {origin} is not valid: {message}")]
    Parse { origin: String, message: String },
    #[error("image vector {origin} is not valid:\n- {}", .problems.join("\n- "))]
    Invalid {
        origin: String,
        problems: Vec<String>,
    },
    #[error("image {name:?} not found in the image vector ({options})")]
    NotFound { name: String, options: String },
    #[error("image vector entry {name:?}: {message}")]
    Constraint { name: String, message: String },
}

impl ImageVector {
    /// Parses and validates an `images.yaml`; `origin` names it in errors.
    pub fn from_yaml(origin: &str, text: &str) -> Result<ImageVector, ImageVectorError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(ImageVectorError::TooLarge {
                origin: origin.to_owned(),
            });
        }
        let vector: ImageVector = if text.trim().is_empty() {
            ImageVector::default()
        } else {
            yaml_typed(text, &PathStyle::MANIFEST).map_err(|problem| ImageVectorError::Parse {
                origin: origin.to_owned(),
                message: problem.to_string(),
            })?
        };
        let problems = vector.problems();
        if problems.is_empty() {
            Ok(vector)
        } else {
            Err(ImageVectorError::Invalid {
                origin: origin.to_owned(),
                problems,
            })
        }
    }

    /// Reads and validates an image-vector file.
    pub fn read_file(path: &Path) -> Result<ImageVector, ImageVectorError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ImageVectorError::Read {
            path: origin.clone(),
            source,
        })?;
        ImageVector::from_yaml(&origin, &text)
    }

    /// Gardener's validation: a name, `ref` or `repository` (not both, neither empty), no
    /// empty tag, constraints that parse.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, image) in self.images.iter().enumerate() {
            let at = |field: &str| format!("images[{i}].{field}");
            if image.name.is_empty() {
                problems.push(format!("{}: image name is required", at("name")));
            }
            match (&image.reference, &image.repository) {
                (None, None) => problems.push(format!(
                    "{}: either ref or repository is required",
                    at("ref/repository")
                )),
                (Some(reference), _) => {
                    if reference.is_empty() {
                        problems.push(format!("{}: must not be empty", at("ref")));
                    }
                    if image.repository.is_some() {
                        problems.push(format!("{}: cannot be set with ref", at("repository")));
                    }
                    if image.tag.is_some() {
                        problems.push(format!("{}: cannot be set with ref", at("tag")));
                    }
                }
                (None, Some(repository)) => {
                    if repository.is_empty() {
                        problems.push(format!("{}: must not be empty", at("repository")));
                    }
                    if image.tag.as_deref() == Some("") {
                        problems.push(format!("{}: must not be empty", at("tag")));
                    }
                }
            }
            for (field, value) in [
                ("runtimeVersion", &image.runtime_version),
                ("targetVersion", &image.target_version),
            ] {
                if let Some(value) = value
                    && let Err(e) = Constraint::parse(value)
                {
                    problems.push(format!("{}: {e}", at(field)));
                }
            }
        }
        problems
    }

    /// This vector with `overrides` merged over it (Gardener's `MergeImageVectors`).
    pub fn merge(self, overrides: ImageVector) -> ImageVector {
        let mut images = self.images;
        for image in overrides.images {
            let key = merge_key(&image);
            match images.iter().position(|old| merge_key(old) == key) {
                Some(i) => {
                    let merged = merge_source(&images[i], image);
                    images[i] = merged;
                }
                None => images.push(image),
            }
        }
        ImageVector {
            images,
            ca_bundle: overrides.ca_bundle.or(self.ca_bundle),
        }
    }

    /// This vector merged with the file at `path`, if one is given.
    pub fn with_override_file(self, path: Option<&Path>) -> Result<ImageVector, ImageVectorError> {
        match path {
            Some(path) => Ok(self.merge(ImageVector::read_file(path)?)),
            None => Ok(self),
        }
    }

    /// This vector merged with the file named by [`OVERRIDE_ENV`], if it is set and not empty.
    pub fn with_env_override(self) -> Result<ImageVector, ImageVectorError> {
        let path = std::env::var_os(OVERRIDE_ENV).filter(|value| !value.is_empty());
        self.with_override_file(path.as_deref().map(Path::new))
    }

    /// The best entry named `name` for the given Kubernetes versions and architecture.
    ///
    /// `runtime_version` is the version the image runs on, `target_version` the one it acts
    /// on; an entry with a constraint matches only when the corresponding version is given.
    pub fn find_image(
        &self,
        name: &str,
        runtime_version: Option<&str>,
        target_version: Option<&str>,
        arch: Option<&str>,
    ) -> Result<Image, ImageVectorError> {
        let mut best: Option<(u32, &ImageSource)> = None;
        for source in self.images.iter().filter(|s| s.name == name) {
            let Some(score) = score(source, runtime_version, target_version, arch)? else {
                continue;
            };
            if best.is_none_or(|(best_score, _)| score > best_score) {
                best = Some((score, source));
            }
        }
        match best {
            Some((_, source)) => Ok(to_image(source, target_version)),
            None => Err(ImageVectorError::NotFound {
                name: name.to_owned(),
                options: describe_options(runtime_version, target_version, arch),
            }),
        }
    }
}

/// Gardener's merge key. `None` and an empty list of architectures are different keys, as in
/// Gardener.
fn merge_key(source: &ImageSource) -> (&str, &str, &str, Option<String>) {
    (
        &source.name,
        source.runtime_version.as_deref().unwrap_or(""),
        source.target_version.as_deref().unwrap_or(""),
        source.architectures.as_ref().map(|a| a.concat()),
    )
}

/// Gardener's `mergeImageSources`.
fn merge_source(old: &ImageSource, new: ImageSource) -> ImageSource {
    let mut repository = new.repository.clone().or_else(|| old.repository.clone());
    let mut tag = new.tag.or_else(|| old.tag.clone());
    // Gardener falls back to the *old* tag as the version when the override gives none.
    let version = new
        .version
        .or_else(|| old.version.clone())
        .or_else(|| tag.as_ref().and(old.tag.clone()));
    let reference = match (new.reference, &new.repository) {
        (Some(reference), _) => Some(reference),
        (None, Some(_)) => None,
        (None, None) => old.reference.clone(),
    };
    if reference.is_some() {
        repository = None;
        tag = None;
    }
    ImageSource {
        name: new.name,
        source_repository: new
            .source_repository
            .or_else(|| old.source_repository.clone()),
        repository,
        tag,
        reference,
        version,
        target_version: new.target_version.or_else(|| old.target_version.clone()),
        runtime_version: new.runtime_version.or_else(|| old.runtime_version.clone()),
        architectures: new.architectures.or_else(|| old.architectures.clone()),
    }
}

/// The entry's score for a lookup, or `None` when it does not match.
fn score(
    source: &ImageSource,
    runtime_version: Option<&str>,
    target_version: Option<&str>,
    arch: Option<&str>,
) -> Result<Option<u32>, ImageVectorError> {
    let mut total = 0;
    for (constraint, version) in [
        (&source.runtime_version, runtime_version),
        (&source.target_version, target_version),
    ] {
        // As in Gardener, a constraint only restricts lookups that give the version.
        let (Some(constraint), Some(version)) = (constraint, version) else {
            continue;
        };
        let failed = |message: String| ImageVectorError::Constraint {
            name: source.name.clone(),
            message,
        };
        let parsed = Constraint::parse(constraint).map_err(|e| failed(e.to_string()))?;
        let version = normalize(version).map_err(|e| failed(e.to_string()))?;
        if !parsed.matches(&version) {
            return Ok(None);
        }
        total += if constraint::is_exact(constraint) {
            2
        } else {
            1
        };
    }
    let offered: Vec<&str> = match &source.architectures {
        Some(list) => list.iter().map(String::as_str).collect(),
        None => DEFAULT_ARCHITECTURES.to_vec(),
    };
    let wanted = arch.unwrap_or(DEFAULT_ARCHITECTURE);
    if !offered.contains(&wanted) {
        return Ok(None);
    }
    total += if offered.len() == 1 { 2 } else { 1 };
    Ok(Some(total))
}

/// Gardener's `ToImage`.
fn to_image(source: &ImageSource, target_version: Option<&str>) -> Image {
    if let Some(reference) = &source.reference {
        return Image {
            name: source.name.clone(),
            repository: None,
            tag: None,
            reference: Some(reference.clone()),
            version: source.version.clone(),
        };
    }
    let tag = source
        .tag
        .clone()
        .or_else(|| target_version.map(|version| format!("v{}", version.trim_start_matches('v'))));
    Image {
        name: source.name.clone(),
        repository: source.repository.clone(),
        version: source.version.clone().or_else(|| tag.clone()),
        tag,
        reference: None,
    }
}

fn describe_options(runtime: Option<&str>, target: Option<&str>, arch: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(v) = runtime {
        parts.push(format!("runtime version {v}"));
    }
    if let Some(v) = target {
        parts.push(format!("target version {v}"));
    }
    parts.push(format!(
        "architecture {}",
        arch.unwrap_or(DEFAULT_ARCHITECTURE)
    ));
    parts.join(", ")
}

impl Image {
    /// Sets the tag when the image has neither a tag nor a `ref` (Gardener's
    /// `WithOptionalTag`), e.g. to the extension's own version for its own images.
    pub fn with_optional_tag(mut self, tag: &str) -> Image {
        if self.reference.is_none() && self.tag.is_none() {
            self.tag = Some(tag.to_owned());
        }
        self
    }
}

impl fmt::Display for Image {
    /// The pullable reference: `ref`, or `repository:tag` (`repository@sha256:...` for digest
    /// tags), or the bare repository.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reference) = &self.reference {
            return f.write_str(reference);
        }
        let repository = self.repository.as_deref().unwrap_or("");
        match &self.tag {
            Some(tag) if tag.starts_with(SHA256_TAG_PREFIX) => write!(f, "{repository}@{tag}"),
            Some(tag) => write!(f, "{repository}:{tag}"),
            None => f.write_str(repository),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(yaml: &str) -> ImageVector {
        ImageVector::from_yaml("test", yaml).unwrap()
    }

    fn find(
        v: &ImageVector,
        runtime: Option<&str>,
        target: Option<&str>,
        arch: Option<&str>,
    ) -> String {
        v.find_image("x", runtime, target, arch)
            .unwrap()
            .to_string()
    }

    #[test]
    fn parses_entries_and_ignores_unknown_fields() {
        let v = vector(
            r#"
images:
  - name: x
    sourceRepository: github.com/example/x
    repository: example.com/x
    tag: v1
    labels: [{name: gardener.cloud/cve-categorisation, value: {}}]
caBundle:
  inline: "-----BEGIN CERTIFICATE-----"
"#,
        );
        assert_eq!(v.images.len(), 1);
        assert_eq!(
            v.images[0].source_repository.as_deref(),
            Some("github.com/example/x")
        );
        assert!(v.ca_bundle.is_some());
        assert_eq!(find(&v, None, None, None), "example.com/x:v1");
    }

    #[test]
    fn validation_follows_gardener() {
        let err = ImageVector::from_yaml(
            "test",
            r#"
images:
  - name: ""
  - {name: b, ref: "r", repository: "x", tag: "t"}
  - {name: c, repository: "", tag: ""}
  - {name: d, repository: x, targetVersion: ">= nope"}
"#,
        )
        .unwrap_err();
        let text = err.to_string();
        for expected in [
            "images[0].name: image name is required",
            "images[0].ref/repository: either ref or repository is required",
            "images[1].repository: cannot be set with ref",
            "images[1].tag: cannot be set with ref",
            "images[2].repository: must not be empty",
            "images[2].tag: must not be empty",
            "images[3].targetVersion",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in {text}");
        }
        assert!(matches!(
            ImageVector::from_yaml("test", "images: [").unwrap_err(),
            ImageVectorError::Parse { .. }
        ));
    }

    #[test]
    fn decoding_errors_name_the_field_and_the_line() {
        let message = |text: &str| {
            ImageVector::from_yaml("o.yaml", text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message("images:\n  - name: a\n    tag: [v1]\n"),
            "image vector o.yaml is not valid: images[0].tag: expected a single value, got a list \
             or an object (line 3)"
        );
        assert_eq!(
            message("images:\n  - name: a\n    name: b\n"),
            "image vector o.yaml is not valid: images[0]: key \"name\" appears twice (again at \
             line 3)"
        );
        assert_eq!(
            message("images:\n  - repository: a\n"),
            "image vector o.yaml is not valid: images[0].name: is required but missing (line 2)"
        );
    }

    #[test]
    fn merge_by_key_overrides_fields_and_appends_new_keys() {
        let base = vector(
            r#"
images:
  - {name: x, repository: example.com/x, tag: v1, sourceRepository: github.com/x}
  - {name: x, repository: example.com/x-old, tag: v0, targetVersion: "< 1.30"}
"#,
        );
        let overrides = vector(
            r#"
images:
  - {name: x, repository: example.com/x, tag: v2}
  - {name: x, repository: mirror.example.com/x, targetVersion: ">= 1.30"}
  - {name: y, repository: example.com/y, tag: v1}
"#,
        );
        let merged = base.merge(overrides);
        assert_eq!(merged.images.len(), 4);
        assert_eq!(
            merged.images[0].repository.as_deref(),
            Some("example.com/x")
        );
        assert_eq!(merged.images[0].tag.as_deref(), Some("v2"));
        assert_eq!(
            merged.images[0].source_repository.as_deref(),
            Some("github.com/x")
        );
        assert_eq!(
            merged.images[0].version.as_deref(),
            Some("v1"),
            "Gardener keeps the old tag as the version"
        );
        assert_eq!(
            merged.images[1].tag.as_deref(),
            Some("v0"),
            "other key untouched"
        );
        assert_eq!(merged.images[2].target_version.as_deref(), Some(">= 1.30"));
        assert_eq!(merged.images[3].name, "y");
    }

    #[test]
    fn merge_key_includes_architectures() {
        let base = vector("images:\n  - {name: x, repository: r, tag: multi}\n");
        let overrides =
            vector("images:\n  - {name: x, repository: r, tag: arm, architectures: [arm64]}\n");
        let merged = base.merge(overrides);
        assert_eq!(merged.images.len(), 2);
        assert_eq!(find(&merged, None, None, Some("arm64")), "r:arm");
        assert_eq!(find(&merged, None, None, Some("amd64")), "r:multi");
    }

    #[test]
    fn override_ref_clears_repository_and_tag_and_repository_clears_ref() {
        let base = vector("images:\n  - {name: x, repository: example.com/x, tag: v1}\n");
        let with_ref = base.merge(vector(
            "images:\n  - {name: x, ref: \"mirror.example.com/x@sha256:abc\"}\n",
        ));
        assert_eq!(with_ref.images[0].repository, None);
        assert_eq!(with_ref.images[0].tag, None);
        assert_eq!(
            find(&with_ref, None, None, None),
            "mirror.example.com/x@sha256:abc"
        );

        let back = with_ref.merge(vector(
            "images:\n  - {name: x, repository: other.example.com/x}\n",
        ));
        assert_eq!(back.images[0].reference, None);
        assert_eq!(
            back.images[0].repository.as_deref(),
            Some("other.example.com/x")
        );
        assert_eq!(back.images[0].tag, None, "the ref had cleared the tag");

        // Validation keeps such overrides out of files, but merge itself follows Gardener.
        let version_only = ImageSource {
            name: "x".into(),
            version: Some("v9".into()),
            ..ImageSource::default()
        };
        let kept = vector("images:\n  - {name: x, ref: \"a/b:c\"}\n").merge(ImageVector {
            images: vec![version_only],
            ca_bundle: None,
        });
        assert_eq!(
            kept.images[0].reference.as_deref(),
            Some("a/b:c"),
            "an override without ref or repository keeps the old ref"
        );
        assert_eq!(kept.images[0].version.as_deref(), Some("v9"));
    }

    #[test]
    fn ca_bundle_of_the_override_wins() {
        let base = vector("caBundle: {inline: a}\n");
        assert_eq!(
            base.clone()
                .merge(vector("caBundle: {inline: b}\n"))
                .ca_bundle,
            Some(CaBundle {
                inline: Some("b".into())
            })
        );
        assert_eq!(
            base.merge(ImageVector::default()).ca_bundle,
            Some(CaBundle {
                inline: Some("a".into())
            })
        );
    }

    #[test]
    fn exact_constraints_beat_ranges() {
        let v = vector(
            r#"
images:
  - {name: x, repository: r, tag: range, targetVersion: ">= 1.30"}
  - {name: x, repository: r, tag: exact, targetVersion: "= 1.31.2"}
  - {name: x, repository: r, tag: old, targetVersion: "< 1.30"}
"#,
        );
        assert_eq!(find(&v, None, Some("1.31.2"), None), "r:exact");
        assert_eq!(find(&v, None, Some("1.31.3"), None), "r:range");
        assert_eq!(find(&v, None, Some("1.29.0"), None), "r:old");
    }

    #[test]
    fn constraints_need_the_version_and_add_up() {
        let v = vector(
            r#"
images:
  - {name: x, repository: r, tag: plain}
  - {name: x, repository: r, tag: both, runtimeVersion: ">= 1.28", targetVersion: ">= 1.28"}
"#,
        );
        assert_eq!(find(&v, Some("1.30.0"), Some("1.30.0"), None), "r:both");
        assert_eq!(
            find(&v, None, None, None),
            "r:plain",
            "without versions both match with equal score; the first wins"
        );
        let only_constrained =
            vector("images:\n  - {name: x, repository: r, tag: t, targetVersion: \">= 1.30\"}\n");
        assert!(matches!(
            only_constrained.find_image("x", None, Some("1.29.0"), None),
            Err(ImageVectorError::NotFound { .. })
        ));
        assert!(matches!(
            only_constrained.find_image("x", None, Some("garbage"), None),
            Err(ImageVectorError::Constraint { .. })
        ));
    }

    #[test]
    fn single_arch_beats_multi_arch_and_amd64_is_the_default() {
        let v = vector(
            r#"
images:
  - {name: x, repository: r, tag: multi}
  - {name: x, repository: r, tag: arm, architectures: [arm64]}
"#,
        );
        assert_eq!(find(&v, None, None, Some("arm64")), "r:arm");
        assert_eq!(find(&v, None, None, Some("amd64")), "r:multi");
        assert_eq!(find(&v, None, None, None), "r:multi");
        let arm_only =
            vector("images:\n  - {name: x, repository: r, tag: arm, architectures: [arm64]}\n");
        assert!(arm_only.find_image("x", None, None, None).is_err());
        assert!(
            vector("images: []")
                .find_image("x", None, None, None)
                .is_err()
        );
    }

    #[test]
    fn missing_tag_defaults_to_the_target_version() {
        let v = vector("images:\n  - {name: x, repository: r}\n");
        let image = v.find_image("x", None, Some("1.31.2"), None).unwrap();
        assert_eq!(image.to_string(), "r:v1.31.2");
        assert_eq!(image.version.as_deref(), Some("v1.31.2"));
        let image = v.find_image("x", None, Some("v1.31.2"), None).unwrap();
        assert_eq!(image.to_string(), "r:v1.31.2");
        let untagged = v.find_image("x", None, None, None).unwrap();
        assert_eq!(untagged.to_string(), "r");
        assert_eq!(untagged.with_optional_tag("v0.1.0").to_string(), "r:v0.1.0");
    }

    #[test]
    fn digest_tags_use_at() {
        let v = vector("images:\n  - {name: x, repository: r, tag: \"sha256:abc\"}\n");
        assert_eq!(find(&v, None, None, None), "r@sha256:abc");
    }

    #[test]
    fn override_file_is_read_and_merged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images_overwrite.yaml");
        std::fs::write(&path, "images:\n  - {name: x, repository: r, tag: v2}\n").unwrap();
        let base = vector("images:\n  - {name: x, repository: r, tag: v1}\n");
        let merged = base.clone().with_override_file(Some(&path)).unwrap();
        assert_eq!(find(&merged, None, None, None), "r:v2");
        assert_eq!(base.clone().with_override_file(None).unwrap(), base);
        assert!(matches!(
            base.with_override_file(Some(&dir.path().join("missing"))),
            Err(ImageVectorError::Read { .. })
        ));
    }
}
