//! The JSON schema of the providerConfig, generated from [`super::types`].
//!
//! The committed copy is `docs/reference/provider-config.schema.json`; a unit test fails when it
//! is stale, and `UPDATE_GOLDEN=1 cargo test` rewrites it.

use super::types::ContainerdShimConfig;

/// Where the committed schema lives, relative to the repository root.
pub const SCHEMA_PATH: &str = "docs/reference/provider-config.schema.json";

/// The schema as pretty-printed JSON with a trailing newline.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(ContainerdShimConfig);
    // A schema is plain JSON data; serialising it cannot fail.
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_schema_is_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SCHEMA_PATH);
        let generated = json_schema();
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{SCHEMA_PATH} is stale: the providerConfig types changed. \
             Regenerate it with `UPDATE_GOLDEN=1 cargo test --lib shim::config::schema` and commit it."
        );
    }

    #[test]
    fn schema_describes_the_fields_and_rejects_unknown_ones() {
        let schema: serde_json::Value = serde_json::from_str(&json_schema()).unwrap();
        assert_eq!(schema["title"], "ContainerdShimConfig");
        assert_eq!(
            schema["properties"]["apiVersion"]["const"],
            super::super::types::API_VERSION
        );
        assert_eq!(schema["additionalProperties"], false);
        let shim = &schema["$defs"]["Shim"];
        assert_eq!(shim["additionalProperties"], false);
        assert!(
            shim["properties"]["workerPools"]["description"]
                .as_str()
                .unwrap()
                .contains("containerd")
        );
    }
}
