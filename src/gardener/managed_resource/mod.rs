//! Delivering objects through gardener-resource-manager (GRM), the way Gardener's
//! `pkg/utils/managedresources` does it for Go extensions.
//!
//! - [`secret`] (pure) packs typed objects into the Brotli-compressed data of an immutable,
//!   uniquely named secret, and decodes such data again.
//! - [`desired`] (pure) is the ManagedResource an extension wants and how it merges into the
//!   existing one.
//! - [`apply`] talks to the API server: create or update, delete, wait.
//! - [`catch_up`] (pure) says whether GRM has recorded the current generation, and what a new
//!   bundle would remove: a removal must wait for that record.
//! - [`leftovers`] finds objects in the target cluster that name a ManagedResource as their
//!   origin but that its bundle does not hold, and turns them back into bundle objects.
//!
//! A caller renders its objects, packs them once and hands the data over:
//!
//! ```ignore
//! let data = secret::pack([Manifest::from_resource(&config_map)?, Manifest::from_resource(&daemon_set)?])?;
//! let wrote = apply::create_or_update_for_shoot(&client, namespace, "extension-x", "extension-x", false, &data).await?;
//! ```

pub mod apply;
pub mod catch_up;
pub mod desired;
pub mod leftovers;
pub mod packed;
pub mod secret;
pub mod wait;

use std::time::Duration;

pub use apply::{
    ShootBundle, create_or_update_for_seed, create_or_update_for_shoot, create_shoot_bundle,
    delete, referenced_objects, set_keep_objects, update_shoot_bundle,
};
pub use desired::DesiredManagedResource;
pub use packed::PackedBundles;
pub use secret::{Manifest, Scope, SecretData, decode, decode_secret, pack};
pub use wait::{Awaited, DEFAULT_POLL_INTERVAL, Wait, wait_until, wait_until_deleted};

use super::api::ErrorCode;
use super::error_codes::CodedError;

/// Everything that can go wrong while packing, applying, deleting or waiting for a
/// ManagedResource. Messages name the object, secret or ManagedResource concerned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{kind} {name:?} cannot be put into a ManagedResource: {problem}")]
    InvalidObject {
        kind: String,
        name: String,
        problem: String,
    },

    #[error(
        "{kind} {name} is namespaced but names no namespace; gardener-resource-manager would put it into `default`"
    )]
    MissingNamespace { kind: String, name: String },

    #[error("{kind} {name} is cluster-scoped but names the namespace {namespace}")]
    UnexpectedNamespace {
        kind: String,
        name: String,
        namespace: String,
    },

    #[error("two objects have the same kind, namespace and name ({file_name})")]
    DuplicateObject { file_name: String },

    #[error("cannot convert {kind} {name} to JSON: {source}")]
    ToJson {
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("cannot write {file_name} as YAML: {source}")]
    ToYaml {
        file_name: String,
        #[source]
        source: serde_saphyr::SerializeError,
    },

    #[error(
        "the YAML of {file_name} has a line starting with `---` or `...`, which would split the document"
    )]
    UnsafeDocument { file_name: String },

    #[error("cannot compress the ManagedResource data: {0}")]
    Compress(#[source] std::io::Error),

    #[error("cannot decompress the ManagedResource data under key {key}: {source}")]
    Decompress {
        key: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot decode document {document} of the ManagedResource data under key {key}: {problem}"
    )]
    Decode {
        key: String,
        document: usize,
        problem: String,
    },

    #[error(
        "ManagedResource {namespace}/{name}: origin {origin:?} is not allowed (it must name the extension; `gardener` is gardenlet's)"
    )]
    InvalidOrigin {
        namespace: String,
        name: String,
        origin: String,
    },

    #[error("cannot {action} {kind} {namespace}/{name}: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        // Boxed: kube's error is large, and every Result of this layer carries this enum.
        #[source]
        source: Box<kube::Error>,
    },

    #[error(
        "cannot list {kind} objects in the target cluster to look for objects left behind by ManagedResource {namespace}/{name}: {source}"
    )]
    ListLeftovers {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error(
        "secret {namespace}/{name} already exists with different data; it is immutable and its name should be a hash of its data"
    )]
    SecretDataMismatch { namespace: String, name: String },

    #[error(
        "ManagedResource {namespace}/{name} changed under us {attempts} times in a row; giving up this attempt"
    )]
    Conflict {
        namespace: String,
        name: String,
        attempts: usize,
    },

    #[error("ManagedResource {namespace}/{name} is not healthy after {timeout:?}: {last}")]
    NotHealthy {
        namespace: String,
        name: String,
        timeout: Duration,
        last: String,
    },

    #[error(
        "error while waiting for all resources of ManagedResource {namespace}/{name} to be deleted: still there after {timeout:?}{}",
        detail(.message)
    )]
    NotDeleted {
        namespace: String,
        name: String,
        timeout: Duration,
        /// The `ResourcesApplied` message while GRM reports `DeletionFailed`/`DeletionPending`.
        message: Option<String>,
        configuration_problem: bool,
    },
}

fn detail(message: &Option<String>) -> String {
    message
        .as_ref()
        .map(|m| format!(":\n{m}"))
        .unwrap_or_default()
}

impl Error {
    fn api(
        action: &'static str,
        kind: &'static str,
        namespace: &str,
        name: &str,
        source: kube::Error,
    ) -> Error {
        Error::Api {
            action,
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(source),
        }
    }
}

impl CodedError for Error {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            Error::NotDeleted {
                configuration_problem: true,
                ..
            } => vec![ErrorCode::ConfigurationProblem],
            _ => vec![],
        }
    }
}

/// Gardener's `(?i)error during apply of object .* is invalid:` on one line: the API server
/// refused an object as invalid, which retrying will not fix.
pub fn is_configuration_problem(message: &str) -> bool {
    const PREFIX: &str = "error during apply of object ";
    const SUFFIX: &str = " is invalid:";
    message.lines().any(|line| {
        let line = line.to_lowercase();
        line.match_indices(PREFIX)
            .any(|(at, _)| line[at + PREFIX.len()..].contains(SUFFIX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_problems_are_recognised() {
        // As gardener-resource-manager v1.136 reports an invalid ConfigMap.
        assert!(is_configuration_problem(
            r#"error during apply of object "v1/ConfigMap/ns/bad": ConfigMap "bad" is invalid: data[bad key!]: Invalid value: "bad key!""#
        ));
        assert!(is_configuration_problem(
            "ERROR DURING APPLY OF OBJECT x IS INVALID: y"
        ));
        assert!(is_configuration_problem(
            "first line\nerror during apply of object  is invalid:"
        ));
        assert!(!is_configuration_problem(
            "error during apply of object x\n is invalid: y"
        ));
        assert!(!is_configuration_problem(
            "error during apply of object x is forbidden: y"
        ));
        assert!(!is_configuration_problem("object x is invalid:"));
        assert!(!is_configuration_problem(""));
    }

    #[test]
    fn only_an_invalid_object_during_deletion_is_a_configuration_problem() {
        let err = Error::NotDeleted {
            namespace: "ns".into(),
            name: "mr".into(),
            timeout: Duration::from_secs(1),
            message: Some("error during apply of object x is invalid: y".into()),
            configuration_problem: true,
        };
        assert_eq!(err.codes(), vec![ErrorCode::ConfigurationProblem]);
        assert!(err.to_string().contains("ns/mr"), "{err}");
        assert!(
            err.to_string()
                .ends_with(":\nerror during apply of object x is invalid: y"),
            "{err}"
        );
        let plain = Error::NotHealthy {
            namespace: "ns".into(),
            name: "mr".into(),
            timeout: Duration::from_secs(1),
            last: "x".into(),
        };
        assert!(plain.codes().is_empty());
    }
}
