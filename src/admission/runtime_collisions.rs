//! The one cross-check the seed controller cannot make: its Shoot view has no
//! `cri.containerRuntimes`, the runtimes other extensions (gVisor, Kata) install on a pool. A
//! shim whose containerd handler or RuntimeClass is one of theirs would overwrite their runtime
//! section in containerd's configuration, or their RuntimeClass.

use std::collections::BTreeMap;

use super::shoot_view::PoolRuntimes;
use crate::shim::config::error::{FieldError, FieldPath, quote};
use crate::shim::config::{ContainerdShimConfig, ValidatedConfig};

/// Runtime extensions whose containerd handler differs from their `containerRuntimes` type:
/// gardener-extension-runtime-gvisor registers the handler `runsc` for the type `gvisor`.
const KNOWN_HANDLERS: &[(&str, &[&str])] = &[("gvisor", &["runsc"])];

/// The names a runtime of this `containerRuntimes` type takes in containerd and as a
/// RuntimeClass: the type itself and any known handler of it.
fn taken_names(runtime_type: &str) -> Vec<&str> {
    let mut names = vec![runtime_type];
    for (known, handlers) in KNOWN_HANDLERS {
        if *known == runtime_type {
            names.extend(handlers.iter().copied());
        }
    }
    names
}

/// Every shim of `validated` whose handler or RuntimeClass name is taken by a
/// `cri.containerRuntimes[]` entry of one of its pools. Paths are providerConfig paths.
pub fn collisions(
    config: &ContainerdShimConfig,
    validated: &ValidatedConfig,
    pools: &[PoolRuntimes],
) -> Vec<FieldError> {
    let index_of: BTreeMap<&str, usize> = config
        .shims
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut errors = Vec::new();
    for shim in validated.shims() {
        let Some(&i) = index_of.get(shim.name.as_str()) else {
            continue;
        };
        let at = FieldPath::root().child("shims").index(i);
        let own = config.shims[i].runtime_class.as_ref();
        for (k, pool) in pools.iter().enumerate() {
            if !shim.worker_pools.contains(&pool.name) {
                continue;
            }
            for (m, runtime_type) in pool.runtime_types.iter().enumerate() {
                let taken = taken_names(runtime_type);
                let where_ = format!(
                    "spec.provider.workers[{k}].cri.containerRuntimes[{m}].type {} of worker pool {}",
                    quote(runtime_type),
                    quote(&pool.name)
                );
                let fix = format!(
                    "leave pool {} out of workerPools, or drop that runtime from the pool",
                    quote(&pool.name)
                );
                if taken.contains(&shim.handler.as_str()) {
                    let (path, what) = match own.and_then(|rc| rc.handler.as_ref()) {
                        Some(_) => (at.child("runtimeClass").child("handler"), ""),
                        None => (at.clone(), "is the default handler of this shim and "),
                    };
                    errors.push(FieldError::invalid(
                        &path,
                        &shim.handler,
                        format!(
                            "{what}collides with the containerd runtime of {where_}; set another runtimeClass.handler, or {fix}"
                        ),
                    ));
                }
                if taken.contains(&shim.runtime_class_name.as_str()) {
                    let (path, what) = match own.and_then(|rc| rc.name.as_ref()) {
                        Some(_) => (at.child("runtimeClass").child("name"), ""),
                        None => (at.clone(), "is the default RuntimeClass of this shim and "),
                    };
                    errors.push(FieldError::invalid(
                        &path,
                        &shim.runtime_class_name,
                        format!(
                            "{what}collides with the RuntimeClass of {where_}; set another runtimeClass.name, or {fix}"
                        ),
                    ));
                }
            }
        }
    }
    errors
}
