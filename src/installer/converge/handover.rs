//! A node whose shoot switched from `delivery: daemonset` to `osc`: what the installer put on
//! the node itself is handed to gardener-node-agent without a moment in which a wanted handler
//! is not served.
//!
//! Until the agent has applied the pool's OperatingSystemConfig, the installer's own
//! installation keeps serving (it writes nothing; the follow run verifies and labels what
//! containerd serves). Once the main config holds the agent's table of every wanted shim the
//! installer installed (a table whose binary lies in the shim's directory below
//! `/var/bin/containerruntimes`), the installer removes its own part the way an uninstall
//! does, with two differences:
//!
//! - on containerd 1.x, where it edited the main config in place, the agent has written its
//!   values over the installer's keys: the record forgets those tables
//!   ([`Ownership::hand_over_in_place`]) instead of removing them;
//! - on containerd 2.x its drop-in, which containerd merges over the agent's table, is removed
//!   like any uninstall removes it: one restart within the restart budget, after which the
//!   agent's values serve.
//!
//! An installer pod of the previous (`daemonset`) bundle can still run on the node after the
//! agent applied the OSC there, until the DaemonSet's rolling update replaces it. On 1.x it
//! would take the agent's values in its in-place tables for drift and write its own back; its
//! run ([`Installer::run`]) leaves such a node as it is instead, labels included. The same
//! holds in the other direction, while the agent has not yet applied the `op: remove` of a
//! table the installer took over from it.
//!
//! The uninstall leaves the readiness labels of every handler the agent delivers to the follow
//! run, keeps a shim's files while pods of its handler run (pods started
//! on them need them to be stopped) and removes the installer's directory once nothing is
//! left.
//!
//! [`Ownership::hand_over_in_place`]: crate::installer::containerd::Ownership::hand_over_in_place

use std::collections::BTreeSet;

use crate::desired_shims::{DesiredShims, Mode, node_agent_shim_dir, ready_label};
use crate::installer::cluster::Cluster;
use crate::installer::containerd::{
    BACKUP_SUFFIX, FileRole, OwnedHandler, locate, node_agent_table, node_agent_values_in,
};
use crate::installer::error::InstallerError;
use crate::installer::state::{ShimState, State};
use crate::installer::status::NodeStatus;

use super::selection::select;
use super::{Installer, Outcome};

/// Where the hand-over stands on this node.
#[derive(Debug)]
pub(super) enum HandOver {
    /// Nothing of the installer's own is on the node.
    Nothing,
    /// The installer's installation still serves these shims: the agent has not applied them
    /// yet (or a configuration change of the installer's is still in flight).
    Waiting(Vec<String>),
    /// The installer removed its part (or is waiting for pods to release its files).
    Done(Outcome),
    /// The hand-over could not go on now; the installation stays as it is.
    Failed(String),
}

impl<C: Cluster> Installer<C> {
    /// Hands what the installer installed itself to gardener-node-agent once the agent serves
    /// every such shim that `desired` (delivered by the agent) still wants on this node.
    pub(super) async fn hand_over(
        &mut self,
        desired: &DesiredShims,
    ) -> Result<HandOver, InstallerError> {
        let path = self.state_path();
        let mut state = State::load(&*self.host, &path)?;
        if state.is_clean() {
            return Ok(HandOver::Nothing);
        }
        if state.config.is_some() {
            // Finishing or rolling back a journaled change restores bytes the agent may have
            // rewritten since; it stays for the installer's own delivery to settle.
            return Ok(HandOver::Waiting(state.shims.keys().cloned().collect()));
        }
        let labels = self.cluster.node_labels().await?;
        let wanted = select(desired, &labels);
        let still_wanted = state.shims.iter().filter(|(name, recorded)| {
            wanted
                .iter()
                .any(|s| &s.name == *name && s.handler == recorded.handler)
        });
        // Shims no longer wanted here are not waited for: the uninstall removes them as any
        // removal does.
        let (served, waiting) = self.node_agent_serves(&state, still_wanted)?;
        if !waiting.is_empty() {
            return Ok(HandOver::Waiting(waiting));
        }
        let (ownership, backed_up) = state.ownership.hand_over_in_place(&served);
        if ownership != state.ownership {
            for file in backed_up {
                let mut name = file.into_os_string();
                name.push(BACKUP_SUFFIX);
                let backup = std::path::PathBuf::from(name);
                self.host
                    .remove_file(&backup)
                    .map_err(|err| InstallerError::host("remove", &backup, err))?;
            }
            state.ownership = ownership;
            self.store(&state)?;
        }
        // Every wanted handler's label is the follow run's to decide (the agent serves them),
        // also while this uninstall keeps coming back for files pods still use.
        let agents: BTreeSet<String> = wanted.iter().map(|s| ready_label(&s.handler)).collect();
        let outcome = self
            .run_leaving(&DesiredShims::uninstall(desired.rollout.clone()), &agents)
            .await?;
        Ok(HandOver::Done(outcome))
    }

    /// Which of `shims` (recorded by the installer) gardener-node-agent serves from the main
    /// config now: the handlers whose table there is the agent's, and the names of the rest.
    /// A table the installer edited in place counts only once the agent's values replaced the
    /// installer's ([`node_agent_values_in`]), not while it is one the installer took over from
    /// the agent and that still carries the agent's `runtime_path`.
    fn node_agent_serves<'s>(
        &self,
        state: &State,
        shims: impl Iterator<Item = (&'s String, &'s ShimState)>,
    ) -> Result<(BTreeSet<String>, Vec<String>), InstallerError> {
        let containerd = self.containerd_release()?;
        let target = locate(
            &*self.host,
            containerd,
            self.settings.config_override.as_deref(),
        )?;
        let mut served = BTreeSet::new();
        let mut waiting = Vec::new();
        for (name, recorded) in shims {
            let dir = node_agent_shim_dir(name);
            let mut agents =
                node_agent_table(&*self.host, &target.config, &recorded.handler, &dir)?;
            for (file, owned) in in_place(state).filter(|(_, o)| o.handler == recorded.handler) {
                agents = agents && node_agent_values_in(&*self.host, file, owned, &dir)?;
            }
            if agents {
                served.insert(recorded.handler.clone());
            } else {
                waiting.push(name.clone());
            }
        }
        Ok((served, waiting))
    }

    /// The handlers of tables the installer edited in place (containerd 1.x) that now carry
    /// gardener-node-agent's values for the same shim ([`node_agent_values_in`]). That happens
    /// while a shoot switches its delivery, in either direction:
    ///
    /// - to `osc`: the agent applied the OSC and this run belongs to an installer pod of the
    ///   previous bundle that the DaemonSet's rollout has not replaced yet;
    /// - to `daemonset`: the installer took the agent's table over, and the agent, which
    ///   applies its containerd configuration again at any of its reconciles, wrote its values
    ///   back before it got the OSC's `op: remove` for the handler.
    ///
    /// Either way the agent's values serve the same shim, and the agent does not rewrite them
    /// until its OSC changes: repairing them would either make the hand-over wait forever or
    /// start a tug of war with a containerd restart on each side. Empty when the installer has
    /// nothing in place, a journaled change of its own is in flight, or anything cannot be read
    /// (the regular run then reports it).
    fn taken_in_place_by_node_agent(&self) -> BTreeSet<String> {
        let Ok(state) = State::load(&*self.host, &self.state_path()) else {
            return BTreeSet::new();
        };
        if state.config.is_some() {
            return BTreeSet::new();
        }
        let mut taken = BTreeSet::new();
        for (file, owned) in in_place(&state) {
            let Some((name, _)) = state.shims.iter().find(|(_, s)| s.handler == owned.handler)
            else {
                continue;
            };
            let dir = node_agent_shim_dir(name);
            if let Ok(true) = node_agent_values_in(&*self.host, file, owned, &dir) {
                taken.insert(owned.handler.clone());
            }
        }
        taken
    }

    /// Converges the node to `desired` (the installer's own delivery), unless gardener-node-
    /// agent has already taken over tables this installer edited in place: then the node is left as it is, labels
    /// included, for the installer of the `osc` bundle to hand over.
    pub async fn run(&mut self, desired: &DesiredShims) -> Result<Outcome, InstallerError> {
        if desired.mode == Mode::Install {
            let taken = self.taken_in_place_by_node_agent();
            if !taken.is_empty() {
                let handlers: Vec<&str> = taken.iter().map(String::as_str).collect();
                tracing::info!(
                    ?handlers,
                    "gardener-node-agent has taken over the installer's tables; leaving the node to the hand-over"
                );
                return Ok(Outcome {
                    status: NodeStatus {
                        ready: true,
                        mode: Mode::Install,
                        desired_file_sha256: None,
                        message: format!(
                            "left to gardener-node-agent: its values serve {} from the OperatingSystemConfig while the delivery switches; this installer writes nothing until the agent removes them or the installer of the osc delivery replaces it",
                            handlers.join(", ")
                        ),
                        shims: Vec::new(),
                        retained_in_use: Vec::new(),
                        run_failed: false,
                        waiting_for_pods: false,
                        updated_at: self.host.now(),
                    },
                    steps: Vec::new(),
                    restarted: false,
                });
            }
        }
        self.run_leaving(desired, &BTreeSet::new()).await
    }
}

/// The handler tables the installer edited in place, with their files.
fn in_place(state: &State) -> impl Iterator<Item = (&std::path::Path, &OwnedHandler)> {
    state
        .ownership
        .files
        .iter()
        .filter(|file| file.role == FileRole::Config)
        .flat_map(|file| {
            file.handlers
                .iter()
                .map(|owned| (file.path.as_path(), owned))
        })
}
