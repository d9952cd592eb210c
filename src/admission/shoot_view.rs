//! The Shoot as the admission reads it: the controller's own typed view (worker pools, the
//! Kubernetes version) plus the two things only the garden has at hand, `spec.extensions[]` and
//! the pools' `cri.containerRuntimes[]`. Unknown fields are ignored, so a newer Gardener's
//! Shoot decodes as well.

use serde::Deserialize;

use crate::gardener::api::cluster::Shoot;
use crate::gardener::api::extension::ExtensionSpec;
use crate::shim::identity::EXTENSION_TYPE;

/// A Shoot decoded for the admission checks.
#[derive(Clone, Debug, PartialEq)]
pub struct ShootView {
    /// What the controller reads of the Shoot (it gets the same object through the Cluster).
    pub shoot: Shoot,
    /// Every `spec.extensions[]` entry, in order: the index is the one of the field path.
    pub extensions: Vec<ShootExtension>,
    /// `spec.provider.workers[]`, in order, with the runtimes other extensions install.
    pub pools: Vec<PoolRuntimes>,
}

/// One `spec.extensions[]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ShootExtension {
    /// `type`, `providerConfig` decoded as the controller decodes its Extension's spec
    /// (gardenlet copies both verbatim into the Extension resource).
    pub spec: ExtensionSpec,
    /// `disabled: true`: gardenlet creates no Extension for it.
    pub disabled: bool,
}

impl ShootExtension {
    /// Whether the seed controller will get this entry's providerConfig.
    pub fn is_ours(&self) -> bool {
        self.spec.type_ == EXTENSION_TYPE && !self.disabled
    }
}

/// A worker pool's name and the `cri.containerRuntimes[].type` values other extensions
/// (gVisor, Kata) install on its nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolRuntimes {
    pub name: String,
    pub runtime_types: Vec<String>,
}

impl ShootView {
    /// Decodes a Shoot from its JSON text (as the API server sends it in an AdmissionReview).
    pub fn from_json(text: &str) -> Result<ShootView, serde_json::Error> {
        let shoot: Shoot = serde_json::from_str(text)?;
        let extras: Extras = serde_json::from_str(text)?;
        // `ExtensionSpec` takes `providerConfig` as raw text first (see its wire form), which
        // cannot be combined with the `disabled` flag in one struct: decoded on their own.
        let specs: Specs = serde_json::from_str(text)?;
        let extensions = specs
            .spec
            .extensions
            .into_iter()
            .zip(extras.spec.extensions)
            .map(|(spec, flags)| ShootExtension {
                spec,
                disabled: flags.disabled.unwrap_or(false),
            })
            .collect();
        let pools = extras
            .spec
            .provider
            .workers
            .into_iter()
            .map(|w| PoolRuntimes {
                name: w.name,
                runtime_types: w
                    .cri
                    .map(|c| c.container_runtimes.into_iter().map(|r| r.type_).collect())
                    .unwrap_or_default(),
            })
            .collect();
        Ok(ShootView {
            shoot,
            extensions,
            pools,
        })
    }

    /// The entries the seed controller will validate, with their index in `spec.extensions`.
    pub fn ours(&self) -> impl Iterator<Item = (usize, &ShootExtension)> {
        self.extensions
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_ours())
    }
}

#[derive(Deserialize)]
struct Specs {
    #[serde(default)]
    spec: SpecsSpec,
}

#[derive(Default, Deserialize)]
struct SpecsSpec {
    #[serde(default)]
    extensions: Vec<ExtensionSpec>,
}

#[derive(Deserialize)]
struct Extras {
    #[serde(default)]
    spec: ExtrasSpec,
}

#[derive(Default, Deserialize)]
struct ExtrasSpec {
    #[serde(default)]
    extensions: Vec<ExtensionFlags>,
    #[serde(default)]
    provider: ExtrasProvider,
}

#[derive(Deserialize)]
struct ExtensionFlags {
    #[serde(default)]
    disabled: Option<bool>,
}

#[derive(Default, Deserialize)]
struct ExtrasProvider {
    #[serde(default)]
    workers: Vec<ExtrasWorker>,
}

#[derive(Deserialize)]
struct ExtrasWorker {
    #[serde(default)]
    name: String,
    #[serde(default)]
    cri: Option<ExtrasCri>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExtrasCri {
    #[serde(default)]
    container_runtimes: Vec<ContainerRuntime>,
}

#[derive(Deserialize)]
struct ContainerRuntime {
    #[serde(rename = "type")]
    type_: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_extensions_in_order_and_the_pools_runtimes() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let text = format!(
            r#"{{"apiVersion":"core.gardener.cloud/v1beta1","kind":"Shoot","metadata":{{"name":"s","namespace":"garden-p"}},
            "spec":{{"extensions":[{{"type":"other","providerConfig":{{"x":{deep}}}}},
                                   {{"type":"containerd-shim","providerConfig":{{"apiVersion":"a","kind":"k"}}}},
                                   {{"type":"containerd-shim","disabled":true}}],
                     "kubernetes":{{"version":"1.33.2"}},
                     "provider":{{"type":"local","workers":[
                        {{"name":"a","machine":{{"type":"m","architecture":"arm64"}}}},
                        {{"name":"b","cri":{{"name":"containerd","containerRuntimes":[{{"type":"gvisor","providerConfig":{{}}}}]}}}}]}},
                     "unknown":{{"y":1}}}}}}"#
        );
        let view = ShootView::from_json(&text).unwrap();
        assert_eq!(view.extensions.len(), 3);
        assert_eq!(view.extensions[0].spec.type_, "other");
        let ours: Vec<usize> = view.ours().map(|(i, _)| i).collect();
        assert_eq!(ours, [1], "the disabled entry is not ours to check");
        assert_eq!(
            view.extensions[1].spec.provider_config,
            Some(serde_json::json!({"apiVersion": "a", "kind": "k"}))
        );
        assert_eq!(
            view.pools,
            [
                PoolRuntimes {
                    name: "a".into(),
                    runtime_types: vec![]
                },
                PoolRuntimes {
                    name: "b".into(),
                    runtime_types: vec!["gvisor".into()]
                },
            ]
        );
        assert_eq!(
            view.shoot.spec.provider.workers[0]
                .machine
                .architecture
                .as_deref(),
            Some("arm64")
        );
    }

    #[test]
    fn a_shoot_without_spec_decodes_empty_and_garbage_is_an_error() {
        let view = ShootView::from_json(r#"{"metadata":{"name":"s"}}"#).unwrap();
        assert!(view.extensions.is_empty() && view.pools.is_empty());
        assert!(ShootView::from_json(r#"{"spec":{"extensions":"no"}}"#).is_err());
    }
}
