//! The one error type of the containerd configuration engine.
//!
//! Every message names the file (host path), the TOML key path and the offending value where
//! there is one, so an operator can find the problem on the node without a debugger.

use std::path::PathBuf;

use toml_edit::{Item, Value};

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

    #[error(
        "{path}: this file, imported by {main}, defines `{key}`, and containerd {containerd} \
         replaces the whole table of {main} with an imported one: runtimes added to {main} would \
         be lost (and are with every setting of that table there); refusing to change anything \
         (move the settings of {path} into {main}, or use containerd 2.x, which merges imports)"
    )]
    CriTableImported {
        path: PathBuf,
        main: PathBuf,
        key: KeyPath,
        containerd: String,
    },

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
         ({defines}); refusing to install a runtime of the same name, which would replace theirs \
         or merge into it"
    )]
    ForeignRuntime {
        /// The file that defines the table: the main config, an imported file or a drop-in.
        path: PathBuf,
        key: KeyPath,
        /// What the table says, e.g. `runtime_type = "io.containerd.runc.v2", options.BinaryName
        /// = "/usr/bin/nvidia-container-runtime"`.
        defines: String,
    },

    #[error(
        "`containerd --config {config} config dump` already shows runtime handler `{key}` \
         ({defines}), which this installer did not write and no file it found defines \
         (containerd's built-in defaults, or a file it could not resolve); refusing to install a \
         runtime of the same name"
    )]
    ForeignEffectiveRuntime {
        config: PathBuf,
        key: KeyPath,
        defines: String,
    },

    #[error(
        "{path} already exists and was not created by this installer (it holds {what}); refusing \
         to overwrite it"
    )]
    ForeignFile { path: PathBuf, what: String },

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

/// How an item that is not what we expected is named in [`ConfigError::UnexpectedType`].
pub(crate) fn describe(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(value) => match value {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a datetime",
            Value::Array(_) => "an array",
            Value::InlineTable(_) => "an inline table",
        },
    }
}
