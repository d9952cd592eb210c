//! Admit or refuse a Shoot create or update.
//!
//! On update, a Shoot whose problems predate the change is not newly refused when the change
//! leaves every input of the checks alone: our entries in `spec.extensions`, the Kubernetes
//! version and API server switches, and the worker pools' names, CRI, architecture and
//! container runtimes. Scaling a pool, hibernating or annotating an invalid Shoot goes through
//! (with the problems as warnings); touching one of those inputs needs the Shoot to be valid
//! afterwards. This is how Gardener's own validation treats fields it tightened later: what
//! was admitted stays admissible until it is edited. The seed controller keeps reporting the
//! problems in the Shoot's status either way.

use super::checks::check;
use super::shoot_view::{PoolRuntimes, ShootView};
use crate::gardener::api::cluster::ShootKubernetes;
use crate::gardener::api::extension::ExtensionSpec;
use crate::shim::config::Catalog;
use crate::shim::config::error::FieldError;

/// The outcome for one Shoot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Invalid before and unchanged in what the checks read: allowed, the problems are warned.
    AllowedUnchanged(Vec<FieldError>),
    Refused(Vec<FieldError>),
}

/// The verdict on `new`; `old` is the Shoot before an update, `None` on create.
pub fn decide(new: &ShootView, old: Option<&ShootView>, catalog: &Catalog) -> Verdict {
    let errors = check(new, catalog);
    if errors.is_empty() {
        return Verdict::Allowed;
    }
    match old {
        Some(old) if Inputs::of(old) == Inputs::of(new) => Verdict::AllowedUnchanged(errors),
        _ => Verdict::Refused(errors),
    }
}

/// What the checks read of a Shoot.
#[derive(PartialEq)]
struct Inputs<'a> {
    extensions: Vec<(usize, &'a ExtensionSpec)>,
    kubernetes: &'a ShootKubernetes,
    pools: Vec<(&'a str, Option<&'a str>, Option<&'a str>)>,
    runtimes: &'a [PoolRuntimes],
}

impl<'a> Inputs<'a> {
    fn of(view: &'a ShootView) -> Self {
        Inputs {
            extensions: view.ours().map(|(i, e)| (i, &e.spec)).collect(),
            kubernetes: &view.shoot.spec.kubernetes,
            pools: view
                .shoot
                .spec
                .provider
                .workers
                .iter()
                .map(|p| {
                    (
                        p.name.as_str(),
                        p.cri.as_ref().map(|c| c.name.as_str()),
                        p.machine.architecture.as_deref(),
                    )
                })
                .collect(),
            runtimes: &view.pools,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn catalog() -> Catalog {
        Catalog::builtin().unwrap()
    }

    fn shoot(shims: Value, minimum: u32, pools: &[&str]) -> ShootView {
        let workers: Vec<Value> = pools
            .iter()
            .map(|p| json!({"name": p, "minimum": minimum, "machine": {"type": "m"}}))
            .collect();
        let shoot = json!({
            "metadata": {"name": "s", "namespace": "garden-p"},
            "spec": {
                "extensions": [{"type": "containerd-shim", "providerConfig": {
                    "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                    "kind": "ContainerdShimConfig", "shims": shims}}],
                "kubernetes": {"version": "1.33.2"},
                "provider": {"type": "local", "workers": workers}
            }
        });
        ShootView::from_json(&shoot.to_string()).unwrap()
    }

    fn refused(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Refused(_))
    }

    #[test]
    fn create_refuses_any_problem_and_admits_a_valid_shoot() {
        let bad = shoot(
            json!([{"name": "crun", "workerPools": ["gone"]}]),
            1,
            &["a"],
        );
        assert!(refused(&decide(&bad, None, &catalog())));
        let good = shoot(json!([{"name": "crun", "workerPools": ["a"]}]), 1, &["a"]);
        assert_eq!(decide(&good, None, &catalog()), Verdict::Allowed);
    }

    #[test]
    fn an_unrelated_change_to_an_invalid_shoot_is_allowed_with_warnings() {
        let shims = json!([{"name": "crun", "workerPools": ["gone"]}]);
        let old = shoot(shims.clone(), 1, &["a"]);
        let scaled = shoot(shims, 3, &["a"]);
        match decide(&scaled, Some(&old), &catalog()) {
            Verdict::AllowedUnchanged(errors) => {
                assert!(errors[0].to_string().contains("\"gone\""), "{errors:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_change_to_what_the_checks_read_must_leave_the_shoot_valid() {
        let old = shoot(json!([{"name": "crun", "workerPools": ["a"]}]), 1, &["a"]);
        // The config turns invalid.
        let typo = shoot(json!([{"name": "crun", "workerPools": ["b"]}]), 1, &["a"]);
        assert!(refused(&decide(&typo, Some(&old), &catalog())));
        // The pool the config names is removed.
        let renamed = shoot(json!([{"name": "crun", "workerPools": ["a"]}]), 1, &["c"]);
        assert!(refused(&decide(&renamed, Some(&old), &catalog())));
        // An invalid Shoot edited in the config, still invalid.
        let still_bad_old = shoot(json!([{"name": "crun", "workerPools": ["x"]}]), 1, &["a"]);
        let still_bad_new = shoot(json!([{"name": "crun", "workerPools": ["y"]}]), 1, &["a"]);
        assert!(refused(&decide(
            &still_bad_new,
            Some(&still_bad_old),
            &catalog()
        )));
        // ... and fixed.
        assert_eq!(
            decide(&old, Some(&still_bad_old), &catalog()),
            Verdict::Allowed
        );
    }
}
