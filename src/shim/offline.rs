//! The offline renderer: the shoot bundle an Extension would produce, without a cluster.
//! Invalid input fails with the same text and codes the controller writes into `lastError`.
//!
//! The input is told apart by its `kind`: an `Extension` manifest as gardenlet writes it, or a
//! bare providerConfig (`kind: ContainerdShimConfig`) as the shoot owner writes it into the
//! Shoot, which is rendered as the providerConfig of an Extension of this type.

use std::path::Path;

use serde_json::{Value, json};

use crate::gardener::api::{Cluster, ErrorCode, Extension, ExtensionSpec, Shoot};
use crate::gardener::decode::{PathStyle, Problem, describe, quote, value_typed, yaml_value};
use crate::gardener::error_codes::CodedError;
use crate::gardener::extension::status::{descriptions, format_error_description};
use crate::gardener::imagevector::ImageVector;
use crate::shim::actuator::ShimError;
use crate::shim::config::{self, Catalog, decode};
use crate::shim::identity::EXTENSION_TYPE;
use crate::shim::plan::Plan;

/// `apiVersion` of Gardener's Extension and Cluster resources.
pub const EXTENSIONS_API_VERSION: &str = "extensions.gardener.cloud/v1alpha1";

/// What `render -f` takes, for messages.
const INPUT_KINDS: &str = "Extension or ContainerdShimConfig";

/// Paths in an Extension or a Cluster, from the top of the manifest; the providerConfig's maps
/// are written as validation writes them.
const MANIFEST_PATHS: PathStyle<'static> = PathStyle {
    root: "",
    map_fields: &["labels", "annotations", "options", "nodeSelector"],
};

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

/// The largest input file `render` reads: an Extension or a Cluster with its Shoot is a few
/// kilobytes; the API server stores no object larger than 1.5 MiB.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

fn read(path: &Path) -> Result<String, OfflineError> {
    use std::io::Read;
    let failed = |source| OfflineError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(failed)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(failed)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(invalid(
            path,
            INPUT_KINDS,
            format!("the file is larger than the limit of {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok(text)
}

fn invalid(path: &Path, kind: &'static str, message: impl ToString) -> OfflineError {
    OfflineError::Decode {
        path: path.display().to_string(),
        kind,
        message: message.to_string(),
    }
}

/// The `kind` of a document, read leniently (a key given twice: the last one) so that a
/// problem in the strict reading can be reported in the paths of the document it is in.
fn lenient_kind(text: &str) -> Option<String> {
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
    };
    let value: Value = serde_saphyr::from_str_with_options(text, options).ok()?;
    value.get("kind")?.as_str().map(str::to_owned)
}

/// Whether a manifest of `kind` has the one `apiVersion` this extension reads it in.
fn check_api_version(value: &Value, api_version: &str, kind: &str) -> Result<(), Problem> {
    let problem = |path: &str, detail: String| Problem {
        path: path.to_owned(),
        detail,
    };
    match value.get("apiVersion") {
        Some(Value::String(v)) if v == api_version => Ok(()),
        Some(Value::String(v)) => Err(problem(
            "apiVersion",
            format!(
                "{} is not supported for kind {kind}; use {}",
                quote(v),
                quote(api_version)
            ),
        )),
        Some(other) => Err(problem(
            "apiVersion",
            format!(
                "expected the string {}, got {}",
                quote(api_version),
                describe(other)
            ),
        )),
        None => Err(problem(
            "apiVersion",
            format!("is missing; set it to {}", quote(api_version)),
        )),
    }
}

/// The Extension that `render -f` was given: the manifest itself, or one carrying the bare
/// providerConfig in the file.
fn read_input(path: &Path) -> Result<Extension, OfflineError> {
    let text = read(path)?;
    let value = yaml_value(&text, &MANIFEST_PATHS).map_err(|problem| {
        match lenient_kind(&text).as_deref() {
            Some(config::KIND) => {
                let problem = yaml_value(&text, &decode::PATHS).err().unwrap_or(problem);
                invalid(path, "ContainerdShimConfig", problem)
            }
            Some("Extension") => invalid(path, "Extension", problem),
            _ => invalid(path, INPUT_KINDS, problem),
        }
    })?;
    let kind = match &value {
        Value::Object(map) => map.get("kind"),
        Value::Null => {
            return Err(invalid(
                path,
                INPUT_KINDS,
                "the file is empty; give an Extension manifest or a providerConfig",
            ));
        }
        other => {
            return Err(invalid(
                path,
                INPUT_KINDS,
                format!("expected an object with a kind, got {}", describe(other)),
            ));
        }
    };
    let allowed = format!(
        "-f takes an Extension ({EXTENSIONS_API_VERSION}) or a {} ({})",
        config::KIND,
        config::API_VERSION
    );
    match kind {
        Some(Value::String(kind)) if kind == "Extension" => extension(path, &value),
        // apiVersion is checked with the rest of the providerConfig, in the controller's words.
        Some(Value::String(kind)) if kind == config::KIND => Ok(Extension::new(
            EXTENSION_TYPE,
            ExtensionSpec {
                type_: EXTENSION_TYPE.to_owned(),
                class: None,
                provider_config: Some(value),
                provider_config_error: None,
            },
        )),
        Some(Value::String(kind)) if kind == "Cluster" => Err(invalid(
            path,
            INPUT_KINDS,
            format!("kind: \"Cluster\" belongs to --cluster; {allowed}"),
        )),
        Some(Value::String(kind)) => Err(invalid(
            path,
            INPUT_KINDS,
            format!("kind: {} is not supported; {allowed}", quote(kind)),
        )),
        Some(other) => Err(invalid(
            path,
            INPUT_KINDS,
            format!(
                "kind: expected a string, got {}; {allowed}",
                describe(other)
            ),
        )),
        None => Err(invalid(
            path,
            INPUT_KINDS,
            format!("kind: is missing; {allowed}"),
        )),
    }
}

fn extension(path: &Path, value: &Value) -> Result<Extension, OfflineError> {
    check_api_version(value, EXTENSIONS_API_VERSION, "Extension")
        .map_err(|problem| invalid(path, "Extension", problem))?;
    let ext: Extension = value_typed(value, &MANIFEST_PATHS)
        .map_err(|problem| invalid(path, "Extension", problem))?;
    if ext.spec.type_ != EXTENSION_TYPE {
        // The controller would never pick it up.
        return Err(invalid(
            path,
            "Extension",
            format!(
                "spec.type: {} is not handled by this extension; use {}",
                quote(&ext.spec.type_),
                quote(EXTENSION_TYPE)
            ),
        ));
    }
    Ok(ext)
}

/// The Shoot embedded in the Cluster manifest at `path`; `None` when it embeds none.
fn read_shoot(path: &Path) -> Result<Option<Shoot>, OfflineError> {
    let text = read(path)?;
    let value =
        yaml_value(&text, &MANIFEST_PATHS).map_err(|problem| invalid(path, "Cluster", problem))?;
    match value.get("kind") {
        Some(Value::String(kind)) if kind == "Cluster" => {}
        Some(other) => {
            let given = match other {
                Value::String(kind) => quote(kind),
                other => describe(other),
            };
            return Err(invalid(
                path,
                "Cluster",
                format!(
                    "kind: {given} is not supported; --cluster takes a Cluster ({EXTENSIONS_API_VERSION})"
                ),
            ));
        }
        None => {
            return Err(invalid(
                path,
                "Cluster",
                format!("kind: is missing; --cluster takes a Cluster ({EXTENSIONS_API_VERSION})"),
            ));
        }
    }
    check_api_version(&value, EXTENSIONS_API_VERSION, "Cluster")
        .map_err(|problem| invalid(path, "Cluster", problem))?;
    let cluster: Cluster = value_typed(&value, &MANIFEST_PATHS)
        .map_err(|problem| invalid(path, "Cluster", problem))?;
    match &cluster.spec.shoot {
        Value::Null => Ok(None),
        Value::Object(map) if map.is_empty() => Ok(None),
        shoot => {
            let paths = PathStyle {
                root: "spec.shoot",
                ..MANIFEST_PATHS
            };
            value_typed(shoot, &paths)
                .map(Some)
                .map_err(|problem| invalid(path, "Cluster", problem))
        }
    }
}

/// The Shoot assumed without a Cluster: one containerd pool `worker`, plus every pool the
/// providerConfig names, all amd64. The names come from the decoded providerConfig, so they
/// are as many and as long as decoding's size limits allow; validation then judges them.
fn assumed_shoot(ext: &Extension) -> Shoot {
    let mut pools = vec!["worker".to_string()];
    let named = match &ext.spec.provider_config_error {
        Some(_) => None,
        None => decode::decode(ext.spec.provider_config.as_ref()).ok(),
    };
    for shim in named.iter().flat_map(|c| &c.shims) {
        for name in shim.worker_pools.iter().flatten() {
            if !pools.contains(name) {
                pools.push(name.clone());
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

/// Renders the bundle of `input_file` (an Extension manifest or a bare providerConfig) for the
/// Shoot embedded in `cluster_file`, or an assumed one. Returns the manifests as a YAML stream.
pub fn render_files(
    input_file: &Path,
    cluster_file: Option<&Path>,
    catalog: &Catalog,
    images: &ImageVector,
) -> Result<String, OfflineError> {
    let ext = read_input(input_file)?;
    let shoot = match cluster_file {
        Some(path) => read_shoot(path)?,
        None => None,
    }
    .unwrap_or_else(|| assumed_shoot(&ext));
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
    let manifests = Plan { catalog, images }
        .install(ext, shoot)
        .map_err(as_controller)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::config::images;

    const CONFIG_HEADER: &str = "apiVersion: containerd-shim.extensions.gardener.cloud/v1alpha1\nkind: ContainerdShimConfig\n";
    const EXTENSION_HEADER: &str = "apiVersion: extensions.gardener.cloud/v1alpha1\nkind: Extension\nmetadata: {name: containerd-shim, namespace: shoot--p--s}\n";

    fn fixtures() -> (Catalog, ImageVector) {
        (
            Catalog::builtin().expect("built-in catalog"),
            images::embedded().expect("embedded image vector"),
        )
    }

    /// `render -f <input> [--cluster <cluster>]` on files with this content.
    fn render(input: &str, cluster: Option<&str>) -> Result<String, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let input_file = dir.path().join("input.yaml");
        std::fs::write(&input_file, input).expect("write the input");
        let cluster_file = cluster.map(|text| {
            let path = dir.path().join("cluster.yaml");
            std::fs::write(&path, text).expect("write the cluster");
            path
        });
        let (catalog, images) = fixtures();
        render_files(&input_file, cluster_file.as_deref(), &catalog, &images).map_err(|e| {
            let text = e
                .to_string()
                .replace(&dir.path().display().to_string(), "DIR");
            crate::gardener::decode::assert_plain(&text);
            text
        })
    }

    #[test]
    fn a_bare_provider_config_renders_for_the_assumed_shoot() {
        let yaml = render(
            &format!("{CONFIG_HEADER}shims:\n  - name: gvisor\n    workerPools: [sandboxed]\n"),
            None,
        )
        .expect("renders");
        assert!(
            yaml.contains("name: containerd-shim-installer-sandboxed"),
            "{yaml}"
        );
        assert!(yaml.contains("handler: runsc"), "{yaml}");
        let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("a YAML stream");
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == "RuntimeClass" && o["metadata"]["name"] == "gvisor"),
            "{yaml}"
        );
    }

    #[test]
    fn the_input_is_told_apart_by_kind_and_a_wrong_one_is_named() {
        let extension = format!(
            "{EXTENSION_HEADER}spec:\n  type: containerd-shim\n  providerConfig:\n    {}shims: [{{name: wasmtime}}]\n",
            CONFIG_HEADER.replace('\n', "\n    ")
        );
        let yaml = render(&extension, None).expect("renders");
        assert!(yaml.contains("handler: wasmtime"), "{yaml}");

        let allowed = "-f takes an Extension (extensions.gardener.cloud/v1alpha1) or a \
                       ContainerdShimConfig (containerd-shim.extensions.gardener.cloud/v1alpha1)";
        assert_eq!(
            render("apiVersion: v1\nkind: ConfigMap\n", None).unwrap_err(),
            format!(
                "DIR/input.yaml is not a valid Extension or ContainerdShimConfig: kind: \
                 \"ConfigMap\" is not supported; {allowed}"
            )
        );
        assert_eq!(
            render("shims: []\n", None).unwrap_err(),
            format!(
                "DIR/input.yaml is not a valid Extension or ContainerdShimConfig: kind: is \
                 missing; {allowed}"
            )
        );
        assert_eq!(
            render(
                "apiVersion: extensions.gardener.cloud/v1alpha1\nkind: Cluster\n",
                None
            )
            .unwrap_err(),
            format!(
                "DIR/input.yaml is not a valid Extension or ContainerdShimConfig: kind: \
                 \"Cluster\" belongs to --cluster; {allowed}"
            )
        );
        assert_eq!(
            render("", None).unwrap_err(),
            "DIR/input.yaml is not a valid Extension or ContainerdShimConfig: the file is empty; \
             give an Extension manifest or a providerConfig"
        );
        assert_eq!(
            render("- a\n", None).unwrap_err(),
            "DIR/input.yaml is not a valid Extension or ContainerdShimConfig: expected an \
             object with a kind, got a list"
        );
    }

    #[test]
    fn extension_manifests_are_checked_field_by_field() {
        let ext = |rest: &str| format!("{EXTENSION_HEADER}{rest}");
        assert_eq!(
            render(
                "apiVersion: extensions.gardener.cloud/v1beta1\nkind: Extension\n",
                None
            )
            .unwrap_err(),
            "DIR/input.yaml is not a valid Extension: apiVersion: \
             \"extensions.gardener.cloud/v1beta1\" is not supported for kind Extension; use \
             \"extensions.gardener.cloud/v1alpha1\""
        );
        assert_eq!(
            render(&ext("spec: {class: shoot}\n"), None).unwrap_err(),
            "DIR/input.yaml is not a valid Extension: spec.type: is required but missing"
        );
        assert_eq!(
            render(&ext("spec: {type: containerd}\n"), None).unwrap_err(),
            "DIR/input.yaml is not a valid Extension: spec.type: \"containerd\" is not handled \
             by this extension; use \"containerd-shim\""
        );
        assert_eq!(
            render(
                &ext("spec: {type: containerd-shim, class: [shoot]}\n"),
                None
            )
            .unwrap_err(),
            "DIR/input.yaml is not a valid Extension: spec.class: expected a string, got a list"
        );
        assert_eq!(
            render(
                &ext("spec:\n  type: containerd-shim\n  providerConfig:\n    shims: []\n    shims: []\n"),
                None
            )
            .unwrap_err(),
            "DIR/input.yaml is not a valid Extension: spec.providerConfig: key \"shims\" appears \
             twice (again at line 8)"
        );
    }

    #[test]
    fn provider_config_problems_are_the_controllers_or_name_their_line() {
        assert_eq!(
            render(
                &format!("{CONFIG_HEADER}shims:\n  - name: spin\n    name: wasmtime\n"),
                None
            )
            .unwrap_err(),
            "DIR/input.yaml is not a valid ContainerdShimConfig: providerConfig.shims[0]: key \
             \"name\" appears twice (again at line 5)"
        );
        assert_eq!(
            render(
                &format!(
                    "{CONFIG_HEADER}shims:\n  - name: spin\n    options: {{SystemdCgroup: [1]}}\n"
                ),
                None
            )
            .unwrap_err(),
            "Error reconciling Extension: invalid providerConfig: \
             providerConfig.shims[0].options[SystemdCgroup]: expected true, false, an integer or \
             a string, got a list [codes: ERR_CONFIGURATION_PROBLEM]"
        );
        assert_eq!(
            render(
                "apiVersion: containerd-shim.extensions.gardener.cloud/v2\nkind: ContainerdShimConfig\n",
                None
            )
            .unwrap_err(),
            "Error reconciling Extension: invalid providerConfig: providerConfig.apiVersion: \
             \"containerd-shim.extensions.gardener.cloud/v2\" is not supported; use \
             \"containerd-shim.extensions.gardener.cloud/v1alpha1\" [codes: \
             ERR_CONFIGURATION_PROBLEM]"
        );
    }

    #[test]
    fn the_cluster_gives_the_shoot_and_a_wrong_one_is_named() {
        let config = format!("{CONFIG_HEADER}shims:\n  - name: gvisor\n    workerPools: [gpu]\n");
        let cluster = |shoot: &str| {
            format!(
                "apiVersion: extensions.gardener.cloud/v1alpha1\nkind: Cluster\nmetadata: {{name: shoot--p--s}}\nspec:\n  shoot:\n{shoot}"
            )
        };
        let with_pools = cluster(
            "    spec:\n      kubernetes: {version: 1.33.1}\n      provider:\n        workers:\n          - {name: cpu, cri: {name: containerd}, machine: {architecture: amd64}}\n",
        );
        let err = render(&config, Some(&with_pools)).unwrap_err();
        assert!(
            err.contains("providerConfig.shims[0].workerPools[0]: \"gpu\" is not a worker pool"),
            "{err}"
        );
        assert_eq!(
            render(
                &config,
                Some(&cluster("    spec:\n      kubernetes: {version: [1]}\n"))
            )
            .unwrap_err(),
            "DIR/cluster.yaml is not a valid Cluster: spec.shoot.spec.kubernetes.version: \
             expected a string, got a list"
        );
        assert_eq!(
            render(&config, Some(CONFIG_HEADER)).unwrap_err(),
            "DIR/cluster.yaml is not a valid Cluster: kind: \"ContainerdShimConfig\" is not \
             supported; --cluster takes a Cluster (extensions.gardener.cloud/v1alpha1)"
        );
    }
}
