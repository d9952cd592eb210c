//! A shoot that switches a node between `delivery: daemonset` and `osc`, with the real
//! containerd binaries of 1.x (config edited in place) and 2.x (our drop-in). gardener-node-
//! agent's part is done as the agent does it: an OSC plugin entry merges its values into the
//! handler's table of config.toml and restarts containerd; `op: remove` deletes the table and
//! restarts. At every step containerd serves the handler, and after each switch nothing of the
//! other delivery's is left in force.

use gardener_extension_containerd_shim::desired_shims::{
    Delivery, DesiredShim, DesiredShims, node_agent_shim_dir, ready_label,
};
use gardener_extension_containerd_shim::installer::cluster::ClusterEvent;
use gardener_extension_containerd_shim::installer::converge::Outcome;
use gardener_extension_containerd_shim::installer::host::Host;
use toml_edit::DocumentMut;

use crate::support::installer::{
    STATE_DIR, TestNode, corpus, desired, image_shim, spin, uninstall,
};

const CONFIG: &str = "/etc/containerd/config.toml";
const DROP_IN: &str = "/etc/containerd/conf.d/50-containerd-shim.toml";
const OURS: &str = "/var/lib/containerd-shim-installer/current/spin/bin/containerd-shim-spin-v2";

/// Gardener's own containerd config, on both majors: edited in place by 1.x, merged with our
/// drop-in by 2.x.
pub(crate) fn node(major: u64) -> TestNode {
    TestNode::new(major, Some(&corpus("v2-gardener.toml")))
}

pub(crate) fn osc(shims: Vec<DesiredShim>) -> DesiredShims {
    DesiredShims {
        delivery: Delivery::Osc,
        ..desired(shims)
    }
}

/// Where the extension's webhook has the agent put the shim's binary.
pub(crate) fn delivered(shim: &DesiredShim) -> String {
    format!(
        "{}{}-0123456789ab/bin/{}",
        node_agent_shim_dir(&shim.name),
        shim.version,
        shim.binaries[0].name
    )
}

/// gardener-node-agent applying the OSC: `Some(binary)` merges the plugin entry's values into
/// the handler's table, `None` is `op: remove`; then containerd restarts.
pub(crate) fn agent_applies(node: &TestNode, shim: &DesiredShim, binary: Option<&str>) {
    let mut doc: DocumentMut = node.read(CONFIG).unwrap().parse().unwrap();
    let runtimes = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
        .as_table_mut()
        .unwrap();
    match binary {
        Some(binary) => {
            if !runtimes.contains_key(&shim.handler) {
                runtimes.insert(&shim.handler, toml_edit::table());
            }
            let table = runtimes[&shim.handler].as_table_mut().unwrap();
            table["runtime_type"] = toml_edit::value(shim.runtime_type.as_str());
            table["runtime_path"] = toml_edit::value(binary);
        }
        None => {
            runtimes.remove(&shim.handler);
        }
    }
    node.write(CONFIG, &doc.to_string());
    node.host.restart_containerd().unwrap();
}

/// One run of the installer pod of a shoot whose delivery is `daemonset` (its payload staged).
async fn install(node: &mut TestNode, shim: &DesiredShim) -> Outcome {
    node.stage_shim(shim);
    node.installer
        .run(&desired(vec![shim.clone()]))
        .await
        .unwrap()
}

/// One run of the installer pod of a shoot whose delivery is `osc` now.
pub(crate) async fn follow(node: &mut TestNode, shim: &DesiredShim) -> Outcome {
    node.installer
        .follow(&osc(vec![shim.clone()]))
        .await
        .unwrap()
}

fn served(node: &TestNode, handler: &str) -> bool {
    node.host
        .served_handlers()
        .unwrap()
        .is_some_and(|handlers| handlers.contains(handler))
}

fn loaded_has(node: &TestNode, needle: &str) -> bool {
    node.host
        .loaded_config()
        .unwrap_or_default()
        .contains(needle)
}

pub(crate) fn labelled(node: &TestNode, handler: &str) -> bool {
    node.cluster
        .labels()
        .get(&ready_label(handler))
        .map(String::as_str)
        == Some("ready")
}

#[tokio::test]
async fn from_daemonset_to_osc_the_installation_is_handed_to_the_node_agent() {
    for major in [1, 2] {
        let context = format!("containerd {major}.x");
        let mut node = node(major);
        let shim = spin("v0.22.0");
        let installed = install(&mut node, &shim).await;
        assert!(installed.status.ready, "{context}: {:?}", installed.status);
        let restarts = node.host.restarts();

        // Switched, the agent has not applied the OSC yet: ours keeps serving, untouched.
        let before = node.snapshot();
        let waiting = follow(&mut node, &shim).await;
        assert!(waiting.status.ready, "{context}: {:?}", waiting.status);
        assert!(
            waiting
                .status
                .message
                .contains("installation of spin serves until"),
            "{context}: {}",
            waiting.status.message
        );
        assert!(
            labelled(&node, "spin") && loaded_has(&node, OURS),
            "{context}"
        );
        assert_eq!(node.snapshot(), before, "{context}: written while waiting");
        assert_eq!(node.host.restarts(), restarts, "{context}");

        // The agent applies it: on 1.x its values land in our table, on 2.x our drop-in still
        // wins over its table.
        let binary = delivered(&shim);
        agent_applies(&node, &shim, Some(&binary));
        let agents_config = node.read(CONFIG).unwrap();
        let restarts = node.host.restarts();
        let handed = follow(&mut node, &shim).await;
        assert!(handed.status.ready, "{context}: {:?}", handed.status);
        assert!(labelled(&node, "spin"), "{context}");
        assert!(served(&node, "spin"), "{context}");
        assert!(
            loaded_has(&node, &binary),
            "{context}: the agent's binary serves"
        );
        assert!(!loaded_has(&node, OURS), "{context}: ours still in force");
        assert_eq!(
            node.read(CONFIG).unwrap(),
            agents_config,
            "{context}: the agent's file was changed"
        );
        assert!(
            node.read(DROP_IN).is_none(),
            "{context}: our drop-in is left"
        );
        // Only our drop-in needed a restart to stop overriding the agent's table.
        let ours = if major == 1 { 0 } else { 1 };
        assert_eq!(node.host.restarts(), restarts + ours, "{context}");
        let left: Vec<String> = node
            .snapshot()
            .into_keys()
            .filter(|path| path.starts_with(STATE_DIR) || path.ends_with(".containerd-shim.bak"))
            .collect();
        assert!(left.is_empty(), "{context}: left behind: {left:?}");

        // Nothing further: the next runs only follow.
        let settled = node.snapshot();
        let again = follow(&mut node, &shim).await;
        assert!(
            again.status.ready && again.steps.is_empty(),
            "{context}: {again:?}"
        );
        assert_eq!(node.snapshot(), settled, "{context}");
        assert_eq!(node.host.restarts(), restarts + ours, "{context}");
    }
}

/// An installer pod of the previous `daemonset` bundle still runs on the node when the agent
/// applies the OSC there (the DaemonSet's rolling update has not reached the node yet). On 1.x
/// the agent's values are now in the tables that installer edited in place: it must not take
/// them for drift and write its own back, or the hand-over would wait for an agent change
/// that does not come. It changes nothing, keeps the label, and the follow run hands over.
#[tokio::test]
async fn a_pod_of_the_previous_bundle_leaves_the_node_agents_values_alone() {
    for major in [1, 2] {
        let context = format!("containerd {major}.x");
        let mut node = node(major);
        let shim = spin("v0.22.0");
        install(&mut node, &shim).await;
        let binary = delivered(&shim);
        agent_applies(&node, &shim, Some(&binary));
        let agents_config = node.read(CONFIG).unwrap();
        let drop_in = node.read(DROP_IN);
        let restarts = node.host.restarts();

        for _ in 0..2 {
            let old = install(&mut node, &shim).await;
            assert!(old.status.ready, "{context}: {:?}", old.status);
            assert!(!old.restarted, "{context}: {old:?}");
            if major == 1 {
                assert!(old.steps.is_empty(), "{context}: {:?}", old.steps);
                assert!(
                    old.status
                        .message
                        .contains("left to gardener-node-agent: its values serve spin"),
                    "{context}: {}",
                    old.status.message
                );
            }
            assert_eq!(node.read(CONFIG).unwrap(), agents_config, "{context}");
            assert_eq!(node.read(DROP_IN), drop_in, "{context}");
            assert_eq!(node.host.restarts(), restarts, "{context}");
            assert!(labelled(&node, "spin"), "{context}");
        }

        let handed = follow(&mut node, &shim).await;
        assert!(handed.status.ready, "{context}: {:?}", handed.status);
        assert!(
            served(&node, "spin") && loaded_has(&node, &binary),
            "{context}"
        );
        assert!(!loaded_has(&node, OURS), "{context}: ours still in force");
        assert_eq!(node.read(CONFIG).unwrap(), agents_config, "{context}");
        assert!(node.state().is_none(), "{context}: {:?}", node.state());
    }
}

/// Pods started on our files keep them after the hand-over, and the labels stay meanwhile:
/// the agent serves the handed-over handler and one the installer never had.
#[tokio::test]
async fn a_hand_over_keeps_our_files_for_running_pods_and_the_labels() {
    let mut node = node(2);
    let shim = spin("v0.22.0");
    let only_osc = image_shim("wasm", "wasm", "v1", &["containerd-shim-wasm-v1"]);
    install(&mut node, &shim).await;
    node.host.set_sandboxes("spin", 1);
    agent_applies(&node, &shim, Some(&delivered(&shim)));
    agent_applies(&node, &only_osc, Some(&delivered(&only_osc)));
    let both = osc(vec![shim.clone(), only_osc.clone()]);

    for _ in 0..2 {
        let outcome = node.installer.follow(&both).await.unwrap();
        assert!(outcome.status.waiting_for_pods, "{:?}", outcome.status);
        assert!(
            outcome
                .status
                .message
                .contains("shim spin stays while 1 pod(s)"),
            "{}",
            outcome.status.message
        );
        assert!(labelled(&node, "spin") && labelled(&node, "wasm"));
        assert!(node.current("spin").is_some(), "our files went early");
        assert!(node.read(DROP_IN).is_none());
    }
    let withdrawn = node
        .cluster
        .events()
        .into_iter()
        .any(|event| matches!(event, ClusterEvent::Label { value: None, .. }));
    assert!(
        !withdrawn,
        "the label was withdrawn: {:?}",
        node.cluster.events()
    );

    node.host.set_sandboxes("spin", 0);
    node.installer.follow(&both).await.unwrap();
    assert!(node.current("spin").is_none() && node.versions("spin").is_empty());
    assert!(node.state().is_none());
}

#[tokio::test]
async fn from_osc_to_daemonset_the_node_agents_table_is_taken_over() {
    for major in [1, 2] {
        let context = format!("containerd {major}.x");
        let mut node = node(major);
        let shim = spin("v0.22.0");
        let binary = delivered(&shim);
        agent_applies(&node, &shim, Some(&binary));
        let followed = follow(&mut node, &shim).await;
        assert!(followed.status.ready, "{context}: {:?}", followed.status);
        assert!(labelled(&node, "spin"), "{context}");

        // Switched back: the installer's own delivery serves at once, no refusal.
        let installed = install(&mut node, &shim).await;
        assert!(installed.status.ready, "{context}: {:?}", installed.status);
        assert!(labelled(&node, "spin"), "{context}");
        assert!(loaded_has(&node, OURS), "{context}");
        // The test's containerd 1.x is 1.6.20, which ignores `runtime_path` (the installer
        // writes its path as `runtime_type` there): the agent's `runtime_path` stays in the
        // adopted table, unread, until the table goes.
        assert_eq!(loaded_has(&node, &binary), major == 1, "{context}");
        // That table is the installer's now, not one the agent took back: the next run
        // changes nothing and does not wait for a hand-over.
        let settled = node.read(CONFIG);
        let again = install(&mut node, &shim).await;
        assert!(
            again.status.ready && !again.restarted,
            "{context}: {again:?}"
        );
        assert!(
            !again.status.message.contains("left to gardener-node-agent"),
            "{context}: {}",
            again.status.message
        );
        assert_eq!(node.read(CONFIG), settled, "{context}");

        // The agent applies its containerd configuration again before it got the `op:
        // remove` (it does at any of its reconciles): on 1.x its values are back in the table
        // the installer took over. They serve the same shim; the installer leaves them rather
        // than start a tug of war of restarts. On 2.x our drop-in still wins.
        agent_applies(&node, &shim, Some(&binary));
        let agents_again = node.read(CONFIG);
        let restarts = node.host.restarts();
        let left = install(&mut node, &shim).await;
        assert!(left.status.ready && !left.restarted, "{context}: {left:?}");
        assert_eq!(
            left.status
                .message
                .contains("left to gardener-node-agent: its values serve spin"),
            major == 1,
            "{context}: {}",
            left.status.message
        );
        assert_eq!(node.read(CONFIG), agents_again, "{context}");
        assert_eq!(node.host.restarts(), restarts, "{context}");
        assert!(
            served(&node, "spin") && labelled(&node, "spin"),
            "{context}"
        );

        // The agent applies its `op: remove`. On 2.x our drop-in serves throughout; on 1.x
        // it took our adopted table along, and the next run puts it back.
        agent_applies(&node, &shim, None);
        assert_eq!(served(&node, "spin"), major == 2, "{context}");
        let restarts = node.host.restarts();
        let repaired = install(&mut node, &shim).await;
        assert!(repaired.status.ready, "{context}: {:?}", repaired.status);
        assert_eq!(repaired.restarted, major == 1, "{context}");
        assert_eq!(
            node.host.restarts(),
            restarts + usize::from(major == 1),
            "{context}"
        );
        assert!(
            loaded_has(&node, OURS) && labelled(&node, "spin"),
            "{context}"
        );

        // And the uninstall leaves none of either delivery's runtime behind.
        let removed = node.installer.run(&uninstall()).await.unwrap();
        assert!(removed.status.ready, "{context}: {:?}", removed.status);
        assert!(!served(&node, "spin"), "{context}");
        assert!(
            !node.read(CONFIG).unwrap().contains("runtimes.spin"),
            "{context}"
        );
    }
}

/// A configuration the hand-over cannot read leaves the installer's installation serving and
/// says why; the follow run still verifies and labels.
#[tokio::test]
async fn an_unreadable_configuration_stops_only_the_hand_over() {
    let mut node = node(2);
    let shim = spin("v0.22.0");
    install(&mut node, &shim).await;
    let config = node.read(CONFIG).unwrap();
    node.write(CONFIG, "version = 2\n[plugins\n");
    let before = node.snapshot();
    let outcome = follow(&mut node, &shim).await;
    assert!(
        outcome
            .status
            .message
            .contains("handing the installer's own installation to gardener-node-agent failed"),
        "{}",
        outcome.status.message
    );
    assert!(
        outcome.status.ready && labelled(&node, "spin"),
        "{outcome:?}"
    );
    assert_eq!(node.snapshot(), before, "written on a failed hand-over");

    node.write(CONFIG, &config);
    agent_applies(&node, &shim, Some(&delivered(&shim)));
    let handed = follow(&mut node, &shim).await;
    assert!(handed.status.ready, "{:?}", handed.status);
    assert!(node.read(DROP_IN).is_none());
}
