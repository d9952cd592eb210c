//! A node that refuses a shim (its handler is already defined by someone else) says so where
//! people look: a Warning Event on the Extension in the seed and one on the Node in the shoot,
//! besides the health condition.

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

use crate::install::crun;
use crate::scenario::{NODE_TIMEOUT, Scenario};
use crate::support::poll;

const REASON: &str = "ShimFailedOnNode";
/// A drop-in of someone else's that defines the handler `crun`, in a file containerd 2.x reads.
const FOREIGN_DROP_IN: &str = "/etc/containerd/conf.d/10-someone-else.toml";

/// Removes the foreign drop-in again, also when the test fails: the next test must find the
/// node as it was.
struct Foreign(std::path::PathBuf);

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The notes of the Warning Events with our reason in `namespace` that regard `name`.
pub(crate) async fn warnings(events: &Api<Event>, name: &str) -> Result<Vec<String>, String> {
    let listed = events
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(listed
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(REASON) && e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect())
}

#[tokio::test]
async fn a_conflicting_handler_is_a_warning_event_on_the_extension_and_the_node() {
    let s = Scenario::start("refusal-events").await;
    let node = s.nodes.with_containerd(2);
    let path = node.path(FOREIGN_DROP_IN);
    std::fs::write(
        &path,
        "version = 3\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.crun]\n  \
         runtime_type = \"io.containerd.runc.v2\"\n",
    )
    .expect("write the foreign drop-in");
    let foreign = Foreign(path);

    s.apply(crun()).await;
    s.wait_health("naming the refusing node", |m| {
        m.contains("failed") && m.contains(&node.name)
    })
    .await;

    let on_extension: Api<Event> = Api::namespaced(s.c.seed.clone(), &s.namespace);
    let notes = poll::until("a Warning Event on the Extension", NODE_TIMEOUT, || async {
        let notes = warnings(&on_extension, crate::scenario::EXTENSION).await?;
        if notes
            .iter()
            .any(|n| n.contains(&node.name) && n.contains("crun"))
        {
            Ok(notes)
        } else {
            Err(format!("{notes:?}"))
        }
    })
    .await;
    assert_eq!(notes.len(), 1, "one Event per failure: {notes:?}");
    assert!(
        notes[0].contains(FOREIGN_DROP_IN),
        "the Event names the file: {notes:?}"
    );

    let on_node: Api<Event> = Api::namespaced(s.c.shoot.clone(), "default");
    let notes = poll::until("a Warning Event on the Node", NODE_TIMEOUT, || async {
        let notes = warnings(&on_node, &node.name).await?;
        if notes.iter().any(|n| n.contains(FOREIGN_DROP_IN)) {
            Ok(notes)
        } else {
            Err(format!("{notes:?}"))
        }
    })
    .await;
    // The Node is shared with earlier tests, whose failures left Events of their own on it.
    let ours: Vec<&String> = notes
        .iter()
        .filter(|n| n.contains(FOREIGN_DROP_IN))
        .collect();
    assert_eq!(ours.len(), 1, "one Event per failure: {notes:?}");

    drop(foreign);
    s.delete().await;
}
