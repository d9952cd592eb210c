//! Whether the installer DaemonSets in the shoot have finished their rollout: every selected
//! node runs a Ready pod of the current template. gardener-resource-manager's conditions are not
//! enough for that: a DaemonSet counts as healthy while no more than `maxUnavailable` of its pods
//! are unavailable, and as no longer progressing once every pod runs the new template, so during
//! an uninstall they turn good while the last node's installer is still removing the shims.

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::{Api, Client};

use crate::gardener::managed_resource::Manifest;

/// Why a DaemonSet's rollout is not finished, or `None` when every pod of its current template
/// is Ready on every node it selects.
pub fn unsettled(daemon_set: &DaemonSet) -> Option<String> {
    let name = daemon_set.metadata.name.as_deref().unwrap_or_default();
    let Some(status) = daemon_set.status.as_ref() else {
        return Some(format!("DaemonSet {name} has no status yet"));
    };
    let generation = daemon_set.metadata.generation.unwrap_or_default();
    if status.observed_generation.unwrap_or_default() < generation {
        return Some(format!(
            "DaemonSet {name}: its controller has not seen generation {generation} yet"
        ));
    }
    let desired = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or_default();
    let ready = status.number_ready;
    if updated < desired || ready < desired {
        return Some(format!(
            "DaemonSet {name}: {ready} of {desired} installer pod(s) ready, {updated} updated"
        ));
    }
    None
}

/// The installer DaemonSets of a bundle, as (namespace, name).
fn daemon_sets(bundle: &[Manifest]) -> Vec<(String, String)> {
    bundle
        .iter()
        .map(Manifest::value)
        .filter(|v| v["kind"] == "DaemonSet")
        .filter_map(|v| {
            let meta = &v["metadata"];
            Some((
                meta["namespace"].as_str()?.to_string(),
                meta["name"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The first DaemonSet of `bundle` whose rollout in the shoot is not finished (a missing one
/// included: gardener-resource-manager has not created it yet).
pub async fn first_unsettled(
    shoot: &Client,
    bundle: &[Manifest],
) -> Result<Option<String>, kube::Error> {
    for (namespace, name) in daemon_sets(bundle) {
        let api: Api<DaemonSet> = Api::namespaced(shoot.clone(), &namespace);
        match api.get_opt(&name).await? {
            None => return Ok(Some(format!("DaemonSet {name} is not in the shoot yet"))),
            Some(daemon_set) => {
                if let Some(why) = unsettled(&daemon_set) {
                    return Ok(Some(why));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSetStatus;
    use kube::api::ObjectMeta;

    fn daemon_set(
        generation: i64,
        observed: i64,
        desired: i32,
        updated: i32,
        ready: i32,
    ) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                name: Some("installer".into()),
                generation: Some(generation),
                ..Default::default()
            },
            status: Some(DaemonSetStatus {
                observed_generation: Some(observed),
                desired_number_scheduled: desired,
                updated_number_scheduled: Some(updated),
                number_ready: ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn settled_only_when_every_node_runs_a_ready_pod_of_the_current_template() {
        assert_eq!(unsettled(&daemon_set(2, 2, 3, 3, 3)), None);
        // No node selected (a hibernated or empty pool): nothing to wait for.
        assert_eq!(unsettled(&daemon_set(2, 2, 0, 0, 0)), None);
        // What gardener-resource-manager already calls healthy: every pod updated, the last
        // one (within maxUnavailable) not Ready yet.
        assert_eq!(
            unsettled(&daemon_set(2, 2, 3, 3, 2)).as_deref(),
            Some("DaemonSet installer: 2 of 3 installer pod(s) ready, 3 updated")
        );
        assert!(unsettled(&daemon_set(2, 2, 3, 1, 3)).is_some());
        assert!(
            unsettled(&daemon_set(3, 2, 3, 3, 3))
                .is_some_and(|m| m.contains("not seen generation 3"))
        );
        assert!(unsettled(&DaemonSet::default()).is_some());
    }
}
