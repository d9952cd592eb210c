//! The mutating webhook's decision for one `OperatingSystemConfig` review: what the shoot's
//! Extension wants delivered through the OSC, and the JSON Patch that delivers it. Pure: the
//! server fetches the Extension and the Shoot and passes them in.

use serde_json::{Value, json};

use std::collections::BTreeSet;

use super::delivered::{DELIVERED_ANNOTATION, Delivered};
use super::mutate::mutate;
use crate::admission::review::{Request, Response, allowed, denied};
use crate::desired_shims::{DesiredShims, Rollout};
use crate::gardener::api::operating_system_config::OperatingSystemConfig;
use crate::gardener::api::{Extension, Shoot};
use crate::shim::config::types::DeliveryMode;
use crate::shim::config::{self, desired};
use crate::shim::plan::Plan;

/// The group of the resource this webhook mutates.
pub const OSC_GROUP: &str = "extensions.gardener.cloud";
/// `spec.purpose` of the OSC whose content gardener-node-agent applies; the `provision` one
/// only bootstraps the agent.
pub const PURPOSE_RECONCILE: &str = "reconcile";

/// What the server read from the seed for the review's namespace.
pub struct Facts<'a> {
    /// The namespace's Extension of our type, if any.
    pub extension: Option<&'a Extension>,
    /// The Shoot from the namespace's Cluster; an error when it cannot be read.
    pub shoot: Result<Option<&'a Shoot>, String>,
}

/// What happened to one review, for logs and metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum AdmitOutcome {
    /// Our entries were written (or removed).
    Mutated,
    /// The OSC already carries exactly what we deliver.
    Unchanged,
    /// Not an OSC we deliver into: another purpose, a deletion, another resource.
    NotOurs,
    /// Refused: the Extension's configuration is invalid, the OSC cannot carry the shims, or
    /// the Shoot cannot be read. gardenlet retries; the OSC keeps what it carried.
    Refused,
}

/// Answers one review.
pub fn admit(request: &Request, facts: &Facts<'_>, plan: &Plan<'_>) -> (Response, AdmitOutcome) {
    let uid = request.uid.clone();
    let is_osc = request.kind.group == OSC_GROUP && request.kind.kind == "OperatingSystemConfig";
    let object = match (&request.object, request.operation.as_str()) {
        (Some(object), "CREATE" | "UPDATE") if is_osc => object,
        _ => return (allowed(uid, Vec::new()), AdmitOutcome::NotOurs),
    };
    let decoded = serde_json::from_str::<Value>(object.get()).and_then(|raw| {
        serde_json::from_value::<OperatingSystemConfig>(raw.clone()).map(|osc| (raw, osc))
    });
    let (raw, incoming) = match decoded {
        Ok(decoded) => decoded,
        Err(e) => {
            let message = format!("cannot decode the OSC: {e}");
            return refuse(uid, 400, "BadRequest", message);
        }
    };
    let purpose = incoming.spec.other.get("purpose").and_then(Value::as_str);
    if purpose != Some(PURPOSE_RECONCILE) || incoming.metadata.deletion_timestamp.is_some() {
        return (allowed(uid, Vec::new()), AdmitOutcome::NotOurs);
    }
    let wanted = match wanted(facts, plan) {
        Ok(wanted) => wanted,
        Err(message) => return refuse(uid, 422, "Invalid", message),
    };
    // gardenlet writes the whole spec on every shoot reconcile, so our files arrive dropped;
    // those of replaced versions, kept one more generation, exist only in the old object.
    let old: Option<OperatingSystemConfig> = request
        .old_object
        .as_ref()
        .filter(|_| request.operation == "UPDATE")
        .and_then(|raw| serde_json::from_str(raw.get()).ok());
    let mut osc = incoming.clone();
    restore_owned_files(&mut osc, old.as_ref());
    let mutated = match mutate(&osc, &wanted) {
        Ok(mutated) => mutated,
        Err(e) => return refuse(uid, 422, "Invalid", e.to_string()),
    };
    if mutated.spec == incoming.spec
        && mutated.metadata.annotations == incoming.metadata.annotations
    {
        return (allowed(uid, Vec::new()), AdmitOutcome::Unchanged);
    }
    let patch = json_patch(&raw, &mutated);
    let mut response = allowed(uid, Vec::new());
    response.patch_type = Some("JSONPatch");
    response.patch = Some(base64_encode(patch.to_string().as_bytes()));
    (response, AdmitOutcome::Mutated)
}

fn refuse(
    uid: String,
    code: u16,
    reason: &'static str,
    message: String,
) -> (Response, AdmitOutcome) {
    (
        denied(uid, code, reason, format!("containerd-shim: {message}")),
        AdmitOutcome::Refused,
    )
}

/// The shims the OSC should carry. No Extension (never enabled, or deleted since the last
/// shoot reconcile), an Extension being deleted, or one that delivers through the DaemonSet:
/// none, so that what we delivered before gets its `op: remove`. An invalid configuration
/// is refused rather than read as "none": it must not take running shims off the nodes.
pub fn wanted(facts: &Facts<'_>, plan: &Plan<'_>) -> Result<DesiredShims, String> {
    let nothing = || {
        DesiredShims::uninstall(Rollout {
            max_concurrent_restarts: 1,
        })
    };
    let Some(extension) = facts.extension else {
        return Ok(nothing());
    };
    if extension.metadata.deletion_timestamp.is_some() {
        return Ok(nothing());
    }
    let shoot = match &facts.shoot {
        Ok(Some(shoot)) => *shoot,
        Ok(None) => return Err("the namespace's Cluster holds no Shoot".to_string()),
        Err(e) => return Err(format!("cannot read the namespace's Cluster: {e}")),
    };
    let validated = config::load_spec(&extension.spec, plan.catalog, shoot).map_err(|e| {
        format!("the Extension's providerConfig is invalid, the OSC keeps what it carried: {e}")
    })?;
    if validated.delivery() != DeliveryMode::Osc {
        return Ok(nothing());
    }
    desired::desired_shims(&validated, plan.images).map_err(|e| e.to_string())
}

/// Puts back the files [`Delivered`] names as ours that the new object lacks and the old one
/// has: a write by gardenlet drops them, a write by anyone else keeps them.
fn restore_owned_files(osc: &mut OperatingSystemConfig, old: Option<&OperatingSystemConfig>) {
    let (Some(old), Some(delivered)) = (
        old,
        osc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DELIVERED_ANNOTATION))
            .and_then(|text| Delivered::from_annotation(text).ok()),
    ) else {
        return;
    };
    let owned: BTreeSet<&String> = delivered.owned_files().collect();
    let present: BTreeSet<String> = osc.spec.files.iter().map(|f| f.path.clone()).collect();
    let missing: Vec<_> = old
        .spec
        .files
        .iter()
        .filter(|f| owned.contains(&f.path) && !present.contains(&f.path))
        .cloned()
        .collect();
    osc.spec.files.extend(missing);
}

/// Replaces `spec` and `metadata.annotations` whole: the two parts [`mutate`] changes.
fn json_patch(original: &Value, mutated: &OperatingSystemConfig) -> Value {
    let spec = serde_json::to_value(&mutated.spec).unwrap_or(Value::Null);
    let annotations = mutated.metadata.annotations.clone().unwrap_or_default();
    let had_annotations = original.pointer("/metadata/annotations").is_some();
    let mut ops = vec![json!({"op": "replace", "path": "/spec", "value": spec})];
    ops.push(json!({
        "op": if had_annotations { "replace" } else { "add" },
        "path": "/metadata/annotations",
        "value": annotations,
    }));
    Value::Array(ops)
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::admission::review::ReviewRequest;
    use crate::gardener::api::extension::test_extension;
    use crate::shim::config::test_support::{catalog, shoot};
    use crate::shim::config::{API_VERSION, KIND, images};
    use crate::shim::osc::DELIVERED_ANNOTATION;

    fn osc(purpose: &str, annotations: Value) -> Value {
        json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "OperatingSystemConfig",
            "metadata": {
                "name": "cloud-config-worker-a-77ac3", "namespace": "shoot--p--s",
                "labels": {"worker.gardener.cloud/pool": "worker-a"},
                "annotations": annotations,
            },
            "spec": {
                "type": "gardenlinux", "purpose": purpose,
                "criConfig": {"name": "containerd", "containerd": {"sandboxImage": "pause"}},
                "files": [{"path": "/etc/other", "content": {"inline": {"data": "x"}}}],
            }
        })
    }

    fn request(object: &Value, operation: &str) -> Request {
        request_with_old(object, None, operation)
    }

    fn request_with_old(object: &Value, old: Option<&Value>, operation: &str) -> Request {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1", "operation": operation, "namespace": "shoot--p--s",
                "kind": {"group": "extensions.gardener.cloud", "version": "v1alpha1", "kind": "OperatingSystemConfig"},
                "object": object,
                "oldObject": old,
            }
        });
        let review: ReviewRequest = serde_json::from_value(review).unwrap();
        review.request.unwrap()
    }

    fn extension(provider_config: Value) -> Extension {
        let mut ext = test_extension("shoot--p--s", "containerd-shim", "containerd-shim", None);
        ext.spec.provider_config = Some(provider_config);
        ext
    }

    fn crun(delivery: &str) -> Extension {
        extension(json!({
            "apiVersion": API_VERSION, "kind": KIND, "delivery": delivery,
            "shims": [{"name": "crun", "workerPools": ["worker-a"]}]
        }))
    }

    /// The review's answer and the OSC after its patch.
    fn run(object: &Value, ext: Option<&Extension>) -> (Response, AdmitOutcome, Value) {
        run_with_old(object, None, ext)
    }

    /// [`run`] for an update from `old`.
    fn run_with_old(
        object: &Value,
        old: Option<&Value>,
        ext: Option<&Extension>,
    ) -> (Response, AdmitOutcome, Value) {
        let catalog = catalog();
        let images = images::embedded().unwrap();
        let plan = Plan {
            catalog: &catalog,
            images: &images,
        };
        let shoot = shoot();
        let facts = Facts {
            extension: ext,
            shoot: Ok(Some(&shoot)),
        };
        let (response, outcome) = admit(&request_with_old(object, old, "UPDATE"), &facts, &plan);
        let mut patched = object.clone();
        if let Some(patch) = &response.patch {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .unwrap();
            let ops: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
            for op in ops {
                let path = op["path"].as_str().unwrap();
                let (parent, key) = path.rsplit_once('/').unwrap();
                let target = if parent.is_empty() {
                    &mut patched
                } else {
                    patched.pointer_mut(parent).unwrap()
                };
                target[key] = op["value"].clone();
            }
        }
        (response, outcome, patched)
    }

    fn handlers(osc: &Value) -> Vec<(Option<String>, String)> {
        osc.pointer("/spec/criConfig/containerd/plugins")
            .and_then(Value::as_array)
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        (
                            e["op"].as_str().map(String::from),
                            e["path"][3].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn osc_delivery_adds_the_pool_s_shims_and_a_second_review_changes_nothing() {
        let ext = crun("osc");
        let (response, outcome, patched) = run(&osc("reconcile", json!({})), Some(&ext));
        assert!(response.allowed);
        assert_eq!(outcome, AdmitOutcome::Mutated);
        assert_eq!(handlers(&patched), vec![(None, "crun".to_string())]);
        assert!(
            patched["spec"]["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["path"]
                    .as_str()
                    .unwrap()
                    .starts_with("/var/bin/containerruntimes/crun/")),
            "{patched}"
        );
        assert_eq!(patched["spec"]["files"][0]["path"], "/etc/other");
        assert_eq!(
            patched["spec"]["criConfig"]["containerd"]["sandboxImage"],
            "pause"
        );
        let (again, outcome, _) = run(&patched, Some(&ext));
        assert_eq!(outcome, AdmitOutcome::Unchanged);
        assert!(again.patch.is_none());
    }

    #[test]
    fn a_removed_extension_or_daemonset_delivery_leaves_op_remove_for_what_was_delivered() {
        let (_, _, delivered) = run(&osc("reconcile", json!({})), Some(&crun("osc")));
        assert!(delivered["metadata"]["annotations"][DELIVERED_ANNOTATION].is_string());
        for ext in [None, Some(crun("daemonset"))] {
            let (response, outcome, patched) = run(&delivered, ext.as_ref());
            assert!(response.allowed);
            assert_eq!(outcome, AdmitOutcome::Mutated);
            assert_eq!(
                handlers(&patched),
                vec![(Some("remove".to_string()), "crun".to_string())]
            );
        }
    }

    /// gardenlet's write of the pool's OSC: its own spec, our annotation kept.
    fn gardenlet_write(delivered: &Value) -> Value {
        let mut written = osc("reconcile", delivered["metadata"]["annotations"].clone());
        written["metadata"]["annotations"] = delivered["metadata"]["annotations"].clone();
        written
    }

    #[test]
    fn files_of_a_removed_handler_survive_gardenlet_s_next_write_for_one_generation() {
        let (_, _, delivered) = run(&osc("reconcile", json!({})), Some(&crun("osc")));
        let crun_files: Vec<Value> = delivered["spec"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["path"]
                    .as_str()
                    .unwrap()
                    .starts_with("/var/bin/containerruntimes/")
            })
            .cloned()
            .collect();
        assert!(!crun_files.is_empty());
        let removed = extension(json!({
            "apiVersion": API_VERSION, "kind": KIND, "delivery": "osc", "shims": []
        }));
        let written = gardenlet_write(&delivered);
        let (_, outcome, patched) = run_with_old(&written, Some(&delivered), Some(&removed));
        assert_eq!(outcome, AdmitOutcome::Mutated);
        let spec = &patched["spec"];
        for file in &crun_files {
            assert!(
                spec["files"].as_array().unwrap().contains(file),
                "{} dropped: {spec}",
                file["path"]
            );
        }
        assert_eq!(
            spec["criConfig"]["containerd"]["plugins"][0]["op"], "remove",
            "{spec}"
        );
    }

    #[test]
    fn an_invalid_config_is_refused_with_its_field_and_nothing_changes() {
        let (_, _, delivered) = run(&osc("reconcile", json!({})), Some(&crun("osc")));
        let bad = extension(json!({
            "apiVersion": API_VERSION, "kind": KIND, "delivery": "osc",
            "shims": [{"name": "crun", "workerPools": ["nope"]}]
        }));
        let (response, outcome, patched) = run(&delivered, Some(&bad));
        assert!(!response.allowed);
        assert_eq!(outcome, AdmitOutcome::Refused);
        let message = response.status.unwrap().message;
        assert!(message.contains("shims[0].workerPools"), "{message}");
        assert!(message.contains("nope"), "{message}");
        assert_eq!(patched, delivered);
    }

    #[test]
    fn other_purposes_and_deletions_are_not_ours() {
        let ext = crun("osc");
        let (response, outcome, _) = run(&osc("provision", json!({})), Some(&ext));
        assert!(response.allowed && response.patch.is_none());
        assert_eq!(outcome, AdmitOutcome::NotOurs);
        let catalog = catalog();
        let images = images::embedded().unwrap();
        let plan = Plan {
            catalog: &catalog,
            images: &images,
        };
        let facts = Facts {
            extension: Some(&ext),
            shoot: Ok(None),
        };
        let (_, outcome) = admit(
            &request(&osc("reconcile", json!({})), "DELETE"),
            &facts,
            &plan,
        );
        assert_eq!(outcome, AdmitOutcome::NotOurs);
    }
}
