//! How a plan is proven with the node's containerd: which config to dump, what the merged
//! result must show, and the baseline it is compared with. Kept apart from the plan so that
//! the dump check and the effective-config comparison it runs need not know about plans.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::daemon_version::ContainerdVersion;
use super::dump::{DumpOutput, ExpectedRuntime, check_dump, dump_command};
use super::effective::{EffectiveConfig, Ours, ensure_only_ours_changed};
use super::error::ConfigError;

/// A transient file to dump instead of the real config. The engine's strategies (in-place edits
/// and drop-ins the main file imports) never need one: they dump the config containerd reads.
/// Kept in the journal format so that a change recorded by an earlier installer still loads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScratchFile {
    pub path: PathBuf,
    pub content: String,
}

/// How to prove with the node's containerd that the planned config works.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// The containerd the dump must come from (decides where the merged config shows runtimes).
    pub containerd: ContainerdVersion,
    /// The file to pass to `containerd --config`, after the plan's writes.
    pub config: PathBuf,
    /// Written before the dump and removed after it, when set; then `config` is its path.
    /// Never set by the current strategies (see [`ScratchFile`]).
    #[serde(default)]
    pub scratch: Option<ScratchFile>,
    /// Runtimes the merged config must contain, exactly like this.
    pub present: Vec<ExpectedRuntime>,
    /// Runtimes of ours that must be gone.
    pub absent: Vec<ExpectedRuntime>,
    /// Handlers the ownership record held before the change: ours in the baseline whatever it
    /// shows of them (a drifted table of ours is repaired, not a foreign one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<String>,
    /// `containerd config dump` of the configuration as it was before the change, when taken:
    /// none of `present` may be someone else's in it, and the candidate must not differ from it
    /// in anything that is not ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
}

impl Validation {
    /// The dump command for this validation; see [`dump_command`].
    pub fn command(&self, prefix: &[String], containerd: &str) -> Result<Vec<String>, ConfigError> {
        dump_command(prefix, containerd, &self.config)
    }

    /// Interprets the dump command's result; see [`check_dump`]. With a baseline, the
    /// candidate must also leave everything that is not ours as it was
    /// ([`super::ensure_only_ours_changed`]).
    pub fn check(&self, output: &DumpOutput) -> Result<(), ConfigError> {
        let before = match &self.baseline {
            Some(baseline) => {
                let before = EffectiveConfig::parse(&self.config, self.containerd, baseline)?;
                before.ensure_not_taken(&self.config, &self.present, &self.recorded)?;
                Some(before)
            }
            None => None,
        };
        check_dump(
            &self.config,
            self.containerd,
            &self.present,
            &self.absent,
            output,
        )?;
        let Some(before) = before else {
            return Ok(());
        };
        let after = EffectiveConfig::parse(&self.config, self.containerd, &output.stdout)?;
        let ours = Ours {
            handlers: self
                .present
                .iter()
                .chain(&self.absent)
                .map(|runtime| runtime.handler.clone())
                .collect(),
        };
        ensure_only_ours_changed(&self.config, &before, &after, &ours)
    }
}
