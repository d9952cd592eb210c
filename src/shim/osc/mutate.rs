//! The mutation of one OSC.

use std::collections::{BTreeMap, BTreeSet};

use crate::desired_shims::{DesiredShims, Mode};
use crate::gardener::api::OperatingSystemConfig;
use crate::gardener::api::operating_system_config::{CRI_CONTAINERD, File, POOL_LABEL};

use super::OscError;
use super::delivered::{DELIVERED_ANNOTATION, Delivered};
use super::files::shim_files;
use super::layout::VersionDir;
use super::plugins::{add_entry, handler_of, remove_entry};

/// The OSC with the shims of its worker pool delivered: our plugin entries and files replaced
/// by the wanted ones, `op: remove` for handlers delivered before and no longer wanted, and
/// [`DELIVERED_ANNOTATION`] updated. Entries not recorded as ours are kept as they are, in
/// their order; ours follow them. Applying it to its own result changes nothing.
///
/// `desired` is the whole Extension's set; the OSC's `worker.gardener.cloud/pool` label picks
/// the pool's shims as the installer DaemonSet's nodes do. [`Mode::Uninstall`] wants none.
pub fn mutate(
    osc: &OperatingSystemConfig,
    desired: &DesiredShims,
) -> Result<OperatingSystemConfig, OscError> {
    let name = format!(
        "{}/{}",
        osc.metadata.namespace.as_deref().unwrap_or_default(),
        osc.metadata.name.as_deref().unwrap_or_default()
    );
    let pool = osc
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(POOL_LABEL))
        .ok_or_else(|| OscError::NoPool { osc: name.clone() })?;
    let previous = match osc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELIVERED_ANNOTATION))
    {
        Some(text) => Delivered::from_annotation(text).map_err(|reason| OscError::Annotation {
            osc: name.clone(),
            reason,
        })?,
        None => Delivered::default(),
    };
    let mut wanted = match desired.mode {
        Mode::Install => desired.for_pool(pool).shims,
        Mode::Uninstall => Vec::new(),
    };
    if wanted.is_empty() && previous.is_empty() {
        return Ok(osc.clone());
    }
    wanted.sort_by(|a, b| a.handler.cmp(&b.handler));

    let mut add_entries = Vec::new();
    let mut wanted_files = Vec::new();
    for shim in &wanted {
        if !shim.node_selector.is_empty() {
            return Err(OscError::NodeSelector {
                shim: shim.name.clone(),
            });
        }
        let dir = VersionDir::of(shim);
        add_entries.push(add_entry(shim, &dir));
        wanted_files.extend(shim_files(shim, &dir)?);
    }
    let wanted_handlers: BTreeSet<String> = wanted.iter().map(|s| s.handler.clone()).collect();
    let wanted_paths: BTreeSet<String> = wanted_files.iter().map(|f| f.path.clone()).collect();
    let owned_handlers: BTreeSet<&String> = previous.owned_handlers().collect();
    let owned_files: BTreeSet<&String> = previous.owned_files().collect();

    let mut mutated = osc.clone();
    let cri = match mutated.spec.cri_config.as_mut() {
        Some(cri) if cri.name == CRI_CONTAINERD => cri,
        other => {
            return Err(OscError::NotContainerd {
                osc: name,
                name: other.map(|c| c.name.clone()).unwrap_or_default(),
            });
        }
    };
    let containerd = cri.containerd.get_or_insert_with(Default::default);

    for entry in &containerd.plugins {
        if let Some(handler) = handler_of(entry)
            && wanted_handlers.contains(handler)
            && !owned_handlers.contains(&handler.to_string())
        {
            return Err(OscError::ForeignPlugin {
                osc: name,
                handler: handler.to_string(),
            });
        }
    }
    for file in &mutated.spec.files {
        if wanted_paths.contains(&file.path) && !owned_files.contains(&file.path) {
            return Err(OscError::ForeignFile {
                osc: name,
                path: file.path.clone(),
            });
        }
    }

    let removed: BTreeSet<String> = previous
        .owned_handlers()
        .filter(|h| !wanted_handlers.contains(*h))
        .cloned()
        .collect();
    let retain_candidates: BTreeSet<String> = if previous.files == wanted_paths {
        &previous.retained - &wanted_paths
    } else {
        &previous.files - &wanted_paths
    };

    containerd
        .plugins
        .retain(|entry| handler_of(entry).is_none_or(|h| !owned_handlers.contains(&h.to_string())));
    containerd.plugins.extend(add_entries);
    containerd
        .plugins
        .extend(removed.iter().map(|handler| remove_entry(handler)));

    let mut ours: BTreeMap<String, File> = BTreeMap::new();
    mutated.spec.files.retain(|file| {
        if owned_files.contains(&file.path) {
            ours.insert(file.path.clone(), file.clone());
            false
        } else {
            true
        }
    });
    let retained_files: Vec<File> = retain_candidates
        .iter()
        .filter_map(|path| ours.remove(path))
        .collect();
    let delivered = Delivered {
        handlers: wanted_handlers,
        removed,
        files: wanted_paths,
        retained: retained_files.iter().map(|f| f.path.clone()).collect(),
    };
    mutated.spec.files.extend(wanted_files);
    mutated.spec.files.extend(retained_files);

    let annotations = mutated
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if delivered.is_empty() {
        annotations.remove(DELIVERED_ANNOTATION);
    } else {
        annotations.insert(DELIVERED_ANNOTATION.to_string(), delivered.to_annotation());
    }
    Ok(mutated)
}
