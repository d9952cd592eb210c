//! `resources.gardener.cloud/v1alpha1` `ManagedResource`.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// `ManagedResource.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "resources.gardener.cloud",
    version = "v1alpha1",
    kind = "ManagedResource",
    plural = "managedresources",
    namespaced,
    status = "ManagedResourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceSpec {
    /// Unset: the shoot's gardener-resource-manager applies into the shoot. `seed`: the seed's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default)]
    pub secret_refs: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_labels: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_overwrite_annotations: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_objects: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_persistent_volume_claims: Option<bool>,
}

/// A reference to a Secret in the ManagedResource's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalObjectReference {
    pub name: String,
}

/// `ManagedResource.status`, written by gardener-resource-manager.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedResourceStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_data_checksum: Option<String>,
}

/// Condition types gardener-resource-manager writes on a ManagedResource.
pub mod conditions {
    pub const RESOURCES_APPLIED: &str = "ResourcesApplied";
    pub const RESOURCES_HEALTHY: &str = "ResourcesHealthy";
    pub const RESOURCES_PROGRESSING: &str = "ResourcesProgressing";
}

/// Why a ManagedResource is not healthy, in the words Gardener's health library uses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unhealthy(pub String);

impl ManagedResource {
    /// The condition of the given type, if gardener-resource-manager wrote it.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
    }

    /// Gardener's `CheckManagedResource`: the resource manager has seen the current
    /// generation, applied every object and found every object healthy.
    pub fn check_healthy(&self) -> Result<(), Unhealthy> {
        let name = kube::ResourceExt::name_any(self);
        let generation = self.metadata.generation;
        let observed = self.status.as_ref().and_then(|s| s.observed_generation);
        if observed != generation {
            return Err(Unhealthy(format!(
                "observed generation of managed resource '{name}' outdated ({}/{})",
                observed.unwrap_or(0),
                generation.unwrap_or(0)
            )));
        }
        for type_ in [conditions::RESOURCES_APPLIED, conditions::RESOURCES_HEALTHY] {
            match self.condition(type_) {
                None => {
                    return Err(Unhealthy(format!(
                        "condition {type_} for managed resource '{name}' has not been reported yet"
                    )));
                }
                Some(c) if c.status != super::ConditionStatus::True => {
                    return Err(Unhealthy(format!(
                        "condition {type_} of managed resource '{name}' is {:?}: {}",
                        c.status, c.message
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Gardener's `CheckManagedResourceProgressing`: healthy, and the rollout of every object
    /// (DaemonSets, Deployments, ...) is complete.
    pub fn check_rolled_out(&self) -> Result<(), Unhealthy> {
        self.check_healthy()?;
        let name = kube::ResourceExt::name_any(self);
        match self.condition(conditions::RESOURCES_PROGRESSING) {
            Some(c) if c.status == super::ConditionStatus::False => Ok(()),
            Some(c) => Err(Unhealthy(format!(
                "condition {} of managed resource '{name}' is {:?}: {}",
                conditions::RESOURCES_PROGRESSING,
                c.status,
                c.message
            ))),
            None => Err(Unhealthy(format!(
                "condition {} for managed resource '{name}' has not been reported yet",
                conditions::RESOURCES_PROGRESSING
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::ConditionStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn mr(generation: i64, observed: i64, conds: &[(&str, ConditionStatus)]) -> ManagedResource {
        let mut mr = ManagedResource::new("ext", ManagedResourceSpec::default());
        mr.metadata.generation = Some(generation);
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        mr.status = Some(ManagedResourceStatus {
            observed_generation: Some(observed),
            conditions: conds
                .iter()
                .map(|(t, s)| Condition {
                    type_: t.to_string(),
                    status: *s,
                    last_transition_time: now.clone(),
                    last_update_time: now.clone(),
                    reason: "R".into(),
                    message: "m".into(),
                    codes: vec![],
                })
                .collect(),
            secrets_data_checksum: None,
        });
        mr
    }

    #[test]
    fn healthy_needs_current_generation_and_both_conditions() {
        use ConditionStatus::*;
        let ok = [("ResourcesApplied", True), ("ResourcesHealthy", True)];
        assert!(mr(2, 2, &ok).check_healthy().is_ok());
        let err = mr(3, 2, &ok).check_healthy().unwrap_err();
        assert!(err.0.contains("outdated (2/3)"), "{err}");
        assert!(
            mr(1, 1, &[("ResourcesApplied", True)])
                .check_healthy()
                .is_err()
        );
        assert!(
            mr(
                1,
                1,
                &[("ResourcesApplied", True), ("ResourcesHealthy", False)]
            )
            .check_healthy()
            .is_err()
        );
        assert!(mr(1, 1, &ok).check_rolled_out().is_err());
        let rolled = [
            ("ResourcesApplied", True),
            ("ResourcesHealthy", True),
            ("ResourcesProgressing", False),
        ];
        assert!(mr(1, 1, &rolled).check_rolled_out().is_ok());
    }
}
