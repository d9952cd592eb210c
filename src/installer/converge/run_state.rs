//! The one value a run carries through its phases. Gathering reads the host into `Facts`
//! (never changed afterwards); everything the phases change as they go — the state record, the
//! node's labels, fetched payloads, whether containerd restarted, what garbage collection kept —
//! lives in [`Run`], so each phase takes the run instead of a handful of out-parameters, and the
//! outcome is computed from it alone.

use std::collections::BTreeMap;

use crate::desired_shims::DesiredShim;
use crate::installer::containerd::Plan;
use crate::installer::error::InstallerError;
use crate::installer::payload::Fetched;
use crate::installer::state::{Failure, Phase, ShimState, State};

use super::selection::Selection;

/// See the module documentation.
pub(super) struct Run<'a> {
    pub selection: Selection<'a>,
    /// The state file as this run found it: the record is written back only when it differs.
    pub loaded: State,
    /// The record as this run changed it so far; stored before and after every change.
    pub state: State,
    /// The node's labels, kept in step with every patch this run makes.
    pub labels: BTreeMap<String, String>,
    /// Payloads fetched and verified but not yet renamed into place; a run that fails before
    /// its stage step discards them.
    pub fetched: Option<Fetched>,
    pub restarted: bool,
    /// Versions garbage collection kept because running processes use them.
    pub retained: Vec<String>,
    /// Why shims that are gone still have files here (pods of their handlers run).
    pub waiting: Vec<String>,
}

impl<'a> Run<'a> {
    pub fn new(selection: Selection<'a>, loaded: State, labels: BTreeMap<String, String>) -> Self {
        Run {
            selection,
            state: loaded.clone(),
            loaded,
            labels,
            fetched: None,
            restarted: false,
            retained: Vec::new(),
            waiting: Vec::new(),
        }
    }

    /// Whether this exact desired set already failed on this node.
    pub fn failed_before(&self) -> bool {
        self.selection.failed_before(&self.state)
    }

    /// Settles the record before the first step: an earlier failure belonged to another desired
    /// set, and with no config change in flight the engine's record is the one just planned.
    pub fn start(&mut self, config: &Plan) {
        self.state.failure = None;
        if !config.changed && self.state.config.is_none() {
            // Stored on every run, also when nothing changed: after a lost state file it is how
            // adopted tables become ours again.
            self.state.ownership = config.ownership.clone();
        }
    }

    /// Records that `shim`'s stable symlink now points at `dir`, keeping the version it pointed
    /// at before in the rollback window (most recent first, at most `window`).
    pub fn record_swap(
        &mut self,
        shim: &str,
        dir: &str,
        window: usize,
    ) -> Result<(), InstallerError> {
        let (desired, hash) =
            self.selection
                .find(shim)
                .ok_or_else(|| InstallerError::InvalidShim {
                    shim: shim.to_string(),
                    message: "swapped but not selected".into(),
                })?;
        let entry = shim_entry(&mut self.state, desired, hash);
        if let Some(old) = entry.active.replace(dir.to_string())
            && old != dir
        {
            entry.previous.retain(|p| p != &old && p != dir);
            entry.previous.insert(0, old);
            entry.previous.truncate(window);
        }
        Ok(())
    }

    /// Records that `shim`'s stable symlink was pointed back at `dir` (a swap undone): the
    /// version it points at is the active one again, and no longer in the rollback window.
    pub fn record_swap_back(&mut self, shim: &str, dir: Option<String>) {
        if let Some(entry) = self.state.shims.get_mut(shim) {
            if let Some(dir) = &dir {
                entry.previous.retain(|p| p != dir);
            }
            entry.active = dir;
        }
    }

    /// Every selected shim is now served by containerd as desired.
    pub fn mark_verified(&mut self, now: jiff::Timestamp) {
        for (shim, hash) in &self.selection.shims {
            let entry = shim_entry(&mut self.state, shim, hash);
            entry.handler = shim.handler.clone();
            entry.desired_hash = hash.clone();
            entry.phase = Phase::Active;
            entry.verified_hash = Some(hash.clone());
            entry.verified_at = Some(now);
            entry.last_error = None;
        }
    }

    /// Records the failure of this desired set against `shims` (the ones the failed change
    /// touched); the same set is not retried until it changes.
    pub fn mark_failed(&mut self, shims: &[String], error: &str, now: jiff::Timestamp) {
        self.state.failure = Some(Failure {
            node_hash: self.selection.node_hash.clone(),
            error: error.to_string(),
            at: now,
        });
        for name in shims {
            if let Some(entry) = self.state.shims.get_mut(name) {
                entry.phase = Phase::Failed;
                entry.last_error = Some(error.to_string());
                if let Some((_, hash)) = self.selection.find(name) {
                    entry.desired_hash = hash.clone();
                }
            }
        }
    }
}

/// The record of a selected shim, created as installing when there is none.
pub(super) fn shim_entry<'s>(
    state: &'s mut State,
    shim: &DesiredShim,
    hash: &str,
) -> &'s mut ShimState {
    state
        .shims
        .entry(shim.name.clone())
        .or_insert_with(|| ShimState {
            handler: shim.handler.clone(),
            desired_hash: hash.to_string(),
            phase: Phase::Installing,
            active: None,
            previous: Vec::new(),
            verified_hash: None,
            verified_at: None,
            last_error: None,
        })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{config_plan, desired, owned, recorded, run_of, shim, txn};
    use super::*;

    #[test]
    fn a_swap_keeps_the_version_it_replaced_within_the_window() {
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        for dir in ["v1", "v2", "v3", "v4"] {
            run.record_swap("spin", dir, 2).unwrap();
        }
        let entry = &run.state.shims["spin"];
        assert_eq!(entry.active.as_deref(), Some("v4"));
        assert_eq!(entry.previous, ["v3", "v2"]);
        assert_eq!(entry.phase, Phase::Installing);

        // Back to a version in the window: it leaves the window, the one replaced enters it.
        run.record_swap("spin", "v2", 2).unwrap();
        assert_eq!(run.state.shims["spin"].previous, ["v4", "v3"]);
        // The same directory again changes nothing.
        run.record_swap("spin", "v2", 2).unwrap();
        assert_eq!(run.state.shims["spin"].previous, ["v4", "v3"]);

        let err = run.record_swap("other", "v1", 2).unwrap_err();
        assert!(
            err.to_string().contains("swapped but not selected"),
            "{err}"
        );
    }

    #[test]
    fn verification_and_failure_are_recorded_per_selected_shim() {
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut state = State::new();
        state
            .shims
            .insert("spin".into(), recorded("old-handler", "old"));
        state.shims.insert("gone".into(), recorded("gone", "g"));
        let mut run = run_of(&set, state, &[]);
        let now = jiff::Timestamp::UNIX_EPOCH;
        run.mark_verified(now);
        for (shim, hash) in &run.selection.shims {
            let entry = &run.state.shims[&shim.name];
            assert!(entry.verified_for(hash), "{}", shim.name);
            assert_eq!(entry.handler, shim.handler);
            assert_eq!(entry.verified_at, Some(now));
        }
        assert_eq!(run.state.shims["gone"].desired_hash, "g", "not selected");

        run.mark_failed(
            &["wasm".into(), "gone".into(), "unknown".into()],
            "boom",
            now,
        );
        let failure = run.state.failure.as_ref().unwrap();
        assert_eq!(failure.node_hash, run.selection.node_hash);
        assert_eq!(failure.error, "boom");
        assert!(run.failed_before());
        assert_eq!(run.state.shims["spin"].phase, Phase::Active, "untouched");
        for name in ["wasm", "gone"] {
            assert_eq!(run.state.shims[name].phase, Phase::Failed, "{name}");
            assert_eq!(run.state.shims[name].last_error.as_deref(), Some("boom"));
        }
        assert!(!run.state.shims.contains_key("unknown"));
    }

    #[test]
    fn starting_forgets_an_old_failure_and_adopts_the_planned_record_when_idle() {
        let set = desired(vec![shim("spin", "spin")]);
        let mut state = State::new();
        state.failure = Some(Failure {
            node_hash: "another set".into(),
            error: "boom".into(),
            at: jiff::Timestamp::UNIX_EPOCH,
        });
        let mut run = run_of(&set, state, &[]);
        assert!(!run.failed_before());
        let mut planned = config_plan(false);
        planned.ownership = owned("/etc/containerd/config.toml");
        run.start(&planned);
        assert!(run.state.failure.is_none());
        assert_eq!(run.state.ownership, planned.ownership);
        assert_eq!(run.loaded.failure.as_ref().unwrap().error, "boom");

        // A change to make, or one in flight, keeps the record until the change settles it.
        let mut changing = run_of(&set, State::new(), &[]);
        let mut change = config_plan(true);
        change.ownership = owned("/etc/containerd/config.toml");
        changing.start(&change);
        assert!(changing.state.ownership.is_empty());
        let mut in_flight = run_of(&set, State::new(), &[]);
        in_flight.state.config = Some(txn());
        in_flight.start(&planned);
        assert!(in_flight.state.ownership.is_empty());
    }
}
