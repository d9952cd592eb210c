//! Gathering: everything the plan depends on, read before anything is changed — the
//! containerd release, each selected shim's payload and runtime entry, the engine's config plan
//! (with the baseline dump it is validated against), the shims that are gone, and from all of
//! it the plan's input. A run that stops here has changed nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::installer::cluster::Cluster;
use crate::installer::containerd::{
    BASELINE_SUFFIX, ContainerdVersion, EffectiveConfig, ExpectedRuntime, Plan, RuntimeEntry,
    locate, plan_install, plan_install_keeping, plan_uninstall,
};
use crate::installer::error::InstallerError;
use crate::installer::host::HostError;
use crate::installer::payload::{self, Installed, PayloadSpec, inspect};
use crate::installer::plan::{GoneFacts, PlanInput, ShimFacts};
use crate::installer::state::{ConfigTxn, ShimState, State, TxnPhase};

use super::Installer;
use super::run_state::Run;
use super::selection::Selection;

/// What the host said when the run began; the phases read it, none changes it.
pub(super) struct Facts {
    /// Per selected shim, in the selection's order.
    pub specs: Vec<PayloadSpec>,
    /// Per selected shim, in the selection's order.
    pub runtimes: Vec<RuntimeEntry>,
    /// The engine's plan for containerd's configuration.
    pub config: Plan,
    /// Shims that are no longer selected but left a record or a stable symlink behind.
    pub gone: Vec<String>,
}

impl Facts {
    pub fn runtimes_expected(&self) -> Vec<ExpectedRuntime> {
        self.runtimes.iter().map(ExpectedRuntime::of).collect()
    }
}

impl<C: Cluster> Installer<C> {
    /// The node's containerd release, as its binary reports it.
    pub(super) fn containerd_release(&self) -> Result<ContainerdVersion, InstallerError> {
        let version_text = self
            .host
            .containerd_version()
            .map_err(|err| InstallerError::command("containerd --version", err))?;
        Ok(ContainerdVersion::parse(&version_text)?)
    }

    /// Reads everything the plan depends on; changes nothing.
    pub(super) fn gather(&self, run: &Run<'_>) -> Result<Facts, InstallerError> {
        let containerd = self.containerd_release()?;
        containerd.ensure_supported()?;
        let (specs, runtimes) = self.resolve_payloads(&run.selection, containerd)?;
        let config = self.plan_config(containerd, &runtimes, &run.state)?;
        let current_root = self.settings.layout.current_root();
        let linked = self
            .host
            .list_dir(&current_root)
            .map_err(|err| InstallerError::host("list", &current_root, err))?;
        Ok(Facts {
            specs,
            runtimes,
            config,
            gone: gone_shims(&run.selection, &run.state, linked),
        })
    }

    /// Each selected shim's payload (checked against its digests) and its runtime entry.
    fn resolve_payloads(
        &self,
        selection: &Selection<'_>,
        containerd: ContainerdVersion,
    ) -> Result<(Vec<PayloadSpec>, Vec<RuntimeEntry>), InstallerError> {
        let layout = &self.settings.layout;
        let mut specs = Vec::new();
        let mut runtimes = Vec::new();
        for (shim, _) in &selection.shims {
            let spec = payload::resolve(
                shim,
                selection.arch,
                &self.settings.staging_dir,
                layout,
                &self.digests,
            )?;
            let first = shim
                .binaries
                .first()
                .map(|b| b.name.clone())
                .unwrap_or_default();
            runtimes.push(
                RuntimeEntry::from_desired(
                    shim,
                    &layout.runtime_path(&shim.name, &first),
                    &layout.config_dir(&shim.name),
                    &layout.bin_dir(&shim.name),
                )?
                .for_containerd(containerd),
            );
            specs.push(spec);
        }
        Ok((specs, runtimes))
    }

    /// The engine's plan: remove ours when nothing is selected, else install exactly these
    /// runtimes; a change gets the baseline its validation compares with.
    fn plan_config(
        &self,
        containerd: ContainerdVersion,
        runtimes: &[RuntimeEntry],
        state: &State,
    ) -> Result<Plan, InstallerError> {
        let host = &*self.host;
        let mut config = if runtimes.is_empty() {
            plan_uninstall(host, containerd, &state.ownership)?
        } else {
            let target = locate(host, containerd, self.settings.config_override.as_deref())?;
            let plan = plan_install(host, &target, runtimes, &state.ownership)?;
            if plan.changed && !containerd.keeps_implicit_runtimes() {
                // containerd 1.x drops runtimes it provides implicitly once a file defines
                // one: the plan keeps them, from the effective configuration as it is now.
                let baseline = self.baseline(&plan)?;
                let mut ours: BTreeSet<String> =
                    runtimes.iter().map(|r| r.handler.clone()).collect();
                ours.extend(state.ownership.handlers().map(|h| h.handler.clone()));
                let kept = match &baseline {
                    Some((config, dump)) => {
                        EffectiveConfig::parse(config, containerd, dump)?.runtimes_to_keep(&ours)
                    }
                    None => Vec::new(),
                };
                plan_install_keeping(host, &target, runtimes, &state.ownership, Some(&kept))?
            } else {
                plan
            }
        };
        if config.changed
            && config
                .validation
                .as_ref()
                .is_some_and(|v| v.baseline.is_none())
        {
            let baseline = self.baseline(&config)?;
            if let (Some(validation), Some((_, dump))) = (config.validation.as_mut(), baseline) {
                validation.baseline = Some(dump);
            }
        }
        Ok(config)
    }

    /// `containerd config dump` of the configuration the plan's validation will dump, as it is
    /// now, before anything is written: what the candidate is compared with. A config file
    /// that does not exist yet means containerd's defaults (dumped from an empty file, because
    /// containerd 1.x refuses a missing `--config`). `None` for a plan whose validation dumps a
    /// rendered template (the distribution renders it; nothing here is its baseline).
    fn baseline(&self, plan: &Plan) -> Result<Option<(PathBuf, String)>, InstallerError> {
        let Some(validation) = plan.validation.as_ref().filter(|v| v.scratch.is_none()) else {
            return Ok(None);
        };
        let host = &*self.host;
        let config = validation.config.clone();
        let exists = host
            .exists(&config)
            .map_err(|err| InstallerError::host("inspect", &config, err))?;
        let dumped = if exists {
            config.clone()
        } else {
            let mut name = config.clone().into_os_string();
            name.push(BASELINE_SUFFIX);
            let empty = PathBuf::from(name);
            if let Some(parent) = empty.parent() {
                host.create_dir_all(parent)
                    .map_err(|err| InstallerError::host("create directory", parent, err))?;
            }
            host.write_file(&empty, b"", 0o600)
                .map_err(|err| InstallerError::host("write", &empty, err))?;
            empty
        };
        let output = host.config_dump(&dumped);
        if !exists {
            host.remove_file(&dumped)
                .map_err(|err| InstallerError::host("remove", &dumped, err))?;
        }
        let command = format!("containerd --config {} config dump", dumped.display());
        let output = output.map_err(|err| InstallerError::command(command.clone(), err))?;
        if output.exit_code != Some(0) {
            return Err(InstallerError::command(
                command,
                HostError::ConfigDoesNotLoad {
                    exit_code: output.exit_code,
                    stderr: output.stderr.trim().to_string(),
                },
            ));
        }
        Ok(Some((config, output.stdout)))
    }

    /// The plan's input: the facts, the state record and the labels, per shim.
    pub(super) fn plan_input(
        &self,
        run: &Run<'_>,
        facts: &Facts,
    ) -> Result<PlanInput, InstallerError> {
        let host = &*self.host;
        let layout = &self.settings.layout;
        let state = &run.state;
        let mut shims = Vec::new();
        for ((shim, hash), spec) in run.selection.shims.iter().zip(&facts.specs) {
            let recorded = state.shims.get(&shim.name);
            shims.push(ShimFacts {
                name: shim.name.clone(),
                handler: shim.handler.clone(),
                dir: spec.dir.clone(),
                staged: inspect(host, layout, spec)? == Installed::Complete,
                current: payload::current_dir(host, layout, &shim.name)?,
                verified: recorded.is_some_and(|s| s.verified_for(hash)),
                verified_before: recorded.is_some_and(|s| serves_earlier(s, &shim.handler)),
            });
        }
        let txn = state.config.as_ref();
        Ok(PlanInput {
            shims,
            gone: self.gone_facts(run, facts)?,
            labels: run.labels.clone(),
            config_changed: facts.config.changed,
            txn_pending: txn.is_some(),
            txn_validated: txn
                .is_some_and(|t| matches!(t.phase, TxnPhase::Validated | TxnPhase::Restarting)),
            txn_rolling_back: txn.is_some_and(|t| matches!(t.phase, TxnPhase::RollingBack { .. })),
            txn_switches_only: txn.is_some_and(ConfigTxn::switches_only),
            failed: false,
        })
    }

    /// Per gone shim: whether its stable symlink is still there, and how many pods still use
    /// its handler (only a linked shim can still serve pods).
    fn gone_facts(&self, run: &Run<'_>, facts: &Facts) -> Result<Vec<GoneFacts>, InstallerError> {
        let host = &*self.host;
        let mut gone = Vec::new();
        for name in &facts.gone {
            let link = self.settings.layout.current(name);
            let linked = host
                .info(&link)
                .map_err(|err| InstallerError::host("inspect", &link, err))?
                .is_some();
            let in_use = match run.selection.handler_of(name, &run.state) {
                Some(handler) if linked => host
                    .sandboxes_with_handler(&handler)
                    .map_err(|err| InstallerError::command("crictl pods", err))?
                    .unwrap_or(0),
                _ => 0,
            };
            gone.push(GoneFacts {
                name: name.clone(),
                linked,
                in_use,
            });
        }
        Ok(gone)
    }
}

/// Whether containerd was verified to serve an earlier description of this shim under this
/// handler, and a failure since did not take it away. A failure that leaves the handler
/// unserved (a config change rolled back with a restart, a failed repair) withdraws its label
/// before it is recorded; one that leaves the earlier description serving (a version swapped
/// back, a config the dump refused before containerd read it) keeps it.
fn serves_earlier(recorded: &ShimState, handler: &str) -> bool {
    recorded.verified_hash.is_some() && recorded.handler == handler
}

/// The plan's input for a desired set that already failed on this node: only labels are
/// decided, keeping those of shims the failed change did not touch (they still run verified)
/// and of shims whose earlier, verified description still serves (a version swapped back).
pub(super) fn failed_plan_input(run: &Run<'_>) -> PlanInput {
    let shims = run
        .selection
        .shims
        .iter()
        .map(|(shim, hash)| ShimFacts {
            name: shim.name.clone(),
            handler: shim.handler.clone(),
            dir: String::new(),
            staged: false,
            current: None,
            verified: run
                .state
                .shims
                .get(&shim.name)
                .is_some_and(|s| s.verified_for(hash) || serves_earlier(s, &shim.handler)),
            verified_before: false,
        })
        .collect();
    PlanInput {
        shims,
        labels: run.labels.clone(),
        failed: true,
        ..PlanInput::default()
    }
}

/// Shims that are not selected but are recorded, or have a stable symlink (`<name>.new` is an
/// interrupted swap's leftover, not a shim). Sorted, each once.
fn gone_shims(selection: &Selection<'_>, state: &State, linked: Vec<String>) -> Vec<String> {
    let mut gone: BTreeSet<String> = state
        .shims
        .keys()
        .filter(|name| !selection.contains(name))
        .cloned()
        .collect();
    for entry in linked {
        if !entry.ends_with(".new") && !selection.contains(&entry) {
            gone.insert(entry);
        }
    }
    gone.into_iter().collect()
}

/// Why gone shims still have files here, for the status message.
pub(super) fn waiting_notes(gone: &[GoneFacts]) -> Vec<String> {
    gone.iter()
        .filter(|gone| gone.linked && gone.in_use > 0)
        .map(|gone| {
            format!(
                "shim {} stays while {} pod(s) of its runtime handler run",
                gone.name, gone.in_use
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        Bed, config_plan, desired, facts_for, node, recorded, run_of, shim, txn,
    };
    use super::*;
    use crate::desired_shims::{DesiredShims, Rollout, ready_label};
    use crate::installer::plan::{Step, plan};
    use crate::installer::state::Phase;

    fn uninstall() -> DesiredShims {
        DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        })
    }

    #[test]
    fn gone_shims_are_recorded_or_linked_and_not_selected() {
        let set = desired(vec![shim("spin", "spin")]);
        let mut state = State::new();
        state.shims.insert("spin".into(), recorded("spin", "h"));
        state.shims.insert("old".into(), recorded("old", "h"));
        let run = run_of(&set, state, &[]);
        let linked = ["spin", "wasm", "wasm.new", "old"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            gone_shims(&run.selection, &run.state, linked),
            ["old", "wasm"]
        );
    }

    #[test]
    fn only_linked_shims_with_pods_are_waited_for() {
        let gone = |name: &str, linked, in_use| GoneFacts {
            name: name.into(),
            linked,
            in_use,
        };
        let notes = waiting_notes(&[gone("a", true, 2), gone("b", true, 0), gone("c", false, 3)]);
        assert_eq!(
            notes,
            ["shim a stays while 2 pod(s) of its runtime handler run"]
        );
    }

    #[test]
    fn a_failed_set_plans_only_withdrawing_the_labels_of_shims_nothing_verified_serves() {
        let set = desired(vec![
            shim("spin", "spin"),
            shim("wasm", "wasm"),
            shim("wamr", "wamr"),
        ]);
        let [spin, wasm, wamr] = ["spin", "wasm", "wamr"].map(ready_label);
        let mut run = run_of(
            &set,
            State::new(),
            &[(&spin, "ready"), (&wasm, "ready"), (&wamr, "ready")],
        );
        let hash = run.selection.find("spin").unwrap().1.clone();
        run.state
            .shims
            .insert("spin".into(), recorded("spin", &hash));
        // Its new version failed and was swapped back: the earlier, verified one serves.
        run.state.shims.insert(
            "wasm".into(),
            ShimState {
                phase: Phase::Failed,
                ..recorded("wasm", "an earlier description")
            },
        );
        // Failed without ever being verified here: nothing serves it.
        run.state.shims.insert(
            "wamr".into(),
            ShimState {
                phase: Phase::Failed,
                verified_hash: None,
                ..recorded("wamr", "its description")
            },
        );
        let input = failed_plan_input(&run);
        assert!(input.failed);
        let verified: Vec<bool> = input.shims.iter().map(|s| s.verified).collect();
        assert_eq!(verified, [true, true, false]);
        assert_eq!(plan(&input), [Step::RemoveLabels(vec![wamr])]);
    }

    #[test]
    fn an_unsupported_containerd_stops_gathering_with_nothing_changed() {
        let bed = Bed::new(node(&[]));
        bed.host
            .set_version_output("containerd github.com/containerd/containerd/v3 v3.0.0");
        let before = bed.tree();
        let set = desired(vec![shim("spin", "spin")]);
        let run = run_of(&set, State::new(), &[]);
        let err = bed.installer.gather(&run).err().unwrap().to_string();
        assert!(err.contains("v3.0.0"), "{err}");
        assert_eq!(bed.tree(), before);
    }

    #[test]
    fn a_missing_staged_binary_stops_gathering_with_nothing_changed() {
        let bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v2.1.0");
        let before = bed.tree();
        let set = desired(vec![shim("spin", "spin")]);
        let run = run_of(&set, State::new(), &[]);
        let err = bed.installer.gather(&run).err().unwrap().to_string();
        assert!(err.contains("containerd-shim-spin-v2"), "{err}");
        assert_eq!(bed.tree(), before);
    }

    #[test]
    fn a_config_that_cannot_be_dumped_stops_gathering_with_nothing_changed() {
        let bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v2.1.0");
        let staged = bed.dir.path().join("staging/spin");
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::write(staged.join("containerd-shim-spin-v2"), "binary").unwrap();
        std::fs::create_dir_all(bed.path("/etc/containerd")).unwrap();
        let before = bed.tree();
        let set = desired(vec![shim("spin", "spin")]);
        let run = run_of(&set, State::new(), &[]);
        // The host's containerd binary does not exist: the baseline dump fails, and the empty
        // file it dumps in place of the missing config is gone again.
        let err = bed.installer.gather(&run).err().unwrap().to_string();
        assert!(err.contains("config dump"), "{err}");
        assert_eq!(bed.tree(), before);
    }

    #[test]
    fn an_uninstall_on_a_clean_node_gathers_the_shims_left_behind() {
        let bed = Bed::new(node(&[]));
        bed.host.set_version_output("containerd v1.7.20");
        bed.link("stray", "v1");
        bed.link("stray.new", "v2");
        let mut state = State::new();
        state
            .shims
            .insert("stray".into(), recorded("stray-handler", "h"));
        state
            .shims
            .insert("old".into(), recorded("old-handler", "h"));
        bed.host.set_sandboxes("stray-handler", 2);
        bed.host.set_sandboxes("old-handler", 5);
        let set = uninstall();
        let run = run_of(&set, state, &[]);
        let facts = bed.installer.gather(&run).unwrap();
        assert!(!facts.config.changed);
        assert!(facts.specs.is_empty() && facts.runtimes.is_empty());
        assert_eq!(facts.gone, ["old", "stray"]);

        let input = bed.installer.plan_input(&run, &facts).unwrap();
        // Only a linked shim can still serve pods.
        let gone: Vec<(&str, bool, usize)> = input
            .gone
            .iter()
            .map(|g| (g.name.as_str(), g.linked, g.in_use))
            .collect();
        assert_eq!(gone, [("old", false, 0), ("stray", true, 2)]);
        assert!(input.shims.is_empty());
    }

    #[test]
    fn the_plan_input_reads_staging_links_verification_and_the_journal() {
        let bed = Bed::new(node(&[]));
        bed.version("spin", "v2-new");
        bed.link("spin", "v1-old");
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut state = State::new();
        // Verified with an earlier description: the label may stay during the upgrade.
        state
            .shims
            .insert("spin".into(), recorded("spin", "earlier"));
        let mut run = run_of(&set, state, &[]);
        let mut facts = facts_for(&run, "v2-new", &[]);
        facts.config = config_plan(true);
        let input = bed.installer.plan_input(&run, &facts).unwrap();
        let spin = &input.shims[0];
        assert!(spin.staged);
        assert_eq!(spin.current.as_deref(), Some("v1-old"));
        assert!(!spin.verified && spin.verified_before);
        let wasm = &input.shims[1];
        assert!(!wasm.staged && wasm.current.is_none() && !wasm.verified_before);
        assert!(input.config_changed);
        assert!(!input.txn_pending);

        for (phase, validated, rolling_back) in [
            (TxnPhase::Writing, false, false),
            (TxnPhase::Validated, true, false),
            (TxnPhase::Restarting, true, false),
            (
                TxnPhase::RollingBack {
                    error: "boom".into(),
                },
                false,
                true,
            ),
        ] {
            run.state.config = Some(crate::installer::state::ConfigTxn { phase, ..txn() });
            let input = bed.installer.plan_input(&run, &facts).unwrap();
            assert!(input.txn_pending);
            assert_eq!(
                (input.txn_validated, input.txn_rolling_back),
                (validated, rolling_back)
            );
        }
    }
}
