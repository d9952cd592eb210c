//! The node plan: from what is desired for this node and what the host and the state file say,
//! the ordered steps that converge the node. Pure: the executor gathers the facts, this module
//! decides, the executor performs. Every step is conditional on a fact, so a node that is
//! already converged gets an empty plan, and a run that died half-way gets the rest.
//!
//! Order, and why:
//!
//! 1. remove readiness labels that must go (a shim going away or failed) *first*, so no new pod
//!    is scheduled onto a runtime that is about to disappear;
//! 2. stage missing versioned directories (fetched and verified all-or-nothing before);
//! 3. if containerd's config must change: journal the change, swap symlinks, write the config,
//!    validate it with `containerd config dump`, restart (holding a budget slot), verify;
//!    otherwise journal where the symlinks point, swap them (an upgrade needs no restart) and
//!    verify what is unverified: a version that fails verification is swapped back;
//! 4. set readiness labels only now, after verification;
//! 5. remove the stable symlinks of shims that are gone (containerd no longer refers to them);
//! 6. collect garbage (old versions no running shim uses).

use std::collections::{BTreeMap, BTreeSet};

use crate::desired_shims::{READY_LABEL_PREFIX, READY_LABEL_VALUE, ready_label};

/// A selected shim, as the host and the state file have it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShimFacts {
    pub name: String,
    pub handler: String,
    /// The versioned directory this node needs.
    pub dir: String,
    /// The versioned directory is complete.
    pub staged: bool,
    /// Where the stable symlink points now.
    pub current: Option<String>,
    /// containerd was verified to serve exactly this description.
    pub verified: bool,
    /// containerd was verified to serve an earlier description of it (upgrades keep the label).
    pub verified_before: bool,
}

/// A shim that is no longer selected but left something on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoneFacts {
    pub name: String,
    /// Its stable symlink still exists.
    pub linked: bool,
    /// Pod sandboxes that still use its handler: its files stay until they are removed.
    pub in_use: usize,
}

/// Everything the plan depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanInput {
    pub shims: Vec<ShimFacts>,
    pub gone: Vec<GoneFacts>,
    /// The node's labels (only ours matter).
    pub labels: BTreeMap<String, String>,
    /// The engine's plan changes containerd's config.
    pub config_changed: bool,
    /// A journaled config change is in flight (from an earlier, interrupted run).
    pub txn_pending: bool,
    /// The journaled change was validated already.
    pub txn_validated: bool,
    /// A journaled change failed verification and its rollback must be finished.
    pub txn_rolling_back: bool,
    /// The journaled change only switched symlinks (the config did not change): a verification
    /// settles it, no restart.
    pub txn_switches_only: bool,
    /// This desired set failed on this node before: do nothing but withdraw labels.
    pub failed: bool,
}

/// One thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    RemoveLabels(Vec<String>),
    Stage(Vec<String>),
    /// Journal the config change before anything of it is written.
    BeginConfig,
    /// Journal where the stable symlinks point before swapping them without a config change,
    /// so that a version that fails verification is swapped back.
    BeginSwaps,
    Swap {
        shim: String,
        dir: String,
    },
    WriteConfig,
    ValidateConfig,
    /// Restart containerd (holding a slot) and verify the journaled runtimes; on failure roll
    /// back and restart again.
    RestartAndVerify,
    /// Finish the rollback of a change whose verification failed.
    FinishRollback,
    /// Verify without a restart; restart (holding a slot) only if verification fails.
    Verify(Vec<String>),
    SetLabels(Vec<String>),
    Unlink(String),
    CollectGarbage,
}

/// Decides the steps (see the module documentation for the order).
pub fn plan(input: &PlanInput) -> Vec<Step> {
    let mut steps = Vec::new();

    let ours: BTreeSet<&String> = input
        .labels
        .iter()
        .filter(|(key, value)| key.starts_with(READY_LABEL_PREFIX) && *value == READY_LABEL_VALUE)
        .map(|(key, _)| key)
        .collect();
    let remove = labels_to_remove(input, &ours);
    if !remove.is_empty() {
        steps.push(Step::RemoveLabels(remove.clone()));
    }
    if input.failed {
        return steps;
    }
    if input.txn_rolling_back {
        steps.push(Step::FinishRollback);
        return steps;
    }

    let stage: Vec<String> = input
        .shims
        .iter()
        .filter(|s| !s.staged)
        .map(|s| s.name.clone())
        .collect();
    if !stage.is_empty() {
        steps.push(Step::Stage(stage));
    }
    install_steps(input, &mut steps);

    let set: Vec<String> = input
        .shims
        .iter()
        .map(|s| ready_label(&s.handler))
        .filter(|key| !ours.contains(key) || remove.contains(key))
        .collect();
    if !set.is_empty() {
        steps.push(Step::SetLabels(set));
    }

    for gone in &input.gone {
        if gone.linked && gone.in_use == 0 {
            steps.push(Step::Unlink(gone.name.clone()));
        }
    }
    steps.push(Step::CollectGarbage);
    steps
}

/// Our ready labels that must go, and ready labels with a value that is not ours, sorted.
fn labels_to_remove(input: &PlanInput, ours: &BTreeSet<&String>) -> Vec<String> {
    let foreign_values: Vec<String> = input
        .labels
        .iter()
        .filter(|(key, value)| key.starts_with(READY_LABEL_PREFIX) && *value != READY_LABEL_VALUE)
        .map(|(key, _)| key.clone())
        .collect();
    // A label may stay while its handler is verified (now, or before an upgrade in progress).
    // After a failed change was rolled back, the shims it did not touch still run as verified:
    // they keep their labels; the failed ones lose theirs.
    // Drift: every selected shim is verified as it is desired and nothing is being removed,
    // yet containerd's configuration must change: someone took our tables out (or put the
    // original file back). containerd does not serve them, or will not after its next restart:
    // the labels go until the repair is verified.
    let drifted = input.config_changed
        && !input.txn_pending
        && input.shims.iter().all(|s| s.verified)
        && input.gone.iter().all(|g| !g.linked);
    let may_keep: BTreeSet<String> = input
        .shims
        .iter()
        .filter(|s| !drifted && (s.verified || (!input.failed && s.verified_before)))
        .map(|s| ready_label(&s.handler))
        .collect();
    let mut remove: Vec<String> = ours
        .iter()
        .filter(|key| !may_keep.contains(key.as_str()))
        .map(|key| key.to_string())
        .collect();
    remove.extend(foreign_values);
    remove.sort();
    remove
}

/// The swaps of payload directories and what proves them: a containerd restart when the
/// config changes (or a config change is pending), else a verification of what is new or
/// unverified, after the swaps were journaled.
fn install_steps(input: &PlanInput, steps: &mut Vec<Step>) {
    let swaps: Vec<Step> = input
        .shims
        .iter()
        .filter(|s| s.current.as_deref() != Some(s.dir.as_str()))
        .map(|s| Step::Swap {
            shim: s.name.clone(),
            dir: s.dir.clone(),
        })
        .collect();

    let restarting = input.config_changed || (input.txn_pending && !input.txn_switches_only);
    if restarting {
        if input.config_changed {
            steps.push(Step::BeginConfig);
        }
        steps.extend(swaps);
        if input.config_changed {
            steps.push(Step::WriteConfig);
        }
        if input.config_changed || !input.txn_validated {
            steps.push(Step::ValidateConfig);
        }
        steps.push(Step::RestartAndVerify);
        return;
    }
    let swapped: BTreeSet<String> = swaps
        .iter()
        .filter_map(|step| match step {
            Step::Swap { shim, .. } => Some(shim.clone()),
            _ => None,
        })
        .collect();
    if !swaps.is_empty() {
        steps.push(Step::BeginSwaps);
    }
    steps.extend(swaps);
    let unverified: Vec<String> = input
        .shims
        .iter()
        .filter(|s| !s.verified || swapped.contains(&s.name))
        .map(|s| s.name.clone())
        .collect();
    // A pending journal of switches is settled (kept or swapped back) by a verification.
    if !unverified.is_empty() || input.txn_pending {
        steps.push(Step::Verify(unverified));
    }
}

/// Whether a step changes the node (everything but garbage collection, which decides itself
/// whether there is anything to do).
pub fn mutates(step: &Step) -> bool {
    !matches!(step, Step::CollectGarbage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_withdraws_the_labels_until_the_repair_is_verified() {
        let mut crun = shim("crun");
        crun.verified = true;
        crun.current = Some(crun.dir.clone());
        let input = PlanInput {
            shims: vec![crun],
            labels: [(ready_label("crun"), READY_LABEL_VALUE.to_string())].into(),
            config_changed: true,
            ..PlanInput::default()
        };
        let steps = plan(&input);
        let removed = steps
            .iter()
            .position(|s| *s == Step::RemoveLabels(vec![ready_label("crun")]));
        let restarted = steps.iter().position(|s| *s == Step::RestartAndVerify);
        let set = steps
            .iter()
            .position(|s| *s == Step::SetLabels(vec![ready_label("crun")]));
        assert!(
            removed < restarted && restarted < set && removed.is_some(),
            "{steps:?}"
        );
    }

    fn shim(name: &str) -> ShimFacts {
        ShimFacts {
            name: name.into(),
            handler: name.into(),
            dir: "v1-aaaaaaaaaaaa".into(),
            staged: true,
            current: Some("v1-aaaaaaaaaaaa".into()),
            verified: true,
            verified_before: true,
        }
    }

    fn label(handler: &str) -> (String, String) {
        (ready_label(handler), READY_LABEL_VALUE.into())
    }

    #[test]
    fn a_converged_node_only_collects_garbage() {
        let input = PlanInput {
            shims: vec![shim("spin")],
            labels: BTreeMap::from([label("spin"), ("other".into(), "x".into())]),
            ..PlanInput::default()
        };
        assert_eq!(plan(&input), [Step::CollectGarbage]);
        assert!(!mutates(&Step::CollectGarbage));
    }

    #[test]
    fn first_install_runs_every_step_in_order() {
        let fresh = ShimFacts {
            staged: false,
            current: None,
            verified: false,
            verified_before: false,
            ..shim("spin")
        };
        let input = PlanInput {
            shims: vec![fresh],
            config_changed: true,
            ..PlanInput::default()
        };
        assert_eq!(
            plan(&input),
            [
                Step::Stage(vec!["spin".into()]),
                Step::BeginConfig,
                Step::Swap {
                    shim: "spin".into(),
                    dir: "v1-aaaaaaaaaaaa".into()
                },
                Step::WriteConfig,
                Step::ValidateConfig,
                Step::RestartAndVerify,
                Step::SetLabels(vec![ready_label("spin")]),
                Step::CollectGarbage,
            ]
        );
    }

    #[test]
    fn an_upgrade_journals_swaps_and_verifies_without_restart_keeping_the_label() {
        let upgraded = ShimFacts {
            dir: "v2-bbbbbbbbbbbb".into(),
            staged: false,
            verified: false,
            ..shim("spin")
        };
        let input = PlanInput {
            shims: vec![upgraded.clone()],
            labels: BTreeMap::from([label("spin")]),
            ..PlanInput::default()
        };
        // The swap is journaled first: a version that fails verification is swapped back.
        assert_eq!(
            plan(&input),
            [
                Step::Stage(vec!["spin".into()]),
                Step::BeginSwaps,
                Step::Swap {
                    shim: "spin".into(),
                    dir: "v2-bbbbbbbbbbbb".into()
                },
                Step::Verify(vec!["spin".into()]),
                Step::CollectGarbage,
            ]
        );

        // Interrupted after the swap: the journal of switches is settled by a verification,
        // without a restart, and the label stays meanwhile.
        let swapped = ShimFacts {
            staged: true,
            current: Some(upgraded.dir.clone()),
            ..upgraded
        };
        let resumed = PlanInput {
            shims: vec![swapped],
            txn_pending: true,
            txn_switches_only: true,
            ..input.clone()
        };
        assert_eq!(
            plan(&resumed),
            [Step::Verify(vec!["spin".into()]), Step::CollectGarbage]
        );
        // Interrupted while swapping back: the rollback is finished, nothing else.
        let rolling_back = PlanInput {
            txn_rolling_back: true,
            ..resumed
        };
        assert_eq!(plan(&rolling_back), [Step::FinishRollback]);
    }

    #[test]
    fn removal_withdraws_the_label_before_anything_else() {
        let input = PlanInput {
            shims: vec![shim("spin")],
            gone: vec![GoneFacts {
                name: "wasmtime".into(),
                linked: true,
                in_use: 0,
            }],
            labels: BTreeMap::from([label("spin"), label("wasmtime")]),
            config_changed: true,
            ..PlanInput::default()
        };
        let steps = plan(&input);
        assert_eq!(steps[0], Step::RemoveLabels(vec![ready_label("wasmtime")]));
        assert_eq!(
            &steps[1..],
            [
                Step::BeginConfig,
                Step::WriteConfig,
                Step::ValidateConfig,
                Step::RestartAndVerify,
                Step::Unlink("wasmtime".into()),
                Step::CollectGarbage,
            ]
        );
        // While pods of its handler run, the shim's files stay (containerd needs them to stop
        // those pods); its configuration and label go all the same.
        let busy = PlanInput {
            gone: vec![GoneFacts {
                in_use: 2,
                ..input.gone[0].clone()
            }],
            ..input
        };
        let steps = plan(&busy);
        assert_eq!(steps[0], Step::RemoveLabels(vec![ready_label("wasmtime")]));
        assert!(
            !steps.iter().any(|s| matches!(s, Step::Unlink(_))),
            "{steps:?}"
        );
        assert!(steps.contains(&Step::RestartAndVerify));
    }

    #[test]
    fn labels_nobody_verified_are_removed_and_values_normalised() {
        let unverified = ShimFacts {
            verified: false,
            verified_before: false,
            ..shim("spin")
        };
        let input = PlanInput {
            shims: vec![unverified],
            labels: BTreeMap::from([
                label("spin"),
                (ready_label("kata"), "yes".into()),
                label("stale"),
            ]),
            ..PlanInput::default()
        };
        assert_eq!(
            plan(&input),
            [
                Step::RemoveLabels(vec![
                    ready_label("kata"),
                    ready_label("spin"),
                    ready_label("stale")
                ]),
                Step::Verify(vec!["spin".into()]),
                Step::SetLabels(vec![ready_label("spin")]),
                Step::CollectGarbage,
            ]
        );
    }

    #[test]
    fn a_failed_node_only_withdraws_labels() {
        let failed = ShimFacts {
            verified: false,
            verified_before: true,
            ..shim("wamr")
        };
        let input = PlanInput {
            shims: vec![shim("spin"), failed],
            labels: BTreeMap::from([label("spin"), label("wamr")]),
            config_changed: true,
            failed: true,
            ..PlanInput::default()
        };
        // spin was not part of the failed change and still runs verified: it keeps its label.
        assert_eq!(
            plan(&input),
            [Step::RemoveLabels(vec![ready_label("wamr")])]
        );
        let input = PlanInput {
            labels: BTreeMap::new(),
            ..input
        };
        assert!(plan(&input).is_empty());
    }

    #[test]
    fn an_interrupted_change_resumes_where_it_stopped() {
        let pending = ShimFacts {
            verified: false,
            verified_before: false,
            ..shim("spin")
        };
        // Files written, not validated: validate, restart.
        let input = PlanInput {
            shims: vec![pending.clone()],
            txn_pending: true,
            ..PlanInput::default()
        };
        assert_eq!(
            plan(&input),
            [
                Step::ValidateConfig,
                Step::RestartAndVerify,
                Step::SetLabels(vec![ready_label("spin")]),
                Step::CollectGarbage,
            ]
        );
        // Validated already: straight to the restart.
        let input = PlanInput {
            txn_validated: true,
            ..input
        };
        assert_eq!(plan(&input)[0], Step::RestartAndVerify);
        // A rollback in progress is finished, nothing else.
        let input = PlanInput {
            txn_rolling_back: true,
            ..input
        };
        assert_eq!(plan(&input), [Step::FinishRollback]);
    }

    /// Exhaustive over the boolean facts of one shim: invariants that must hold for every
    /// combination.
    #[test]
    fn invariants_over_all_fact_combinations() {
        for bits in 0u32..(1 << 11) {
            let bit = |i: u32| bits & (1 << i) != 0;
            let facts = ShimFacts {
                staged: bit(0),
                current: bit(1).then(|| "v1-aaaaaaaaaaaa".to_string()),
                verified: bit(2),
                verified_before: bit(2) || bit(3),
                ..shim("spin")
            };
            let input = PlanInput {
                shims: vec![facts.clone()],
                labels: if bit(4) {
                    BTreeMap::from([label("spin")])
                } else {
                    BTreeMap::new()
                },
                config_changed: bit(5),
                txn_pending: bit(6),
                txn_validated: bit(6) && bit(7),
                txn_rolling_back: bit(6) && bit(8),
                txn_switches_only: bit(6) && bit(10),
                failed: bit(9),
                gone: vec![],
            };
            let steps = plan(&input);
            let position = |wanted: &dyn Fn(&Step) -> bool| steps.iter().position(wanted);
            let set = position(&|s| matches!(s, Step::SetLabels(_)));
            let removed = position(&|s| matches!(s, Step::RemoveLabels(_)));
            let restart = position(&|s| matches!(s, Step::RestartAndVerify));
            let verify = position(&|s| matches!(s, Step::Verify(_)));
            let write = position(&|s| matches!(s, Step::WriteConfig));
            let begin = position(&|s| matches!(s, Step::BeginConfig));
            let validate = position(&|s| matches!(s, Step::ValidateConfig));
            let stage = position(&|s| matches!(s, Step::Stage(_)));
            let swap = position(&|s| matches!(s, Step::Swap { .. }));
            let journal = position(&|s| matches!(s, Step::BeginConfig | Step::BeginSwaps));
            let context = format!("{input:?} -> {steps:?}");
            if input.failed {
                assert!(
                    steps.iter().all(|s| matches!(s, Step::RemoveLabels(_))),
                    "{context}"
                );
                continue;
            }
            if input.txn_rolling_back {
                assert!(steps.contains(&Step::FinishRollback), "{context}");
                assert!(set.is_none() && restart.is_none(), "{context}");
                continue;
            }
            // Removal first; labels only after a verification.
            if let Some(removed) = removed {
                assert_eq!(removed, 0, "{context}");
            }
            if let Some(set) = set {
                let verified_at = restart.or(verify);
                assert!(
                    verified_at.is_some_and(|v| v < set) || facts.verified,
                    "{context}"
                );
            }
            // Never write without journaling first, never restart without validating a write.
            if let Some(write) = write {
                assert!(begin.is_some_and(|b| b < write), "{context}");
                assert!(validate.is_some_and(|v| v > write), "{context}");
            }
            if let Some(restart) = restart {
                assert!(
                    validate.is_some_and(|v| v < restart) || input.txn_validated,
                    "{context}"
                );
            }
            // A restart happens exactly when the config changes or a config change is pending;
            // a pending journal of switches only is settled by a verification.
            assert_eq!(
                restart.is_some(),
                input.config_changed || (input.txn_pending && !input.txn_switches_only),
                "{context}"
            );
            if input.txn_pending && !input.config_changed && input.txn_switches_only {
                assert!(verify.is_some(), "{context}");
            }
            // Every symlink switch is undoable: journaled before, or part of a pending journal,
            // and proven by a verification or a restart afterwards.
            if let Some(swap) = swap {
                assert!(
                    journal.is_some_and(|j| j < swap) || input.txn_pending,
                    "{context}"
                );
                assert!(restart.or(verify).is_some_and(|v| v > swap), "{context}");
            }
            // Binaries are in place before the symlink points at them and before any restart.
            if let (Some(stage), Some(swap)) = (stage, swap) {
                assert!(stage < swap, "{context}");
            }
            if let (Some(swap), Some(restart)) = (swap, restart) {
                assert!(swap < restart, "{context}");
            }
            assert_eq!(steps.last(), Some(&Step::CollectGarbage), "{context}");
            // Afterwards the shim is labelled: kept, or set after a verification.
            let kept = input.labels.contains_key(&ready_label("spin"))
                && !steps
                    .iter()
                    .any(|s| matches!(s, Step::RemoveLabels(keys) if keys.contains(&ready_label("spin"))));
            assert!(kept || set.is_some(), "{context}");
        }
    }
}
