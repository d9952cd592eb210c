//! A bundle that drops RuntimeClasses is written in two steps, so that the nodes start on the
//! removal at once. Pure: the reads and writes are the actuator's.
//!
//! gardener-resource-manager (GRM) handles a new bundle in one order: it first deletes what the
//! bundle no longer holds, and when it deleted anything it reports the deletion as pending and
//! looks again only after a fixed 5 s (`RequeueAfterOnDeletionPending` of its ManagedResource
//! controller: neither a field of the ManagedResource nor a flag of GRM); the changed objects,
//! among them the installer DaemonSet that carries the removal to the nodes, are applied only
//! in that second pass. A bundle that deletes nothing is applied in one pass.
//!
//! So the first step writes the new bundle with the dropped RuntimeClasses still in it, as they
//! are: GRM applies the changed installers in one pass and the nodes withdraw their labels. Once
//! GRM has recorded it, the second step writes the new bundle itself, and GRM deletes the
//! RuntimeClasses (its 5 s now pass while the nodes are at work, not before).
//!
//! The RuntimeClasses need not wait for the nodes: without its RuntimeClass the API server
//! refuses a new pod of the class, and a running pod keeps its sandbox (the installer waits for
//! it before the handler goes); while it stays, its node selector (the readiness label the
//! nodes withdraw first) keeps new pods off the nodes that are removing it.
//!
//! Deleting the RuntimeClasses from the shoot before writing the bundle does not work: GRM's
//! health check notices the object missing and its next pass creates it again from the bundle
//! it has, which then costs the 5 s anyway.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::gardener::managed_resource::catch_up::{self, ObjectKey};

const GROUP: &str = "node.k8s.io";
const KIND: &str = "RuntimeClass";

/// What to write over the bundle GRM has recorded.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The new bundle as it is: it drops no RuntimeClass, or its first step is recorded.
    Next,
    /// The first step: the new bundle with these RuntimeClasses of the recorded one kept.
    KeepFirst(Vec<Value>),
}

/// The step for writing `next` over `current` (the objects of the bundle GRM has recorded).
pub fn step(current: &[Value], next: &[Value]) -> Step {
    let next_keys = catch_up::keys(next);
    let dropped: Vec<&Value> = current
        .iter()
        .filter(|object| {
            ObjectKey::of(object).is_some_and(|key| {
                key.group == GROUP && key.kind == KIND && !next_keys.contains(&key)
            })
        })
        .collect();
    if dropped.is_empty() {
        return Step::Next;
    }
    // `current` is the first step already when it is `next` plus the dropped RuntimeClasses.
    let first_step_of_next =
        by_key(current.iter().filter(|o| !dropped.contains(o))) == by_key(next.iter());
    if first_step_of_next {
        Step::Next
    } else {
        Step::KeepFirst(dropped.into_iter().cloned().collect())
    }
}

fn by_key<'a>(objects: impl Iterator<Item = &'a Value>) -> BTreeMap<Option<ObjectKey>, &'a Value> {
    objects.map(|o| (ObjectKey::of(o), o)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn runtime_class(name: &str) -> Value {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": name}, "handler": name,
               "scheduling": {"nodeSelector": {format!("x/{name}"): "ready"}}})
    }

    fn installer(shims: &[&str]) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "installer", "namespace": "kube-system"},
               "spec": {"template": {"metadata": {"annotations": {"shims": shims.join(",")}}}}})
    }

    fn pool_installer(pool: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": format!("installer-{pool}"), "namespace": "kube-system"}})
    }

    #[test]
    fn a_removal_keeps_the_runtime_class_in_its_first_step() {
        let current = [
            runtime_class("crun"),
            runtime_class("crun-b"),
            installer(&["crun", "crun-b"]),
        ];
        let next = [runtime_class("crun"), installer(&["crun"])];
        assert_eq!(
            step(&current, &next),
            Step::KeepFirst(vec![runtime_class("crun-b")])
        );
    }

    #[test]
    fn once_the_first_step_is_recorded_the_runtime_class_goes() {
        let next = [runtime_class("crun"), installer(&["crun"])];
        let first_step = [
            runtime_class("crun"),
            installer(&["crun"]),
            runtime_class("crun-b"),
        ];
        assert_eq!(step(&first_step, &next), Step::Next);
    }

    #[test]
    fn a_change_on_top_of_a_first_step_is_a_first_step_again() {
        // The first step of removing crun-b is recorded, and the configuration changes again
        // (crun-c goes too) before the second step was written: both stay for one more step.
        let first_step = [
            runtime_class("crun"),
            runtime_class("crun-c"),
            installer(&["crun", "crun-c"]),
            runtime_class("crun-b"),
        ];
        let next = [runtime_class("crun"), installer(&["crun"])];
        assert_eq!(
            step(&first_step, &next),
            Step::KeepFirst(vec![runtime_class("crun-c"), runtime_class("crun-b")])
        );
    }

    #[test]
    fn a_bundle_that_drops_no_runtime_class_is_written_at_once() {
        let current = [runtime_class("crun"), installer(&["crun"])];
        let addition = [
            runtime_class("crun"),
            runtime_class("crun-b"),
            installer(&["crun", "crun-b"]),
        ];
        assert_eq!(step(&current, &addition), Step::Next);
        assert_eq!(step(&current, &current), Step::Next);
        // A deselected pool: its DaemonSet is GRM's to delete (its pods go with it in the
        // foreground); no node of the pool is left to wait for.
        let two_pools = [pool_installer("a"), pool_installer("b")];
        assert_eq!(step(&two_pools, &[pool_installer("a")]), Step::Next);
    }

    #[test]
    fn the_uninstall_keeps_every_runtime_class_in_its_first_step() {
        let current = [
            runtime_class("a"),
            runtime_class("b"),
            installer(&["a", "b"]),
        ];
        let uninstall = [installer(&[])];
        assert_eq!(
            step(&current, &uninstall),
            Step::KeepFirst(vec![runtime_class("a"), runtime_class("b")])
        );
        let first_step = [installer(&[]), runtime_class("a"), runtime_class("b")];
        assert_eq!(step(&first_step, &uninstall), Step::Next);
    }

    #[test]
    fn a_runtime_class_of_another_group_is_not_one() {
        let other = json!({"apiVersion": "example.com/v1", "kind": "RuntimeClass",
                           "metadata": {"name": "x"}});
        assert_eq!(
            step(&[other, installer(&["x"])], &[installer(&[])]),
            Step::Next
        );
    }
}
