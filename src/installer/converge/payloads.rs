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
