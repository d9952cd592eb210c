//! From a decoded providerConfig, the catalog and the Shoot to a [`ValidatedConfig`]: the
//! single input of rendering, with every default applied and every reference resolved.
//!
//! Validation never stops at the first problem: a shoot owner sees everything that is wrong in
//! one `lastError`, each problem with its field path and value.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::admission;
use super::catalog::{Catalog, CatalogEntry};
pub use super::custom_shim::MAX_BINARIES;
use super::custom_shim::{custom_binaries, validate_custom_header};
use super::error::{ConfigError, FieldError, FieldPath, quote};
use super::pools::{self, SelectedPool};
use super::scheduling;
use super::syntax;
use super::types::{self, ContainerdShimConfig, CustomShim, DeliveryMode, Shim};
pub use super::validated::{
    ShimOrigin, ValidatedBinary, ValidatedConfig, ValidatedRollout, ValidatedShim, ValidatedSource,
};
use crate::desired_shims::{ConfigFile, OptionValue};
use crate::gardener::api::cluster::Shoot;

/// Most shims in one providerConfig.
pub const MAX_SHIMS: usize = 16;
/// Most runtime options of one shim.
pub const MAX_OPTIONS: usize = 32;
/// Upper bound of `rollout.maxConcurrentRestarts` (each slot is a Lease in the shoot).
pub const MAX_CONCURRENT_RESTARTS: u32 = 100;

/// Validates `config` against the catalog and the Shoot's worker pools.
pub fn validate(
    config: &ContainerdShimConfig,
    catalog: &Catalog,
    shoot: &Shoot,
) -> Result<ValidatedConfig, ConfigError> {
    let root = FieldPath::root();
    let mut errors = Vec::new();
    if config.shims.len() > MAX_SHIMS {
        errors.push(FieldError::new(
            &root.child("shims"),
            format!(
                "{} entries exceed the limit of {MAX_SHIMS}",
                config.shims.len()
            ),
        ));
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut handlers: BTreeMap<String, usize> = BTreeMap::new();
    let mut classes: BTreeMap<String, usize> = BTreeMap::new();
    let mut shims = Vec::new();
    let delivery = config.delivery.unwrap_or(catalog.default_delivery);
    for (i, shim) in config.shims.iter().enumerate() {
        let path = root.child("shims").index(i);
        let duplicate = names.get(shim.name.as_str()).copied();
        if let Some(first) = duplicate {
            errors.push(FieldError::invalid(
                &path.child("name"),
                &shim.name,
                format!("is already the name of shims[{first}]"),
            ));
        } else {
            names.insert(&shim.name, i);
        }
        let validated = validate_shim(shim, catalog, shoot, &path, &mut errors);
        // A repeated name usually repeats the defaults too; its handler and class clashes
        // would only restate the same mistake.
        let Some(validated) = validated.filter(|_| duplicate.is_none()) else {
            continue;
        };
        if delivery == DeliveryMode::Osc {
            osc_deliverable(&validated, &path, &mut errors);
        }
        let rc_path = path.child("runtimeClass");
        match handlers.get(&validated.handler) {
            Some(first) => errors.push(FieldError::invalid(
                &rc_path.child("handler"),
                &validated.handler,
                format!(
                    "is already the handler of shims[{first}]; set a different runtimeClass.handler"
                ),
            )),
            None => {
                handlers.insert(validated.handler.clone(), i);
            }
        }
        match classes.get(&validated.runtime_class_name) {
            Some(first) => errors.push(FieldError::invalid(
                &rc_path.child("name"),
                &validated.runtime_class_name,
                format!("is already the RuntimeClass of shims[{first}]; set a different runtimeClass.name"),
            )),
            None => {
                classes.insert(validated.runtime_class_name.clone(), i);
            }
        }
        shims.push(validated);
    }
    let rollout = validate_rollout(config.rollout.as_ref(), &root.child("rollout"), &mut errors);
    let policy_api = admission::policy_api(shoot)
        .inspect_err(|e| errors.push(e.clone()))
        .ok();
    let (Some(policy_api), true) = (policy_api, errors.is_empty()) else {
        return Err(ConfigError { errors });
    };
    shims.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ValidatedConfig {
        shims,
        rollout,
        kubernetes_version: Some(shoot.spec.kubernetes.version.clone()).filter(|v| !v.is_empty()),
        policy_api,
        delivery,
    })
}

/// What an OperatingSystemConfig cannot carry: it is one for all nodes of a worker pool, and
/// the node agent takes files from images only.
fn osc_deliverable(shim: &ValidatedShim, path: &FieldPath, errors: &mut Vec<FieldError>) {
    if let Some((key, value)) = shim.node_selector.iter().next() {
        errors.push(FieldError::invalid(
            &path.child("nodeSelector"),
            &format!("{key}: {value}"),
            "selects nodes within a worker pool, but with delivery \"osc\" every node of a pool \
             gets the same OperatingSystemConfig; select with workerPools, or use delivery \
             \"daemonset\"",
        ));
    }
    for (j, binary) in shim.binaries.iter().enumerate() {
        if let ValidatedSource::Url { .. } = binary.source {
            errors.push(FieldError::invalid(
                &path.child("custom").child("binaries").index(j).child("url"),
                &binary.name,
                "is downloaded from a URL, but with delivery \"osc\" gardener-node-agent takes \
                 files from images only; give an image, or use delivery \"daemonset\"",
            ));
        }
    }
}

/// The definition a shim resolves to.
enum Source<'a> {
    Catalog {
        entry_name: &'a str,
        entry: &'a CatalogEntry,
        version: String,
    },
    Custom(&'a CustomShim),
}

/// Validates one shim; `None` when it is too broken to resolve (its errors are recorded).
fn validate_shim(
    shim: &Shim,
    catalog: &Catalog,
    shoot: &Shoot,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Option<ValidatedShim> {
    let before = errors.len();
    if let Err(problem) = syntax::dns1123_label(&shim.name) {
        errors.push(FieldError::invalid(
            &path.child("name"),
            &shim.name,
            problem,
        ));
    }
    let source = resolve_source(shim, catalog, path, errors);
    let pools = pools::select(
        shim.worker_pools.as_deref(),
        shoot,
        &path.child("workerPools"),
        errors,
    );
    let node_selector =
        scheduling::node_selector(&shim.node_selector, &path.child("nodeSelector"), errors);
    let rc = shim.runtime_class.clone().unwrap_or_default();
    let rc_path = path.child("runtimeClass");
    let tolerations =
        scheduling::tolerations(&rc.tolerations, &rc_path.child("tolerations"), errors);
    check_runtime_class_names(&rc, &rc_path, errors);
    let source = source?;

    let (handler, runtime_class_name) = handler_and_class(shim, &rc, &source, path, errors);
    let options = options(shim, &source, &path.child("options"), errors);
    let architectures = pools::architectures(&pools);
    let (default_overhead, default_annotations): (_, &[String]) = match &source {
        Source::Catalog { entry, .. } => (entry.overhead.as_ref(), &entry.pod_annotations),
        Source::Custom(_) => (None, &[]),
    };
    let overhead = scheduling::overhead(
        rc.overhead.as_ref(),
        default_overhead,
        &rc_path.child("overhead"),
        errors,
    );
    let pod_annotations = scheduling::pod_annotations(
        shim.pod_annotations.as_deref(),
        default_annotations,
        &path.child("podAnnotations"),
        errors,
    );

    let definition = definition(source, path, &pools, catalog, errors);
    let validated = ValidatedShim {
        name: shim.name.clone(),
        origin: definition.origin,
        handler,
        runtime_class_name,
        runtime_type: definition.runtime_type,
        version: definition.version,
        binaries: definition.binaries,
        oci_runtime: definition.oci_runtime,
        options,
        pod_annotations,
        privileged_without_host_devices: definition.privileged_without_host_devices,
        config_files: definition.config_files,
        overhead,
        tolerations,
        worker_pools: sorted_pool_names(&pools),
        node_selector,
        architectures,
    };
    (errors.len() == before).then_some(validated)
}

/// The shoot owner's own `runtimeClass.name` and `.handler` must be valid names.
fn check_runtime_class_names(
    rc: &types::RuntimeClass,
    rc_path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if let Some(name) = &rc.name
        && let Err(problem) = syntax::dns1123_subdomain(name)
    {
        errors.push(FieldError::invalid(&rc_path.child("name"), name, problem));
    }
    if let Some(handler) = &rc.handler
        && let Err(problem) = syntax::handler(handler)
    {
        errors.push(FieldError::invalid(
            &rc_path.child("handler"),
            handler,
            problem,
        ));
    }
}

/// The containerd handler and RuntimeClass name: the shoot owner's, else the definition's.
fn handler_and_class(
    shim: &Shim,
    rc: &types::RuntimeClass,
    source: &Source<'_>,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> (String, String) {
    let (default_handler, default_class) = match source {
        Source::Catalog { entry, .. } => (entry.handler.clone(), entry.runtime_class_name.clone()),
        Source::Custom(_) => (shim.name.clone(), shim.name.clone()),
    };
    let handler = rc.handler.clone().unwrap_or(default_handler);
    if rc.handler.is_none()
        && matches!(source, Source::Custom(_))
        && let Err(problem) = syntax::handler(&handler)
    {
        errors.push(FieldError::invalid(
            &path.child("name"),
            &handler,
            format!(
                "is the default handler of this custom shim but {problem}; set runtimeClass.handler"
            ),
        ));
    }
    let runtime_class_name = rc.name.clone().unwrap_or(default_class);
    (handler, runtime_class_name)
}

/// What a shim's definition (a catalog entry or a custom shim) decides about it.
struct Definition {
    origin: ShimOrigin,
    runtime_type: String,
    version: String,
    binaries: Vec<ValidatedBinary>,
    oci_runtime: bool,
    privileged_without_host_devices: bool,
    config_files: Vec<ConfigFile>,
}

fn definition(
    source: Source<'_>,
    path: &FieldPath,
    pools: &[SelectedPool],
    catalog: &Catalog,
    errors: &mut Vec<FieldError>,
) -> Definition {
    match source {
        Source::Catalog {
            entry_name,
            entry,
            version,
        } => catalog_definition(entry_name, entry, version, pools, errors),
        Source::Custom(custom) => {
            custom_definition(custom, &path.child("custom"), pools, catalog, errors)
        }
    }
}

fn catalog_definition(
    entry_name: &str,
    entry: &CatalogEntry,
    version: String,
    pools: &[SelectedPool],
    errors: &mut Vec<FieldError>,
) -> Definition {
    check_catalog_architectures(entry_name, entry, pools, errors);
    let image_name = entry
        .versions
        .get(&version)
        .map(|v| v.image.clone())
        .unwrap_or_default();
    Definition {
        origin: ShimOrigin::Catalog {
            entry: entry_name.to_owned(),
        },
        runtime_type: entry.runtime_type.clone(),
        version,
        binaries: entry
            .binaries
            .iter()
            .map(|b| ValidatedBinary {
                name: b.name.clone(),
                source: ValidatedSource::CatalogImage {
                    image_name: image_name.clone(),
                    path: b.path.clone(),
                },
            })
            .collect(),
        oci_runtime: entry.oci_runtime,
        privileged_without_host_devices: entry.privileged_without_host_devices,
        config_files: entry
            .config_files
            .iter()
            .map(|f| ConfigFile {
                name: f.name.clone(),
                content: f.content.clone(),
            })
            .collect(),
    }
}

fn custom_definition(
    custom: &CustomShim,
    custom_path: &FieldPath,
    pools: &[SelectedPool],
    catalog: &Catalog,
    errors: &mut Vec<FieldError>,
) -> Definition {
    Definition {
        origin: ShimOrigin::Custom,
        runtime_type: custom.runtime_type.clone(),
        version: custom.version.clone(),
        binaries: custom_binaries(custom, custom_path, pools, &catalog.custom_shims, errors),
        oci_runtime: false,
        privileged_without_host_devices: custom.privileged_without_host_devices,
        config_files: Vec::new(),
    }
}

fn sorted_pool_names(pools: &[SelectedPool]) -> Vec<String> {
    let mut names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
    names.sort();
    names
}

/// Resolves `catalog`/`custom`/name to a definition.
fn resolve_source<'a>(
    shim: &'a Shim,
    catalog: &'a Catalog,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Option<Source<'a>> {
    let known = || catalog.names().join(", ");
    match (&shim.catalog, &shim.custom) {
        (Some(_), Some(_)) => {
            errors.push(FieldError::new(
                path,
                "sets both catalog and custom; choose one",
            ));
            None
        }
        (None, Some(_)) if catalog.custom_shims.disallowed => {
            errors.push(FieldError::new(
                &path.child("custom"),
                format!(
                    "custom shims are not allowed by the operator of this installation; use a catalog shim ({})",
                    known()
                ),
            ));
            None
        }
        (None, Some(custom)) => {
            validate_custom_header(custom, &path.child("custom"), errors);
            Some(Source::Custom(custom))
        }
        (reference, None) => {
            let (entry_name, name_path) = match reference {
                Some(r) => (r.name.as_str(), path.child("catalog").child("name")),
                None => (shim.name.as_str(), path.child("name")),
            };
            let Some((entry_name, entry)) = catalog.shims.get_key_value(entry_name) else {
                let hint = if reference.is_none() {
                    "; set custom for a shim that is not in the catalog"
                } else {
                    ""
                };
                errors.push(FieldError::invalid(
                    &name_path,
                    entry_name,
                    format!("is not in the shim catalog (catalog: {}){hint}", known()),
                ));
                return None;
            };
            let version = match reference.as_ref().and_then(|r| r.version.as_ref()) {
                None => entry.default_version.clone(),
                Some(version) if entry.versions.contains_key(version) => version.clone(),
                Some(version) => {
                    let offered: Vec<&str> = entry.versions.keys().map(String::as_str).collect();
                    errors.push(FieldError::invalid(
                        &path.child("catalog").child("version"),
                        version,
                        format!(
                            "is not a version of catalog shim {} (versions: {})",
                            quote(entry_name),
                            offered.join(", ")
                        ),
                    ));
                    return None;
                }
            };
            Some(Source::Catalog {
                entry_name,
                entry,
                version,
            })
        }
    }
}

/// Catalog entries list the architectures their images have binaries for.
fn check_catalog_architectures(
    entry_name: &str,
    entry: &CatalogEntry,
    pools: &[SelectedPool],
    errors: &mut Vec<FieldError>,
) {
    for pool in pools {
        if !entry.architectures.contains(&pool.arch) {
            let supported: Vec<&str> = entry.architectures.iter().map(|a| a.as_str()).collect();
            errors.push(FieldError::new(
                &pool.path,
                format!(
                    "worker pool {} runs {}, which catalog shim {} does not support (supported: {})",
                    quote(&pool.name),
                    pool.arch.as_str(),
                    quote(entry_name),
                    supported.join(", ")
                ),
            ));
        }
    }
}

/// The runtime options: catalog defaults overlaid with the shoot owner's, restricted to what
/// the shim accepts; or a custom shim's options as given.
fn options(
    shim: &Shim,
    source: &Source<'_>,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<String, OptionValue> {
    if shim.options.len() > MAX_OPTIONS {
        errors.push(FieldError::new(
            path,
            format!(
                "{} entries exceed the limit of {MAX_OPTIONS}",
                shim.options.len()
            ),
        ));
    }
    let mut out = BTreeMap::new();
    if let Source::Catalog { entry, .. } = source {
        for (key, spec) in &entry.options {
            if let Some(default) = &spec.default {
                out.insert(key.clone(), to_desired(default));
            }
        }
    }
    for (key, value) in &shim.options {
        let at = path.key(key);
        match source {
            Source::Catalog {
                entry_name, entry, ..
            } => {
                if let Err(error) = check_catalog_option(entry_name, entry, key, value, &at) {
                    errors.push(error);
                    continue;
                }
            }
            Source::Custom(_) => {
                if let Err(problem) = syntax::option_key(key) {
                    errors.push(FieldError::invalid(&at, key, problem));
                    continue;
                }
            }
        }
        if let types::OptionValue::String(s) = value
            && let Err(problem) = syntax::option_string(s)
        {
            errors.push(FieldError::invalid(&at, s, problem));
            continue;
        }
        out.insert(key.clone(), to_desired(value));
    }
    out
}

/// A shoot owner may set a catalog shim's option only if the entry offers it, does not fix
/// it, and the value has the option's type.
fn check_catalog_option(
    entry_name: &str,
    entry: &CatalogEntry,
    key: &str,
    value: &types::OptionValue,
    at: &FieldPath,
) -> Result<(), FieldError> {
    let Some(spec) = entry.options.get(key) else {
        let settable = entry.settable_options();
        return Err(FieldError::invalid(
            at,
            key,
            format!(
                "is not an option of catalog shim {} (settable: {})",
                quote(entry_name),
                if settable.is_empty() {
                    "none".to_owned()
                } else {
                    settable.join(", ")
                }
            ),
        ));
    };
    if spec.fixed {
        return Err(FieldError::invalid(
            at,
            key,
            format!(
                "is set by the catalog for {} and cannot be changed",
                quote(entry_name)
            ),
        ));
    }
    if !spec.kind.matches(value) {
        return Err(FieldError::new(
            at,
            format!("{} must be {}", render(value), spec.kind.noun()),
        ));
    }
    Ok(())
}

fn to_desired(value: &types::OptionValue) -> OptionValue {
    match value {
        types::OptionValue::Bool(b) => OptionValue::Bool(*b),
        types::OptionValue::Int(i) => OptionValue::Int(*i),
        types::OptionValue::String(s) => OptionValue::String(s.clone()),
    }
}

/// An option value as the shoot owner wrote it.
fn render(value: &types::OptionValue) -> String {
    match value {
        types::OptionValue::Bool(b) => b.to_string(),
        types::OptionValue::Int(i) => i.to_string(),
        types::OptionValue::String(s) => quote(s),
    }
}

fn validate_rollout(
    rollout: Option<&types::Rollout>,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> ValidatedRollout {
    let rollout = rollout.cloned().unwrap_or_default();
    let max_concurrent_restarts = rollout
        .max_concurrent_restarts
        .unwrap_or(ValidatedRollout::SAFE_DEFAULT.max_concurrent_restarts);
    if !(1..=MAX_CONCURRENT_RESTARTS).contains(&max_concurrent_restarts) {
        errors.push(FieldError::new(
            &path.child("maxConcurrentRestarts"),
            format!("{max_concurrent_restarts} must be between 1 and {MAX_CONCURRENT_RESTARTS}"),
        ));
    }
    let max_unavailable = rollout
        .max_unavailable
        .unwrap_or(ValidatedRollout::SAFE_DEFAULT.max_unavailable);
    let at = path.child("maxUnavailable");
    match &max_unavailable {
        IntOrString::Int(n) if *n < 1 => {
            errors.push(FieldError::new(&at, format!("{n} must be at least 1")))
        }
        IntOrString::Int(_) => {}
        IntOrString::String(s) => {
            let percent = s
                .strip_suffix('%')
                .filter(|digits| !digits.is_empty() && digits.len() <= 3)
                .and_then(|digits| digits.parse::<u32>().ok());
            if !percent.is_some_and(|p| (1..=100).contains(&p)) {
                errors.push(FieldError::invalid(
                    &at,
                    s,
                    "must be a count of at least 1 or a percentage from 1% to 100%",
                ));
            }
        }
    }
    ValidatedRollout {
        max_concurrent_restarts,
        max_unavailable,
    }
}
