//! The one error type of the containerd configuration engine.
//!
//! Every message names the file (host path), the TOML key path and the offending value where
//! there is one, so an operator can find the problem on the node without a debugger.

use std::path::PathBuf;

use super::key_path::KeyPath;

/// Why a configuration plan or a validation could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },

    #[error(
        "{path}: `version = {value}` is not a containerd config version this installer can edit \
         (absent, 1, 2, 3 or 4)"
    )]
    UnsupportedVersion { path: PathBuf, value: String },

    #[error(
        "{config}: with our runtimes, containerd's effective configuration would also change \
         what is not ours ({}); refusing it: nothing of it is applied",
        .changes.join("; ")
    )]
    ForeignSettingsChanged {
        config: PathBuf,
        changes: Vec<String>,
    },

    #[error(
        "{path}: `disabled_plugins` disables containerd's CRI plugin ({plugin:?}), so the kubelet \
         cannot use containerd here and no runtime handler can be served; refusing to change \
         anything on this node"
    )]
    CriDisabled { path: PathBuf, plugin: String },

    #[error("containerd {version} is not supported (supported majors: 1 and 2)")]
    UnsupportedContainerd { version: String },

    #[error(
        "cannot find a containerd version in {output:?} (expected `containerd --version` output)"
    )]
    ContainerdVersionUnparsable { output: String },

    #[error("{path}: `{key}` is {found}, expected {expected}")]
    UnexpectedType {
        path: PathBuf,
        key: KeyPath,
        found: &'static str,
        expected: &'static str,
    },

    #[error(
        "{path}: runtime handler table `{key}` already exists and was not written by this installer \
         (runtime_type = {runtime_type}, runtime_path = {runtime_path}); refusing to overwrite a \
         foreign runtime of the same name"
    )]
    ForeignRuntime {
        path: PathBuf,
        key: KeyPath,
        runtime_type: String,
        runtime_path: String,
    },

    #[error(
        "{path} already exists and was not created by this installer (it holds {what}); refusing \
         to overwrite it"
    )]
    ForeignFile { path: PathBuf, what: String },

    #[error(
        "{path}: cannot edit this template safely: line {line} has a Go template action outside \
         the leading header lines: {text:?}"
    )]
    UnsafeTemplate {
        path: PathBuf,
        line: usize,
        text: String,
    },

    #[error(
        "{path}: value {value:?} of `{key}` contains `{{{{`, which the distribution's Go template \
         engine would interpret"
    )]
    UnsafeTemplateValue {
        path: PathBuf,
        key: KeyPath,
        value: String,
    },

    #[error(
        "{path}: option key {key:?} of runtime {handler} contains `{{{{`, which the \
         distribution's Go template engine would interpret"
    )]
    UnsafeTemplateKey {
        path: PathBuf,
        handler: String,
        key: String,
    },

    #[error(
        "cannot tell which config version template {template} renders: it declares no `version` \
         and the rendered config {rendered} does not exist yet (start the distribution's agent once)"
    )]
    TemplateVersionUnknown {
        template: PathBuf,
        rendered: PathBuf,
    },

    #[error("runtime handler {handler:?} is invalid: {reason}")]
    InvalidHandler {
        handler: String,
        reason: &'static str,
    },

    #[error("runtime {handler}: {field} {value:?} is invalid: {reason}")]
    InvalidRuntime {
        handler: String,
        field: &'static str,
        value: String,
        reason: &'static str,
    },

    #[error("runtime handler {handler:?} is listed more than once")]
    DuplicateHandler { handler: String },

    #[error("host path {path} is not valid UTF-8")]
    NonUtf8Path { path: PathBuf },

    #[error("`containerd --config {config} config dump` failed (exit code {code}): {stderr}")]
    DumpFailed {
        config: PathBuf,
        code: String,
        stderr: String,
    },

    #[error(
        "containerd ignored unknown key `{key}` of runtime {handler} (file {file}); containerd \
         would start without it"
    )]
    UnknownKey {
        file: String,
        key: String,
        handler: String,
    },

    #[error("`containerd --config {config} config dump` did not print TOML: {message}")]
    DumpNotToml { config: PathBuf, message: String },

    #[error(
        "`containerd --config {config} config dump` has no runtime {handler} at `{key}`: the \
         merged config does not contain it (wrong plugin path for the config version, or an \
         import replaced the table)"
    )]
    RuntimeMissing {
        config: PathBuf,
        handler: String,
        key: KeyPath,
    },

    #[error(
        "`containerd --config {config} config dump` shows `{key}.{field} = {found}`, expected \
         {expected:?}: another file overrides this runtime"
    )]
    RuntimeMismatch {
        config: PathBuf,
        key: KeyPath,
        field: &'static str,
        found: String,
        expected: String,
    },

    #[error(
        "`containerd --config {config} config dump` still shows our runtime {handler} at `{key}` \
         after its removal"
    )]
    RuntimeStillPresent {
        config: PathBuf,
        handler: String,
        key: KeyPath,
    },
}
