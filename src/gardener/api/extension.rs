//! `extensions.gardener.cloud/v1alpha1` `Extension`.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::{Condition, LastError, LastOperation};

/// `Extension.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "extensions.gardener.cloud",
    version = "v1alpha1",
    kind = "Extension",
    plural = "extensions",
    namespaced,
    status = "ExtensionStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", from = "ExtensionSpecWire")]
pub struct ExtensionSpec {
    /// The extension type (`containerd-shim`).
    #[serde(rename = "type")]
    pub type_: String,
    /// `shoot`, `seed` or `garden`; unset means `shoot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The shoot owner's configuration, copied verbatim from `Shoot.spec.extensions[]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<serde_json::Value>,
    /// Why `providerConfig` could not be turned into a value (then `provider_config` is
    /// `None`): it is nested deeper than serde_json's recursion limit (128), or its text is
    /// longer than [`MAX_PROVIDER_CONFIG_BYTES`]. The API server accepts up to 10 000 levels
    /// and megabytes; without this, one such object would make every list and watch of
    /// Extensions fail to decode, and with them the whole controller, or hold megabytes of
    /// parsed value per Extension in the cache.
    #[serde(skip)]
    pub provider_config_error: Option<String>,
}

/// The longest `providerConfig` text the controller parses into a value; a longer one is kept
/// only as [`ExtensionSpec::provider_config_error`]. Generous for any extension's
/// configuration (the containerd-shim one takes at most 64 KiB), small enough that one
/// Extension's parsed configuration cannot cost the cache megabytes.
pub const MAX_PROVIDER_CONFIG_BYTES: usize = 256 * 1024;

/// `spec` as it comes from the API server: `providerConfig` is first taken as raw text, which
/// serde_json skips over without a recursion limit, and only then parsed on its own.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExtensionSpecWire {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    provider_config: Option<Box<serde_json::value::RawValue>>,
}

impl From<ExtensionSpecWire> for ExtensionSpec {
    fn from(wire: ExtensionSpecWire) -> Self {
        let (provider_config, provider_config_error) = match wire.provider_config {
            None => (None, None),
            Some(raw) if raw.get().len() > MAX_PROVIDER_CONFIG_BYTES => (
                None,
                Some(format!(
                    "its text is {} bytes long, more than the limit of {MAX_PROVIDER_CONFIG_BYTES}",
                    raw.get().len()
                )),
            ),
            Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
                Ok(serde_json::Value::Null) => (None, None),
                Ok(value) => (Some(value), None),
                Err(e) => (None, Some(e.to_string())),
            },
        };
        ExtensionSpec {
            type_: wire.type_,
            class: wire.class,
            provider_config,
            provider_config_error,
        }
    }
}

/// `Extension.status` (the `DefaultStatus` of every extension resource).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Opaque state persisted into the ShootState for control-plane migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<serde_json::Value>,
}

/// The class of an extension with the default applied (`GetExtensionClassOrDefault`).
pub const DEFAULT_CLASS: &str = "shoot";

impl Extension {
    /// `spec.class`, with nil meaning `shoot`.
    pub fn class_or_default(&self) -> &str {
        self.spec.class.as_deref().unwrap_or(DEFAULT_CLASS)
    }
}

/// The Extension most controller tests start from: no providerConfig, no status.
#[cfg(test)]
pub(crate) fn test_extension(
    namespace: &str,
    name: &str,
    type_: &str,
    class: Option<&str>,
) -> Extension {
    let mut extension = Extension::new(
        name,
        ExtensionSpec {
            type_: type_.into(),
            class: class.map(String::from),
            ..ExtensionSpec::default()
        },
    );
    extension.metadata.namespace = Some(namespace.into());
    extension
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    fn extension_json(provider_config: &str) -> String {
        format!(
            r#"{{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Extension","metadata":{{"name":"containerd-shim","namespace":"shoot--p--s"}},"spec":{{"type":"containerd-shim","providerConfig":{provider_config}}},"status":{{"observedGeneration":1}}}}"#
        )
    }

    #[test]
    fn a_provider_config_deeper_than_the_recursion_limit_does_not_break_decoding() {
        // Well past serde_json's 128 levels, well within the API server's 10 000.
        let deep = format!(r#"{{"shims":[{{"options":{{"A":{}}}}}]}}"#, nested(300));
        let one = extension_json(&deep);
        let ext: Extension = serde_json::from_str(&one).expect("a single object decodes");
        assert_eq!(ext.spec.type_, "containerd-shim");
        assert_eq!(ext.spec.provider_config, None);
        let error = ext.spec.provider_config_error.expect("the reason is kept");
        assert!(error.contains("recursion limit"), "{error}");
        assert_eq!(ext.status.and_then(|s| s.observed_generation), Some(1));

        // What a list and a watch deliver: the other objects are not lost with it.
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{}},"items":[{one},{}]}}"#,
            extension_json(r#"{"a":1}"#)
        );
        let list: kube::core::ObjectList<Extension> =
            serde_json::from_str(&list).expect("the list decodes");
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[1].spec.provider_config,
            Some(serde_json::json!({"a": 1}))
        );
        let event = format!(r#"{{"type":"MODIFIED","object":{one}}}"#);
        let event: kube::core::WatchEvent<Extension> =
            serde_json::from_str(&event).expect("the watch event decodes");
        assert!(
            matches!(event, kube::core::WatchEvent::Modified(e) if e.spec.provider_config_error.is_some())
        );
    }

    #[test]
    fn a_provider_config_longer_than_the_limit_is_not_parsed() {
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_PROVIDER_CONFIG_BYTES));
        let ext: Extension = serde_json::from_str(&extension_json(&long)).expect("decodes");
        assert_eq!(ext.spec.provider_config, None);
        let error = ext.spec.provider_config_error.expect("the reason is kept");
        assert_eq!(
            error,
            format!(
                "its text is {} bytes long, more than the limit of {MAX_PROVIDER_CONFIG_BYTES}",
                long.len()
            )
        );
        let fits = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_PROVIDER_CONFIG_BYTES - 8));
        let ext: Extension = serde_json::from_str(&extension_json(&fits)).expect("decodes");
        assert!(ext.spec.provider_config.is_some());
    }

    #[test]
    fn ordinary_provider_configs_decode_as_before() {
        let ext: Extension =
            serde_json::from_str(&extension_json(&format!(r#"{{"a":{}}}"#, nested(100))))
                .expect("decodes");
        assert!(ext.spec.provider_config.is_some());
        assert_eq!(ext.spec.provider_config_error, None);
        let ext: Extension = serde_json::from_str(&extension_json("null")).expect("decodes");
        assert_eq!(ext.spec.provider_config, None);
        assert_eq!(ext.spec.provider_config_error, None);
        let text = r#"{"apiVersion":"extensions.gardener.cloud/v1alpha1","kind":"Extension","metadata":{"name":"x"},"spec":{"type":"t","class":"seed"}}"#;
        let ext: Extension = serde_json::from_str(text).expect("decodes");
        assert_eq!(ext.spec.class.as_deref(), Some("seed"));
        assert_eq!(ext.spec.provider_config, None);
        // Serialising never writes the decoding error.
        let back = serde_json::to_value(&ext).expect("serialises");
        assert_eq!(
            back["spec"],
            serde_json::json!({"type": "t", "class": "seed"})
        );
    }
}
