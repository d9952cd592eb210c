//! What a follow run (`delivery: osc`) costs a node: it wakes on every change in containerd's
//! configuration directory and at least once a minute, but starts a canary sandbox of a
//! handler only when the containerd process changed since the last one (or that one is older
//! than the canary's validity). With the real containerd 2.x binary serving the agent's table.

use gardener_extension_containerd_shim::installer::host::{Host, HostEvent};

use crate::installer_handover::{agent_applies, delivered, follow, labelled, node};
use crate::support::installer::{TestNode, spin};

fn canaries(node: &TestNode) -> usize {
    node.host
        .events()
        .iter()
        .filter(|e| matches!(e, HostEvent::Verify { .. }))
        .count()
}

#[tokio::test]
async fn a_follow_run_starts_a_canary_once_per_containerd_process() {
    let mut node = node(2);
    let shim = spin("v0.22.0");
    agent_applies(&node, &shim, Some(&delivered(&shim)));

    let first = follow(&mut node, &shim).await;
    assert!(first.status.ready, "{:?}", first.status);
    assert!(labelled(&node, "spin"));
    assert_eq!(canaries(&node), 1);
    let verified_at = first.status.shims[0].verified_at;
    assert!(verified_at.is_some(), "{:?}", first.status);

    // The same containerd: the canary vouches; the status says when it started.
    for _ in 0..3 {
        let again = follow(&mut node, &shim).await;
        assert!(again.status.ready, "{:?}", again.status);
        assert_eq!(again.status.shims[0].verified_at, verified_at);
        assert!(labelled(&node, "spin"));
    }
    assert_eq!(canaries(&node), 1, "{:?}", node.host.events());

    // containerd restarted (by anyone): the next run starts a canary again.
    node.host.restart_containerd().unwrap();
    let restarted = follow(&mut node, &shim).await;
    assert!(restarted.status.ready, "{:?}", restarted.status);
    assert_eq!(canaries(&node), 2, "{:?}", node.host.events());

    // A handler containerd stops serving loses its label at once, and when it is back its
    // canary runs again rather than an old one vouching for it.
    agent_applies(&node, &shim, None);
    let gone = follow(&mut node, &shim).await;
    assert!(!gone.status.ready && !labelled(&node, "spin"), "{gone:?}");
    agent_applies(&node, &shim, Some(&delivered(&shim)));
    let back = follow(&mut node, &shim).await;
    assert!(back.status.ready && labelled(&node, "spin"), "{back:?}");
    assert_eq!(canaries(&node), 3, "{:?}", node.host.events());
}
