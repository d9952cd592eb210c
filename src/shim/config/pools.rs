//! Which worker pools of the Shoot a shim goes to, and which node architectures that means.

use std::collections::BTreeSet;

use super::error::{FieldError, FieldPath, quote};
use crate::desired_shims::Arch;
use crate::gardener::api::cluster::{Shoot, WorkerPool};

/// A selected pool and the architecture of its machines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectedPool {
    pub name: String,
    pub arch: Arch,
    /// Where the selection came from, for messages about this pool: the `workerPools` entry
    /// that named it, or `workerPools` itself when the shim takes every containerd pool.
    pub path: FieldPath,
}

/// Resolves `workerPools` against the Shoot. Unset takes every pool that runs containerd;
/// pools with another CRI are left out then, but naming one explicitly is an error.
pub fn select(
    requested: Option<&[String]>,
    shoot: &Shoot,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Vec<SelectedPool> {
    let workers = &shoot.spec.provider.workers;
    let mut selected = Vec::new();
    match requested {
        None => {
            let containerd: Vec<&WorkerPool> = shoot.containerd_pools().collect();
            if containerd.is_empty() {
                errors.push(FieldError::new(
                    path,
                    "(unset) selects every worker pool that runs containerd, but the Shoot has none",
                ));
            }
            for pool in containerd {
                if let Some(arch) = pool_arch(pool, path, errors) {
                    selected.push(SelectedPool {
                        name: pool.name.clone(),
                        arch,
                        path: path.clone(),
                    });
                }
            }
        }
        Some([]) => errors.push(FieldError::new(
            path,
            "[] selects no worker pool; name at least one, or leave workerPools unset for every containerd pool",
        )),
        Some(names) => {
            for (i, name) in names.iter().enumerate() {
                let at = path.index(i);
                if names[..i].contains(name) {
                    errors.push(FieldError::invalid(&at, name, "is listed twice"));
                    continue;
                }
                let Some(pool) = workers.iter().find(|p| &p.name == name) else {
                    let known: Vec<&str> = workers.iter().map(|p| p.name.as_str()).collect();
                    errors.push(FieldError::invalid(
                        &at,
                        name,
                        format!(
                            "is not a worker pool of the Shoot (pools: {})",
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ),
                    ));
                    continue;
                };
                if !pool.runs_containerd() {
                    let cri = pool.cri.as_ref().map_or("", |c| c.name.as_str());
                    errors.push(FieldError::invalid(
                        &at,
                        name,
                        format!("uses CRI {}; shims need containerd", quote(cri)),
                    ));
                    continue;
                }
                if let Some(arch) = pool_arch(pool, &at, errors) {
                    selected.push(SelectedPool {
                        name: name.clone(),
                        arch,
                        path: at,
                    });
                }
            }
        }
    }
    selected
}

/// The pool's machine architecture; Gardener's default is amd64.
fn pool_arch(pool: &WorkerPool, path: &FieldPath, errors: &mut Vec<FieldError>) -> Option<Arch> {
    match pool.machine.architecture.as_deref() {
        None => Some(Arch::Amd64),
        Some(label) => match Arch::from_label(label) {
            Some(arch) => Some(arch),
            None => {
                errors.push(FieldError::new(
                    path,
                    format!(
                        "worker pool {} has architecture {}, for which no shim binaries exist (supported: amd64, arm64)",
                        quote(&pool.name),
                        quote(label)
                    ),
                ));
                None
            }
        },
    }
}

/// The architectures of the selected pools.
pub fn architectures(pools: &[SelectedPool]) -> BTreeSet<Arch> {
    pools.iter().map(|p| p.arch).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::config::test_support::{pool, shoot_with};

    fn path() -> FieldPath {
        FieldPath::root()
            .child("shims")
            .index(0)
            .child("workerPools")
    }

    #[test]
    fn unset_takes_every_containerd_pool_and_skips_others() {
        let shoot = shoot_with(vec![
            pool("a", None, None),
            pool("b", Some("other"), None),
            pool("c", Some("containerd"), Some("arm64")),
        ]);
        let mut errors = Vec::new();
        let selected = select(None, &shoot, &path(), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let names: Vec<_> = selected.iter().map(|p| (p.name.as_str(), p.arch)).collect();
        assert_eq!(names, [("a", Arch::Amd64), ("c", Arch::Arm64)]);
    }

    #[test]
    fn named_pools_must_exist_run_containerd_and_be_unique() {
        let shoot = shoot_with(vec![pool("a", None, None), pool("b", Some("other"), None)]);
        let mut errors = Vec::new();
        let requested = vec!["a".to_owned(), "b".into(), "zz".into(), "a".into()];
        let selected = select(Some(&requested), &shoot, &path(), &mut errors);
        assert_eq!(selected.len(), 1);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "providerConfig.shims[0].workerPools[1]: \"b\" uses CRI \"other\"; shims need containerd",
                "providerConfig.shims[0].workerPools[2]: \"zz\" is not a worker pool of the Shoot (pools: a, b)",
                "providerConfig.shims[0].workerPools[3]: \"a\" is listed twice",
            ]
        );
    }

    #[test]
    fn no_containerd_pool_empty_list_and_unknown_arch_are_errors() {
        let mut errors = Vec::new();
        select(None, &shoot_with(vec![]), &path(), &mut errors);
        select(
            Some(&[]),
            &shoot_with(vec![pool("a", None, None)]),
            &path(),
            &mut errors,
        );
        select(
            None,
            &shoot_with(vec![pool("s", None, Some("s390x"))]),
            &path(),
            &mut errors,
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[2].to_string().contains("\"s390x\""));
    }
}
