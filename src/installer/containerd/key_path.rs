//! TOML key paths as segment lists.
//!
//! Segments are kept apart instead of joined with dots because containerd's plugin ids contain
//! dots themselves (`io.containerd.grpc.v1.cri`); a joined string could not be split back.

use std::fmt;

use serde::{Deserialize, Serialize};
use toml_edit::Table;

/// A path of TOML keys, e.g. `plugins."io.containerd.grpc.v1.cri".containerd.runtimes.spin`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyPath(pub Vec<String>);

impl KeyPath {
    /// A path from its segments.
    pub fn new<I, S>(segments: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        KeyPath(segments.into_iter().map(Into::into).collect())
    }

    /// This path extended by more segments.
    pub fn join<I, S>(&self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut segments = self.0.clone();
        segments.extend(more.into_iter().map(Into::into));
        KeyPath(segments)
    }

    /// The segments.
    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// Whether `prefix` is a leading part of this path (or equal to it).
    pub fn starts_with(&self, prefix: &KeyPath) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

impl fmt::Display for KeyPath {
    /// Renders as in a TOML table header: bare segments where allowed, quoted otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(&toml_edit::Key::new(segment.as_str()).display_repr())?;
        }
        Ok(())
    }
}

/// The table at a path below `root`, if every step is a table.
pub(crate) fn table_at_mut<'t>(root: &'t mut Table, path: &KeyPath) -> Option<&'t mut Table> {
    let mut table = root;
    for segment in path.segments() {
        table = table.get_mut(segment)?.as_table_mut()?;
    }
    Some(table)
}

/// The table at a path below `root`, if every step is a table.
pub(crate) fn table_at<'t>(root: &'t Table, path: &KeyPath) -> Option<&'t Table> {
    let mut table = root;
    for segment in path.segments() {
        table = table.get(segment)?.as_table()?;
    }
    Some(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_like_a_toml_header() {
        let path = KeyPath::new([
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
            "kata-qemu",
        ]);
        assert_eq!(
            path.to_string(),
            r#"plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-qemu"#
        );
        assert_eq!(KeyPath::new(["a b", "c"]).to_string(), r#""a b".c"#);
    }

    #[test]
    fn joins_and_prefixes() {
        let base = KeyPath::new(["a", "b"]);
        let child = base.join(["c"]);
        assert!(child.starts_with(&base));
        assert!(!base.starts_with(&child));
        assert_eq!(child.segments(), ["a", "b", "c"]);
    }

    #[test]
    fn serialises_as_a_list() {
        let path = KeyPath::new(["plugins", "io.containerd.cri.v1.runtime"]);
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(json, r#"["plugins","io.containerd.cri.v1.runtime"]"#);
        assert_eq!(serde_json::from_str::<KeyPath>(&json).unwrap(), path);
    }
}
