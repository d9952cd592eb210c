//! The controller's field paths (`providerConfig.shims[0].name`, `Shoot.spec.kubernetes.version`)
//! as paths in the Shoot the owner applies (`spec.extensions[1].providerConfig.shims[0].name`,
//! `spec.kubernetes.version`).

use crate::shim::config::error::{FieldError, ROOT};

/// The path of `spec.extensions[index]`.
pub fn extension(index: usize) -> String {
    format!("spec.extensions[{index}]")
}

/// `error` of the providerConfig of `spec.extensions[index]`, with its path in the Shoot.
pub fn in_shoot(index: usize, error: FieldError) -> FieldError {
    let path = if let Some(shoot_field) = error.path.strip_prefix("Shoot.") {
        shoot_field.to_owned()
    } else if error.path.starts_with(ROOT) {
        format!("{}.{}", extension(index), error.path)
    } else {
        format!("{}.{ROOT}.{}", extension(index), error.path)
    };
    FieldError {
        path,
        detail: error.detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::config::error::FieldPath;

    #[test]
    fn provider_config_paths_go_below_the_extension_entry() {
        let path = FieldPath::root().child("shims").index(0).child("name");
        let error = in_shoot(1, FieldError::invalid(&path, "Spin", "is not a name"));
        assert_eq!(
            error.to_string(),
            "spec.extensions[1].providerConfig.shims[0].name: \"Spin\" is not a name"
        );
        let root = in_shoot(0, FieldError::new(&FieldPath::root(), "is missing"));
        assert_eq!(root.path, "spec.extensions[0].providerConfig");
    }

    #[test]
    fn shoot_paths_lose_their_prefix() {
        let path = FieldPath::shoot()
            .child("spec")
            .child("kubernetes")
            .child("version");
        let error = in_shoot(3, FieldError::invalid(&path, "1.28.1", "is too old"));
        assert_eq!(
            error.to_string(),
            "spec.kubernetes.version: \"1.28.1\" is too old"
        );
    }
}
