//! Payloads: fetching the versioned directories the plan stages, renaming them into place,
//! pointing the stable symlinks at them, and collecting the versions nobody needs any more.

use std::collections::{BTreeMap, BTreeSet};

use crate::installer::cluster::Cluster;
use crate::installer::error::InstallerError;
use crate::installer::payload::{self, Installed, PayloadSpec, inspect};
use crate::installer::plan::Step;
use crate::installer::state::Phase;

use super::Installer;
use super::facts::Facts;
use super::run_state::{Run, shim_entry};

impl<C: Cluster> Installer<C> {
    /// Fetches and verifies every missing file before the first change, when the plan stages
    /// anything: a checksum mismatch or a missing artifact then stops a run that changed nothing.
    pub(super) async fn fetch_payloads(
        &self,
        run: &mut Run<'_>,
        facts: &Facts,
        steps: &[Step],
    ) -> Result<(), InstallerError> {
        if !steps.iter().any(|s| matches!(s, Step::Stage(_))) {
            return Ok(());
        }
        let host = &*self.host;
        let layout = &self.settings.layout;
        let inspected: Vec<(PayloadSpec, Installed)> = facts
            .specs
            .iter()
            .map(|spec| Ok((spec.clone(), inspect(host, layout, spec)?)))
            .collect::<Result<_, InstallerError>>()?;
        let fetched =
            payload::fetch_all(host, layout, self.downloader.as_ref(), &inspected).await?;
        run.fetched = Some(fetched);
        Ok(())
    }

    /// Renames what was fetched into place.
    pub(super) fn commit_staged(&mut self, run: &mut Run<'_>) -> Result<(), InstallerError> {
        if let Some(fetched) = run.fetched.take() {
            fetched.commit(&*self.host)?;
        }
        self.checkpoint()
    }

    /// Points a shim's stable symlink at a version and records it.
    pub(super) fn swap(
        &mut self,
        run: &mut Run<'_>,
        shim: &str,
        dir: &str,
    ) -> Result<(), InstallerError> {
        payload::swap(&*self.host, &self.settings.layout, shim, dir)?;
        run.record_swap(shim, dir, self.settings.rollback_window)?;
        self.store(&run.state)
    }

    /// Removes the stable symlink of a shim that is gone.
    pub(super) fn unlink(&mut self, shim: &str) -> Result<(), InstallerError> {
        let link = self.settings.layout.current(shim);
        self.host
            .remove_file(&link)
            .map_err(|err| InstallerError::host("remove symlink", &link, err))?;
        self.checkpoint()
    }

    /// Removes versions nobody needs; forgets shims that left nothing behind. Returns the
    /// versions kept only because running processes use them.
    pub(super) fn collect_garbage(
        &mut self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<Vec<String>, InstallerError> {
        let host = self.host.clone();
        let layout = self.settings.layout.clone();
        let mut keep = versions_to_keep(run, &facts.specs, self.settings.rollback_window);
        // A shim that is gone but still linked keeps the version its link points at: pods of its
        // handler still run, and containerd needs its files to stop them.
        for name in &facts.gone {
            if let Some(dir) = payload::current_dir(&*host, &layout, name)? {
                keep.entry(name.clone()).or_default().insert(dir);
            }
        }
        let running = host
            .running_executables()
            .map_err(|err| InstallerError::host("list processes", "/proc", err))?;
        let report =
            payload::collect_garbage(&*host, &layout, &keep, &running, &mut || self.checkpoint())?;
        if !report.removed.is_empty() {
            tracing::info!(removed = ?report.removed, "removed unused shim versions");
        }
        self.forget_removed(run);
        Ok(report
            .in_use
            .iter()
            .map(|p| p.display().to_string())
            .collect())
    }

    /// Forgets what is gone for good; keeps remembering shims with versions still in use (and
    /// prunes the rollback window of selected shims to versions that still exist).
    fn forget_removed(&self, run: &mut Run<'_>) {
        let host = &*self.host;
        let layout = &self.settings.layout;
        let state = &mut run.state;
        let names: Vec<String> = state.shims.keys().cloned().collect();
        for name in names {
            if run.selection.contains(&name) {
                if let Some(entry) = state.shims.get_mut(&name) {
                    let versions = host.list_dir(&layout.versions(&name)).unwrap_or_default();
                    entry.previous.retain(|dir| versions.contains(dir));
                }
                continue;
            }
            let left = host.list_dir(&layout.versions(&name)).unwrap_or_default();
            let linked = host.info(&layout.current(&name)).ok().flatten().is_some();
            let owned = state.ownership.handlers().any(|h| {
                state
                    .shims
                    .get(&name)
                    .is_some_and(|s| s.handler == h.handler)
            });
            if left.is_empty() && !linked && !owned {
                state.shims.remove(&name);
            } else if let Some(entry) = state.shims.get_mut(&name) {
                entry.phase = Phase::Uninstalling;
                entry.active = None;
                entry.previous = left;
            }
        }
    }

    /// Records, per selected shim, the version its stable symlink points at when that is the
    /// desired one (a swap an earlier run made but could not record).
    pub(super) fn record_active_versions(
        &self,
        run: &mut Run<'_>,
        facts: &Facts,
    ) -> Result<(), InstallerError> {
        for ((shim, hash), spec) in run.selection.shims.iter().zip(&facts.specs) {
            if payload::current_dir(&*self.host, &self.settings.layout, &shim.name)?.as_deref()
                == Some(spec.dir.as_str())
            {
                let entry = shim_entry(&mut run.state, shim, hash);
                if entry.active.as_deref() != Some(spec.dir.as_str()) {
                    entry.active = Some(spec.dir.clone());
                }
            }
        }
        Ok(())
    }
}

/// Per selected shim: the version it needs, the active one and the rollback window.
fn versions_to_keep(
    run: &Run<'_>,
    specs: &[PayloadSpec],
    window: usize,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut keep: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((shim, _), spec) in run.selection.shims.iter().zip(specs) {
        let kept = keep.entry(shim.name.clone()).or_default();
        kept.insert(spec.dir.clone());
        if let Some(entry) = run.state.shims.get(&shim.name) {
            kept.extend(entry.active.iter().cloned());
            kept.extend(entry.previous.iter().take(window).cloned());
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        Bed, STATE_DIR, desired, facts_for, node, recorded, run_of, shim,
    };
    use super::*;
    use crate::installer::containerd::{FileRole, KeyPath, OwnedFile, OwnedHandler, Ownership};
    use crate::installer::host::Host;
    use crate::installer::state::{ShimState, State};

    fn versioned(active: &str, previous: &[&str]) -> ShimState {
        ShimState {
            active: Some(active.into()),
            previous: previous.iter().map(|p| p.to_string()).collect(),
            ..recorded("spin", "h")
        }
    }

    #[test]
    fn the_needed_active_and_windowed_versions_are_kept() {
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut state = State::new();
        state
            .shims
            .insert("spin".into(), versioned("v2", &["v1", "v0", "older"]));
        let run = run_of(&set, state, &[]);
        let facts = facts_for(&run, "v3", &[]);
        let keep = versions_to_keep(&run, &facts.specs, 2);
        let names = |shim: &str| keep[shim].iter().cloned().collect::<Vec<_>>();
        assert_eq!(names("spin"), ["v0", "v1", "v2", "v3"]);
        assert_eq!(names("wasm"), ["v3"]);
    }

    #[test]
    fn garbage_collection_removes_what_nobody_needs_and_forgets_what_left_nothing() {
        let mut bed = Bed::new(node(&[]));
        for dir in ["v0", "v1", "v2", "v3", "v4", "v5"] {
            bed.version("spin", dir);
        }
        let running = bed
            .host
            .start_process(format!("{STATE_DIR}/versions/spin/v5/bin/shim"))
            .unwrap();
        bed.version("linked", "v1");
        bed.version("linked", "v2");
        bed.link("linked", "v1");
        let set = desired(vec![shim("spin", "spin")]);
        let mut state = State::new();
        state
            .shims
            .insert("spin".into(), versioned("v2", &["v1", "gone-already"]));
        state.shims.insert("linked".into(), recorded("linked", "h"));
        state.shims.insert("done".into(), recorded("done", "h"));
        state.shims.insert("owned".into(), recorded("owned", "h"));
        state.ownership = Ownership {
            files: vec![OwnedFile {
                handlers: vec![OwnedHandler {
                    handler: "owned".into(),
                    table: KeyPath::default(),
                    keys: vec![],
                    runtime_path: String::new(),
                    managed_key: Default::default(),
                    runtime_type: String::new(),
                }],
                ..OwnedFile::new("/etc/containerd/config.toml", FileRole::Config)
            }],
        };
        let mut run = run_of(&set, state, &[]);
        let facts = facts_for(&run, "v3", &["linked", "done", "owned"]);
        let retained = bed.installer.collect_garbage(&mut run, &facts).unwrap();

        assert_eq!(retained, [format!("{STATE_DIR}/versions/spin/v5")]);
        let left = |shim: &str| {
            bed.host
                .list_dir(&bed.installer.settings.layout.versions(shim))
                .unwrap()
        };
        // v3 is needed, v2 active, v1 in the window, v5 running; v0 and v4 go.
        assert_eq!(left("spin"), ["v1", "v2", "v3", "v5"]);
        assert_eq!(
            left("linked"),
            ["v1"],
            "pods may still run on the linked version"
        );
        let shims = &run.state.shims;
        assert_eq!(
            shims["spin"].previous,
            ["v1"],
            "the window lists what exists"
        );
        assert_eq!(shims["linked"].phase, Phase::Uninstalling);
        assert_eq!(shims["linked"].previous, ["v1"]);
        assert_eq!(shims["linked"].active, None);
        assert!(!shims.contains_key("done"), "nothing left, forgotten");
        assert_eq!(
            shims["owned"].phase,
            Phase::Uninstalling,
            "still configured"
        );
        bed.host.stop_process(running);
    }

    #[test]
    fn a_swap_points_the_link_and_records_the_version() {
        let mut bed = Bed::new(node(&[]));
        bed.version("spin", "v1");
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        bed.installer.swap(&mut run, "spin", "v1").unwrap();
        assert_eq!(
            std::fs::read_link(bed.path(&format!("{STATE_DIR}/current/spin"))).unwrap(),
            std::path::PathBuf::from("../versions/spin/v1")
        );
        assert_eq!(run.state.shims["spin"].active.as_deref(), Some("v1"));
        assert_eq!(bed.stored(), Some(run.state.clone()));

        bed.installer.unlink("spin").unwrap();
        assert!(!bed.path(&format!("{STATE_DIR}/current/spin")).exists());
    }

    #[test]
    fn a_link_an_earlier_run_swapped_is_recorded_as_active() {
        let bed = Bed::new(node(&[]));
        bed.link("spin", "v2");
        bed.link("wasm", "v1");
        let set = desired(vec![shim("spin", "spin"), shim("wasm", "wasm")]);
        let mut run = run_of(&set, State::new(), &[]);
        let facts = facts_for(&run, "v2", &[]);
        bed.installer
            .record_active_versions(&mut run, &facts)
            .unwrap();
        assert_eq!(run.state.shims["spin"].active.as_deref(), Some("v2"));
        assert!(
            !run.state.shims.contains_key("wasm"),
            "its link points at another version"
        );
    }

    #[tokio::test]
    async fn nothing_is_fetched_when_nothing_is_staged() {
        let bed = Bed::new(node(&[]));
        let set = desired(vec![shim("spin", "spin")]);
        let mut run = run_of(&set, State::new(), &[]);
        let facts = facts_for(&run, "v1", &[]);
        bed.installer
            .fetch_payloads(&mut run, &facts, &[Step::CollectGarbage])
            .await
            .unwrap();
        assert!(run.fetched.is_none());
    }
}
