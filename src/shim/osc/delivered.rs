//! What this extension delivered through an OSC, recorded on the OSC.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Annotation on the OSC holding [`Delivered`] as JSON. It travels with the OSC, so the next
/// mutation knows our entries without any other store, and gardenlet's own writes of the OSC
/// (which replace spec, not our annotation) do not lose it.
pub const DELIVERED_ANNOTATION: &str = "containerd-shim.extensions.gardener.cloud/osc-delivered";

/// The entries of an OSC that are ours. Everything not named here belongs to someone else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delivered {
    /// Handlers whose runtime table we write (`op: add`).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub handlers: BTreeSet<String>,
    /// Handlers we delivered before and now delete (`op: remove`). Kept: the node agent
    /// applies an OSC to each node with a delay and a node that comes back from a long
    /// absence must still see the removal. Pruning them is the caller's decision.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub removed: BTreeSet<String>,
    /// Files of the wanted versions.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub files: BTreeSet<String>,
    /// Files of replaced versions, kept for one generation (see the module docs).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retained: BTreeSet<String>,
}

impl Delivered {
    pub fn is_empty(&self) -> bool {
        self == &Delivered::default()
    }

    /// Every plugin entry path handler we own.
    pub fn owned_handlers(&self) -> impl Iterator<Item = &String> {
        self.handlers.iter().chain(&self.removed)
    }

    /// Every file path we own.
    pub fn owned_files(&self) -> impl Iterator<Item = &String> {
        self.files.iter().chain(&self.retained)
    }

    pub fn from_annotation(value: &str) -> Result<Delivered, String> {
        serde_json::from_str(value).map_err(|e| e.to_string())
    }

    pub fn to_annotation(&self) -> String {
        // Sets of strings: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
