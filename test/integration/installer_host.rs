//! The node installer against a temporary host root with the real containerd binaries: every
//! config it writes is validated by the node's own `containerd config dump` (1.x and 2.x), and
//! the simulated containerd "loads" the config on restart through the same binary, so a
//! verification passes only when containerd really sees our runtime.

use std::path::PathBuf;

use gardener_extension_containerd_shim::desired_shims::{Arch, BinarySource, ready_label};
use gardener_extension_containerd_shim::installer::InstallerError;
use gardener_extension_containerd_shim::installer::cluster::ClusterEvent;
use gardener_extension_containerd_shim::installer::host::{HostEvent, ScriptedOutcome};
use gardener_extension_containerd_shim::installer::plan::Step;

use crate::support::installer::{
    STATE_DIR, TestNode, binary_content, corpus, desired, diff, gvisor, spin, uninstall,
};

const CONFIG: &str = "/etc/containerd/config.toml";
const DROP_IN: &str = "/etc/containerd/conf.d/50-containerd-shim.toml";
const SPIN_PATH: &str =
    "/var/lib/containerd-shim-installer/current/spin/bin/containerd-shim-spin-v2";

/// The (containerd major, main config) cases: the corpus' Gardener, Debian and default
/// configs of each schema, and a node without a config file.
fn cases() -> Vec<(u64, Option<&'static str>)> {
    vec![
        (1, Some("v2-gardener.toml")),
        (1, Some("v2-debian.toml")),
        (1, Some("v1-no-header.toml")),
        (1, None),
        (2, Some("v2-gardener.toml")),
        (2, Some("v3-default.toml")),
        (2, Some("v3-no-imports.toml")),
        (2, Some("v4-default.toml")),
        (2, None),
    ]
}

fn node_for(major: u64, fixture: Option<&str>) -> TestNode {
    let text = fixture.map(corpus);
    TestNode::new(major, text.as_deref())
}

fn loaded_has(node: &TestNode, needle: &str) -> bool {
    node.host
        .loaded_config()
        .unwrap_or_default()
        .contains(needle)
}

#[tokio::test]
async fn install_verifies_labels_and_a_second_run_changes_nothing() {
    for (major, fixture) in cases() {
        let context = format!("containerd {major}.x, {fixture:?}");
        let mut node = node_for(major, fixture);
        let shims = vec![spin("v0.22.0"), gvisor("20250101")];
        for shim in &shims {
            node.stage_shim(shim);
        }
        let want = desired(shims.clone());
        let outcome = node
            .installer
            .run(&want)
            .await
            .unwrap_or_else(|err| panic!("{context}: {err}"));
        assert!(outcome.status.ready, "{context}: {:?}", outcome.status);
        assert!(outcome.restarted, "{context}");
        assert_eq!(node.host.restarts(), 1, "{context}");

        // containerd restarted into a config that has both runtimes at the stable paths.
        assert!(
            loaded_has(&node, SPIN_PATH),
            "{context}: {:?}",
            node.host.loaded_config()
        );
        assert!(
            loaded_has(
                &node,
                "/var/lib/containerd-shim-installer/current/gvisor/config/runsc.toml"
            ),
            "{context}"
        );
        // The validation dump ran before the restart.
        let events = node.host.events();
        let dump = events.iter().position(|e| matches!(e, HostEvent::Dump(_)));
        let restart = events
            .iter()
            .position(|e| matches!(e, HostEvent::Restart { .. }));
        assert!(dump < restart && dump.is_some(), "{context}: {events:?}");

        // Labels only after verification.
        let labels = node.cluster.labels();
        assert_eq!(
            labels.get(&ready_label("spin")).map(String::as_str),
            Some("ready"),
            "{context}"
        );
        assert_eq!(
            labels.get(&ready_label("runsc")).map(String::as_str),
            Some("ready"),
            "{context}"
        );
        let verify = events
            .iter()
            .position(|e| matches!(e, HostEvent::Verify { ok: true, .. }));
        assert!(verify > restart, "{context}");

        // Binaries in a versioned directory behind the stable symlink.
        let target = node.current("spin").unwrap();
        assert!(
            target.starts_with("../versions/spin"),
            "{context}: {target:?}"
        );
        assert_eq!(
            std::fs::read(node.path(SPIN_PATH)).unwrap(),
            binary_content(&shims[0], "containerd-shim-spin-v2"),
            "{context}"
        );
        let runsc_toml = node
            .read("/var/lib/containerd-shim-installer/current/gvisor/config/runsc.toml")
            .unwrap();
        assert!(
            runsc_toml.contains("/var/lib/containerd-shim-installer/current/gvisor/bin/runsc"),
            "{context}: {runsc_toml}"
        );
        if major == 2 && fixture.is_some() {
            assert!(
                node.read(DROP_IN).is_some(),
                "{context}: 2.x uses a drop-in"
            );
        }
        if major == 1 {
            assert!(node.read(DROP_IN).is_none(), "{context}: no drop-in on 1.x");
        }

        // Nothing to do: no write, no restart, no label change.
        let before = node.snapshot();
        let cluster_events = node.cluster.events().len();
        let again = node.installer.run(&want).await.unwrap();
        assert!(again.status.ready, "{context}");
        assert!(!again.restarted, "{context}");
        assert_eq!(again.steps, [Step::CollectGarbage], "{context}");
        assert_eq!(node.host.restarts(), 1, "{context}");
        assert_eq!(node.cluster.events().len(), cluster_events, "{context}");
        let after = node.snapshot();
        assert!(before == after, "{context}: {}", diff(&before, &after));
    }
}

#[tokio::test]
async fn upgrade_swaps_the_symlink_without_restart_and_keeps_a_running_version() {
    for major in [1, 2] {
        let mut node = TestNode::with_settings(major, Some(&corpus("v2-gardener.toml")), |s| {
            s.rollback_window = 0;
        });
        let v1 = spin("v0.21.0");
        node.stage_shim(&v1);
        node.installer
            .run(&desired(vec![v1.clone()]))
            .await
            .unwrap();
        let old_dir = node.current("spin").unwrap();
        // A pod runs on the old shim.
        let pid = node.host.start_process(SPIN_PATH).unwrap();
        let config_before = node.read(CONFIG);

        let v2 = spin("v0.22.0");
        node.stage_shim(&v2);
        let outcome = node
            .installer
            .run(&desired(vec![v2.clone()]))
            .await
            .unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
        assert!(
            !outcome.restarted,
            "an upgrade with an unchanged config needs no restart"
        );
        assert_eq!(node.host.restarts(), 1);
        assert_eq!(node.read(CONFIG), config_before);
        let new_dir = node.current("spin").unwrap();
        assert_ne!(new_dir, old_dir);
        assert_eq!(
            std::fs::read(node.path(SPIN_PATH)).unwrap(),
            binary_content(&v2, "containerd-shim-spin-v2")
        );
        // The running shim's version stays, byte for byte, while it runs.
        let old_name = old_dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            node.versions("spin").contains(&old_name),
            "{:?}",
            node.versions("spin")
        );
        assert_eq!(outcome.status.retained_in_use.len(), 1);
        let old_binary = node.path(&format!(
            "{STATE_DIR}/versions/spin/{old_name}/bin/containerd-shim-spin-v2"
        ));
        assert_eq!(
            std::fs::read(&old_binary).unwrap(),
            binary_content(&v1, "containerd-shim-spin-v2")
        );

        // Once it stops, the next check removes it.
        node.host.stop_process(pid);
        let outcome = node
            .installer
            .run(&desired(vec![v2.clone()]))
            .await
            .unwrap();
        assert!(outcome.status.retained_in_use.is_empty());
        assert_eq!(
            node.versions("spin").len(),
            1,
            "{:?}",
            node.versions("spin")
        );
        assert_eq!(node.host.restarts(), 1);
    }
}

#[tokio::test]
async fn the_rollback_window_keeps_earlier_versions() {
    let mut node = TestNode::new(2, Some(&corpus("v4-default.toml")));
    for version in ["v1", "v2", "v3", "v4"] {
        let shim = spin(version);
        node.stage_shim(&shim);
        node.installer.run(&desired(vec![shim])).await.unwrap();
    }
    let versions = node.versions("spin");
    assert_eq!(versions.len(), 3, "active + 2 previous: {versions:?}");
    assert!(
        versions.iter().all(|v| !v.starts_with("v1-")),
        "{versions:?}"
    );
    assert_eq!(node.host.restarts(), 1);
}

#[tokio::test]
async fn uninstall_restores_the_original_bytes_and_removes_binaries() {
    for (major, fixture) in cases() {
        let context = format!("containerd {major}.x, {fixture:?}");
        let mut node = node_for(major, fixture);
        let original = node.snapshot();
        let shim = spin("v0.22.0");
        node.stage_shim(&shim);
        node.installer.run(&desired(vec![shim])).await.unwrap();
        assert!(node.cluster.labels().contains_key(&ready_label("spin")));

        let outcome = node.installer.run(&uninstall()).await.unwrap();
        assert!(outcome.status.ready, "{context}: {:?}", outcome.status);
        assert!(outcome.status.message.starts_with("clean"), "{context}");
        // The label goes first, before any change of the node.
        assert_eq!(
            outcome.steps[0],
            Step::RemoveLabels(vec![ready_label("spin")]),
            "{context}"
        );
        assert!(!node.cluster.labels().contains_key(&ready_label("spin")));
        assert_eq!(
            node.host.restarts(),
            2,
            "{context}: one restart to remove the runtime"
        );
        assert!(!loaded_has(&node, SPIN_PATH), "{context}");
        let after = node.snapshot();
        // Everything is as before, except the backup of a config edited in place, and the
        // installer's own directory (made for it before the first run, as the pod's hostPath
        // mount does) is gone too.
        let mut expected = original.clone();
        expected.retain(|path, _| !path.starts_with(STATE_DIR));
        if let Some(backup) = after.keys().find(|k| k.ends_with(".containerd-shim.bak")) {
            expected.insert(backup.clone(), after[backup].clone());
        }
        assert!(after == expected, "{context}:\n{}", diff(&expected, &after));
    }
}

#[tokio::test]
async fn uninstall_keeps_binaries_running_shims_use_until_they_stop() {
    let mut node = TestNode::new(2, Some(&corpus("v2-gardener.toml")));
    let shim = spin("v0.22.0");
    node.stage_shim(&shim);
    node.installer.run(&desired(vec![shim])).await.unwrap();
    let pid = node.host.start_process(SPIN_PATH).unwrap();
    let outcome = node.installer.run(&uninstall()).await.unwrap();
    assert!(outcome.status.ready, "{:?}", outcome.status);
    assert_eq!(outcome.status.retained_in_use.len(), 1);
    assert_eq!(node.versions("spin").len(), 1);
    assert!(node.current("spin").is_none(), "the stable path is gone");
    node.host.stop_process(pid);
    let outcome = node.installer.run(&uninstall()).await.unwrap();
    assert!(outcome.status.retained_in_use.is_empty());
    assert!(node.versions("spin").is_empty());
    assert!(node.state().is_none(), "state file removed once clean");
    assert_eq!(node.host.restarts(), 2);
}

/// A shim removed while pods of its handler exist: its label and runtime table go at once, its
/// files stay (containerd needs them to stop those pods) and the node stays ready for the other
/// shims; once the pods are gone, the files go. An uninstall is not done before that.
#[tokio::test]
async fn a_removed_shim_keeps_its_files_while_pods_of_its_handler_exist() {
    let mut node = TestNode::new(2, Some(&corpus("v2-gardener.toml")));
    let spin = spin("v0.22.0");
    let gvisor = gvisor("20250101");
    node.stage_shim(&spin);
    node.stage_shim(&gvisor);
    node.installer
        .run(&desired(vec![spin.clone(), gvisor.clone()]))
        .await
        .unwrap();
    node.host.set_sandboxes("spin", 2);

    let outcome = node
        .installer
        .run(&desired(vec![gvisor.clone()]))
        .await
        .unwrap();
    assert!(outcome.status.ready, "{:?}", outcome.status);
    assert!(
        outcome
            .status
            .message
            .contains("shim spin stays while 2 pod(s)"),
        "{}",
        outcome.status.message
    );
    assert!(!node.cluster.labels().contains_key(&ready_label("spin")));
    assert!(!loaded_has(&node, "runtimes.spin"), "spin's table is gone");
    assert!(node.current("spin").is_some(), "spin's files stay");
    assert_eq!(node.versions("spin").len(), 1);

    // Deleting the extension waits for those pods too.
    let outcome = node.installer.run(&uninstall()).await.unwrap();
    assert!(!outcome.status.ready, "{:?}", outcome.status);
    assert!(node.current("spin").is_some());

    node.host.set_sandboxes("spin", 0);
    let outcome = node.installer.run(&uninstall()).await.unwrap();
    assert!(outcome.status.ready, "{:?}", outcome.status);
    assert!(node.current("spin").is_none() && node.versions("spin").is_empty());
    assert!(node.state().is_none(), "state file removed once clean");
}

#[tokio::test]
async fn node_selection_follows_labels() {
    let mut node = TestNode::new(2, Some(&corpus("v4-default.toml")));
    let mut shim = spin("v0.22.0");
    shim.worker_pools = vec!["wasm".into()];
    node.stage_shim(&shim);
    let want = desired(vec![shim]);
    let outcome = node.installer.run(&want).await.unwrap();
    assert!(
        outcome.status.ready && node.host.restarts() == 0,
        "not selected: nothing to do"
    );
    node.cluster
        .set_label("worker.gardener.cloud/pool", Some("wasm"));
    node.installer.run(&want).await.unwrap();
    assert!(node.cluster.labels().contains_key(&ready_label("spin")));
    node.cluster
        .set_label("worker.gardener.cloud/pool", Some("other"));
    let outcome = node.installer.run(&want).await.unwrap();
    assert!(outcome.status.ready, "{:?}", outcome.status);
    assert!(!node.cluster.labels().contains_key(&ready_label("spin")));
    assert!(node.read(DROP_IN).is_none());
    assert_eq!(node.host.restarts(), 2);
}

#[tokio::test]
async fn drift_is_repaired_with_a_restart_only_when_the_config_changed() {
    for major in [1, 2] {
        let original = corpus("v2-gardener.toml");
        let mut node = TestNode::new(major, Some(&original));
        let shim = spin("v0.22.0");
        node.stage_shim(&shim);
        let want = desired(vec![shim.clone()]);
        node.installer.run(&want).await.unwrap();
        let converged = node.normalized();

        // A person deletes a binary: put back, no restart.
        std::fs::remove_file(node.path(SPIN_PATH)).unwrap();
        let outcome = node.installer.run(&want).await.unwrap();
        assert!(
            !outcome.restarted && node.host.restarts() == 1,
            "major {major}"
        );
        assert_eq!(
            std::fs::read(node.path(SPIN_PATH)).unwrap(),
            binary_content(&shim, "containerd-shim-spin-v2")
        );

        // The stable symlink vanishes: put back, no restart.
        std::fs::remove_file(node.path(&format!("{STATE_DIR}/current/spin"))).unwrap();
        node.installer.run(&want).await.unwrap();
        assert!(node.current("spin").is_some());
        assert_eq!(node.host.restarts(), 1);

        // gardener-node-agent re-renders the config without our keys: restored, one restart.
        node.write(CONFIG, &original);
        if major == 2 {
            std::fs::remove_file(node.path(DROP_IN)).unwrap();
        }
        let outcome = node.installer.run(&want).await.unwrap();
        assert!(outcome.restarted, "major {major}");
        assert_eq!(node.host.restarts(), 2);
        assert!(loaded_has(&node, SPIN_PATH));
        let repaired = node.normalized();
        assert!(
            converged == repaired,
            "major {major}:\n{}",
            diff(&converged, &repaired)
        );

        // Someone removes the readiness label: set again, no restart.
        node.cluster.set_label(&ready_label("spin"), None);
        node.installer.run(&want).await.unwrap();
        assert!(node.cluster.labels().contains_key(&ready_label("spin")));
        assert_eq!(node.host.restarts(), 2);
    }
}

/// Runs a scenario once uninterrupted, then once killed at every checkpoint in turn followed by
/// a fresh run: every interrupted node ends exactly like the uninterrupted one.
async fn crash_everywhere(
    major: u64,
    prepare: &dyn Fn(&mut TestNode) -> futures::future::BoxFuture<'_, ()>,
    scenario: gardener_extension_containerd_shim::desired_shims::DesiredShims,
) -> usize {
    let make = || {
        let node = TestNode::new(major, Some(&corpus("v2-gardener.toml")));
        node.stage_shim(&spin("v0.22.0"));
        node.stage_shim(&gvisor("20250101"));
        node
    };
    let mut reference = make();
    prepare(&mut reference).await;
    let outcome = reference.installer.run(&scenario).await.unwrap();
    assert!(outcome.status.ready);
    let expected = reference.normalized();
    let expected_labels = reference.cluster.labels();

    let mut kills = 0;
    for kill_at in 0.. {
        let mut node = make();
        prepare(&mut node).await;
        node.installer.kill_at(Some(kill_at));
        match node.installer.run(&scenario).await {
            Ok(_) => break,
            Err(InstallerError::Interrupted(at)) => assert_eq!(at, kill_at),
            Err(other) => panic!("kill at {kill_at}: {other}"),
        }
        kills += 1;
        node.installer.kill_at(None);
        let outcome = node
            .installer
            .run(&scenario)
            .await
            .unwrap_or_else(|err| panic!("resuming after a kill at {kill_at}: {err}"));
        assert!(
            outcome.status.ready,
            "kill at {kill_at}: {:?}",
            outcome.status
        );
        let actual = node.normalized();
        assert!(
            expected == actual,
            "kill at {kill_at}:\n{}",
            diff(&expected, &actual)
        );
        assert_eq!(node.cluster.labels(), expected_labels, "kill at {kill_at}");
        assert!(
            node.cluster.holders().is_empty()
                || node.cluster.holders().values().all(|h| h == "node-a")
        );
    }
    kills
}

#[tokio::test]
async fn a_kill_between_any_two_steps_is_completed_by_the_next_run() {
    for major in [1, 2] {
        let install = desired(vec![spin("v0.22.0"), gvisor("20250101")]);
        let kills = crash_everywhere(major, &|_| Box::pin(async {}), install.clone()).await;
        assert!(
            kills >= 8,
            "major {major}: only {kills} kill points in an install"
        );

        // Uninstall after an install.
        let installed = install.clone();
        let kills = crash_everywhere(
            major,
            &move |node| Box::pin(installed_then_staged(node, installed.clone(), None)),
            uninstall(),
        )
        .await;
        assert!(
            kills >= 5,
            "major {major}: only {kills} kill points in an uninstall"
        );

        // An upgrade of one shim and the removal of the other.
        let installed = install.clone();
        let upgrade = desired(vec![spin("v0.23.0")]);
        let kills = crash_everywhere(
            major,
            &move |node| {
                Box::pin(installed_then_staged(
                    node,
                    installed.clone(),
                    Some(spin("v0.23.0")),
                ))
            },
            upgrade,
        )
        .await;
        assert!(
            kills >= 5,
            "major {major}: only {kills} kill points in an upgrade"
        );

        // An upgrade alone: a journaled swap, no config change.
        let installed = desired(vec![spin("v0.22.0")]);
        let kills = crash_everywhere(
            major,
            &move |node| {
                Box::pin(installed_then_staged(
                    node,
                    installed.clone(),
                    Some(spin("v0.23.0")),
                ))
            },
            desired(vec![spin("v0.23.0")]),
        )
        .await;
        assert!(
            kills >= 3,
            "major {major}: only {kills} kill points in a version swap"
        );
    }
}

/// The node of a crash test before its scenario: `installed` converged, then `next` (the shim
/// of an upgrade) staged when given.
async fn installed_then_staged(
    node: &mut TestNode,
    installed: gardener_extension_containerd_shim::desired_shims::DesiredShims,
    next: Option<gardener_extension_containerd_shim::desired_shims::DesiredShim>,
) {
    node.installer.run(&installed).await.unwrap();
    if let Some(shim) = next {
        node.stage_shim(&shim);
    }
}

/// Runs `desired` on a node and asserts it fails with `expect` in the message, changing nothing.
async fn fails_cleanly(
    node: &mut TestNode,
    want: &gardener_extension_containerd_shim::desired_shims::DesiredShims,
    expect: &[&str],
) {
    let before = node.snapshot();
    let labels = node.cluster.labels();
    let restarts = node.host.restarts();
    let err = node.installer.run(want).await.unwrap_err().to_string();
    for needle in expect {
        assert!(err.contains(needle), "{needle:?} missing in: {err}");
    }
    let after = node.snapshot();
    assert!(before == after, "{err}\n{}", diff(&before, &after));
    assert_eq!(node.cluster.labels(), labels);
    assert_eq!(node.host.restarts(), restarts);
}

#[tokio::test]
async fn bad_input_stops_with_a_clear_error_and_changes_nothing() {
    let shim = spin("v0.22.0");
    let want = desired(vec![shim.clone()]);

    // A corrupt config: names the file.
    let mut node = TestNode::new(2, Some("version = 2\n"));
    node.stage_shim(&shim);
    node.write(CONFIG, "version = 2\n[plugins\n");
    fails_cleanly(&mut node, &want, &[CONFIG, "not valid TOML"]).await;

    // An unknown config version.
    node.write(CONFIG, "version = 9\n");
    fails_cleanly(&mut node, &want, &[CONFIG, "version = 9"]).await;

    // A read-only target directory.
    let mut node = TestNode::new(2, Some(&corpus("v2-gardener.toml")));
    node.stage_shim(&shim);
    node.host.set_read_only("/etc/containerd");
    fails_cleanly(&mut node, &want, &["/etc/containerd", "not writable"]).await;

    // A read-only state directory.
    let mut node = TestNode::new(1, Some(&corpus("v2-gardener.toml")));
    node.stage_shim(&shim);
    node.host.set_read_only(STATE_DIR);
    fails_cleanly(&mut node, &want, &[STATE_DIR, "not writable"]).await;

    // A checksum mismatch of an image binary.
    let mut node = TestNode::new(2, Some(&corpus("v2-gardener.toml")));
    node.stage_shim(&shim);
    let mut bad = shim.clone();
    if let BinarySource::Image { sha256, .. } = &mut bad.binaries[0].source {
        sha256.insert(Arch::Amd64, "0".repeat(64));
    }
    fails_cleanly(
        &mut node,
        &desired(vec![bad]),
        &["containerd-shim-spin-v2", &"0".repeat(64), "expected"],
    )
    .await;

    // A binary the init containers did not stage.
    fails_cleanly(
        &mut node,
        &desired(vec![spin("v9")]).tap_missing(),
        &["containerd-shim-missing", "staging"],
    )
    .await;

    // An unsupported containerd release.
    node.host
        .set_version_output("containerd github.com/containerd/containerd/v3 v3.0.0");
    fails_cleanly(&mut node, &want, &["v3.0.0", "not supported"]).await;
}

trait TapMissing {
    fn tap_missing(self) -> Self;
}

impl TapMissing for gardener_extension_containerd_shim::desired_shims::DesiredShims {
    /// Renames the first binary to one nothing staged.
    fn tap_missing(mut self) -> Self {
        self.shims[0].binaries[0].name = "containerd-shim-missing".into();
        self
    }
}

#[tokio::test]
async fn a_restart_that_fails_verification_is_rolled_back() {
    for major in [1, 2] {
        let original = corpus("v2-gardener.toml");
        let mut node = TestNode::new(major, Some(&original));
        let shim = spin("v0.22.0");
        node.stage_shim(&shim);
        let before = node.read(CONFIG);
        node.host.script_verifications([ScriptedOutcome::Fail(
            "the CRI does not report runtime handler spin".into(),
        )]);
        let want = desired(vec![shim.clone()]);
        let err = node.installer.run(&want).await.unwrap_err();
        assert!(matches!(err, InstallerError::RestartFailed { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("does not report runtime handler spin"),
            "{err}"
        );
        // The previous bytes are back and containerd restarted into them.
        assert_eq!(node.read(CONFIG), before);
        assert!(node.read(DROP_IN).is_none());
        assert_eq!(node.host.restarts(), 2);
        assert!(!loaded_has(&node, SPIN_PATH));
        // Never labelled, and the state says why.
        assert!(
            node.cluster
                .events()
                .iter()
                .all(|e| !matches!(e, ClusterEvent::Label { value: Some(_), .. }))
        );
        let state = node.state().unwrap();
        assert_eq!(state["shims"]["spin"]["phase"], "Failed", "{state:#}");
        assert!(
            state["failure"]["error"]
                .as_str()
                .unwrap()
                .contains("restored"),
            "{state:#}"
        );
        // The slot was released.
        assert!(node.cluster.holders().is_empty());

        // The same desired set is not retried: no write, no restart, not ready.
        let snapshot = node.snapshot();
        let outcome = node.installer.run(&want).await.unwrap();
        assert!(!outcome.status.ready);
        assert!(
            outcome.status.message.contains("failed"),
            "{}",
            outcome.status.message
        );
        assert_eq!(node.host.restarts(), 2);
        assert!(snapshot == node.snapshot());

        // A new desired set retries (and now succeeds).
        let fixed = spin("v0.22.1");
        node.stage_shim(&fixed);
        let outcome = node.installer.run(&desired(vec![fixed])).await.unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
        assert_eq!(node.host.restarts(), 3);
        assert!(node.cluster.labels().contains_key(&ready_label("spin")));
    }
}

#[tokio::test]
async fn a_new_version_that_fails_verification_is_swapped_back_and_the_old_one_keeps_serving() {
    for major in [1, 2] {
        let mut node = TestNode::new(major, Some(&corpus("v2-gardener.toml")));
        let v1 = spin("v0.22.0");
        node.stage_shim(&v1);
        node.installer
            .run(&desired(vec![v1.clone()]))
            .await
            .unwrap();
        let old_dir = node.current("spin").unwrap();
        let config = node.read(CONFIG);
        let label = ready_label("spin");
        assert!(node.cluster.labels().contains_key(&label));

        // The new version's pod sandbox does not start; the old one's does again.
        let v2 = spin("v0.23.0");
        node.stage_shim(&v2);
        node.host.script_verifications([
            ScriptedOutcome::Fail("handler spin: the pod sandbox did not start".into()),
            ScriptedOutcome::Succeed,
        ]);
        let want = desired(vec![v2.clone()]);
        let err = node.installer.run(&want).await.unwrap_err();
        assert!(matches!(err, InstallerError::SwappedBack { .. }), "{err}");
        let err = err.to_string();
        assert!(
            err.contains("shim spin version v0.23.0-")
                && err.contains(&format!(
                    "swapped back to {}",
                    old_dir.file_name().unwrap().to_string_lossy()
                ))
                && err.contains("the pod sandbox did not start"),
            "{err}"
        );
        assert_eq!(node.current("spin").unwrap(), old_dir, "major {major}");
        assert_eq!(
            std::fs::read(node.path(SPIN_PATH)).unwrap(),
            binary_content(&v1, "containerd-shim-spin-v2")
        );
        assert_eq!(node.read(CONFIG), config);
        assert_eq!(node.host.restarts(), 1, "only the install restarted");
        assert!(node.cluster.labels().contains_key(&label), "still served");
        let state = node.state().unwrap();
        assert_eq!(state["shims"]["spin"]["phase"], "Failed", "{state:#}");
        assert!(state.get("config").is_none(), "{state:#}");

        // The same set is not retried; the node reports it by shim, with the version, and
        // keeps the label.
        let outcome = node.installer.run(&want).await.unwrap();
        assert!(!outcome.status.ready);
        let failures = outcome.status.failures();
        assert!(
            failures["spin"].contains("shim spin version v0.23.0-"),
            "{failures:?}"
        );
        assert!(node.cluster.labels().contains_key(&label));
        assert_eq!(node.current("spin").unwrap(), old_dir);

        // A version that runs converges, without a restart.
        let v3 = spin("v0.23.1");
        node.stage_shim(&v3);
        let outcome = node.installer.run(&desired(vec![v3])).await.unwrap();
        assert!(outcome.status.ready, "{:?}", outcome.status);
        assert!(!outcome.restarted);
        assert_ne!(node.current("spin").unwrap(), old_dir);
        assert!(node.cluster.labels().contains_key(&label));
    }
}

#[tokio::test]
async fn a_failing_restart_command_is_rolled_back_too() {
    let mut node = TestNode::new(2, Some(&corpus("v4-default.toml")));
    let shim = spin("v0.22.0");
    node.stage_shim(&shim);
    let before = node.snapshot();
    node.host.script_restarts([ScriptedOutcome::Fail(
        "Job for containerd.service failed".into(),
    )]);
    let err = node
        .installer
        .run(&desired(vec![shim]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Job for containerd.service failed"), "{err}");
    let after = node.snapshot();
    let changed: Vec<&String> = after
        .keys()
        .chain(before.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .filter(|k| !k.starts_with(STATE_DIR))
        .collect();
    assert!(changed.is_empty(), "{}", diff(&before, &after));
    assert_eq!(node.host.restarts(), 2);
    assert!(
        node.host.loaded_config().is_some(),
        "containerd runs again on the old config"
    );
}

#[tokio::test]
async fn a_lost_state_file_is_recovered_by_adoption() {
    for major in [1, 2] {
        let mut node = TestNode::new(major, Some(&corpus("v2-gardener.toml")));
        let shim = spin("v0.22.0");
        node.stage_shim(&shim);
        let want = desired(vec![shim]);
        node.installer.run(&want).await.unwrap();
        // What a lost state file cannot tell: when we last restarted containerd, which
        // directories we created (an empty drop-in directory then stays after uninstall), and
        // a config file's bytes before our first edit (uninstall then removes exactly our keys)
        // with the backup we wrote of them (uninstall removes it when it means what the file
        // means without our keys).
        let without_restart_time = |node: &TestNode| {
            let mut tree = node.normalized();
            let key = format!("{STATE_DIR}/state.json");
            if let Some(crate::support::installer::Entry::File(bytes)) = tree.get(&key) {
                let mut value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                value.as_object_mut().unwrap().remove("lastRestart");
                value.as_object_mut().unwrap().remove("createdDirs");
                if let Some(files) = value
                    .pointer_mut("/ownership/files")
                    .and_then(|f| f.as_array_mut())
                {
                    for file in files {
                        file.as_object_mut().unwrap().remove("original");
                        file.as_object_mut().unwrap().remove("backup");
                    }
                }
                tree.insert(
                    key,
                    crate::support::installer::Entry::File(
                        serde_json::to_vec_pretty(&value).unwrap(),
                    ),
                );
            }
            tree
        };
        let converged = without_restart_time(&node);
        std::fs::remove_file(node.path(&format!("{STATE_DIR}/state.json"))).unwrap();
        let outcome = node.installer.run(&want).await.unwrap();
        assert!(outcome.status.ready, "major {major}: {:?}", outcome.status);
        assert_eq!(
            node.host.restarts(),
            1,
            "major {major}: verified without a restart"
        );
        let recovered = without_restart_time(&node);
        assert!(
            converged == recovered,
            "major {major}:\n{}",
            diff(&converged, &recovered)
        );
        // And uninstall still removes exactly ours.
        node.installer.run(&uninstall()).await.unwrap();
        assert_eq!(node.read(CONFIG), Some(corpus("v2-gardener.toml")));
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn shim_sets() -> impl Strategy<Value = (u64, usize, Vec<bool>, bool)> {
        (
            1u64..=2,
            0usize..4,
            proptest::collection::vec(any::<bool>(), 2),
            any::<bool>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        /// Installing twice is installing once: the second run writes nothing, restarts nothing
        /// and changes no label.
        #[test]
        fn install_is_idempotent((major, fixture, picks, annotate) in shim_sets()) {
            let fixtures = ["v2-gardener.toml", "v2-debian.toml", "v4-default.toml", "v3-no-imports.toml"];
            let fixture = if major == 1 && fixture >= 2 { "v2-debian.toml" } else { fixtures[fixture] };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let mut node = TestNode::new(major, Some(&corpus(fixture)));
                let mut shims = Vec::new();
                if picks[0] || !picks[1] {
                    let mut s = spin("v0.22.0");
                    if annotate {
                        s.pod_annotations = vec!["spin.fermyon.com/*".into()];
                    }
                    shims.push(s);
                }
                if picks[1] {
                    shims.push(gvisor("20250101"));
                }
                for shim in &shims {
                    node.stage_shim(shim);
                }
                let want = desired(shims);
                let first = node.installer.run(&want).await.unwrap();
                prop_assert!(first.status.ready);
                let snapshot = node.snapshot();
                let events = node.cluster.events().len();
                let restarts = node.host.restarts();
                let second = node.installer.run(&want).await.unwrap();
                prop_assert!(second.status.ready);
                prop_assert!(!second.restarted);
                prop_assert_eq!(node.host.restarts(), restarts);
                prop_assert_eq!(node.cluster.events().len(), events);
                prop_assert!(snapshot == node.snapshot());
                Ok(())
            })?;
        }
    }
}

#[test]
fn fixtures_used_here_exist() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("test/fixtures/containerd/input");
    for (_, fixture) in cases() {
        if let Some(name) = fixture {
            assert!(dir.join(name).is_file(), "{name}");
        }
    }
}
