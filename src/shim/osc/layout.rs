//! Where a shim's files go on the node.

use sha2::{Digest, Sha256};

use crate::desired_shims::{
    BIN_DIR_PLACEHOLDER, CONFIG_DIR_PLACEHOLDER, DesiredShim, node_agent_shim_dir,
};

/// How many hex digits of the content digest stamp a directory: enough that two contents of
/// one version never meet, short enough to read in a path.
const DIGEST_CHARS: usize = 12;

/// The directory of one delivered version of a shim:
/// `/var/bin/containerruntimes/<shim>/<version>-<digest>` ([`node_agent_shim_dir`]). The digest covers everything the
/// directory holds (binary sources, config files), so a changed payload under an unchanged
/// version still lands in a new directory and never replaces a file a running shim uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionDir(String);

impl VersionDir {
    pub fn of(shim: &DesiredShim) -> VersionDir {
        let mut hash = Sha256::new();
        // Plain data with string keys: serialising cannot fail.
        let payload = serde_json::to_vec(&(&shim.binaries, &shim.config_files)).unwrap_or_default();
        hash.update(&payload);
        let digest = hex::encode(hash.finalize());
        VersionDir(format!(
            "{}{}-{}",
            node_agent_shim_dir(&shim.name),
            shim.version,
            &digest[..DIGEST_CHARS]
        ))
    }

    pub fn path(&self) -> &str {
        &self.0
    }

    /// Like the installer's layout: binaries in `bin/`, config files in `config/`.
    pub fn bin_dir(&self) -> String {
        format!("{}/bin", self.0)
    }

    pub fn config_dir(&self) -> String {
        format!("{}/config", self.0)
    }

    /// `{{configDir}}` and `{{binDir}}` resolved, as the installer does for option values and
    /// config files.
    pub fn resolve(&self, text: &str) -> String {
        text.replace(CONFIG_DIR_PLACEHOLDER, &self.config_dir())
            .replace(BIN_DIR_PLACEHOLDER, &self.bin_dir())
    }
}
