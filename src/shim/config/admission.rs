//! Which admission-policy API confines the installer on a shoot, and the refusal where none can.
//!
//! The installer needs `patch nodes`, which RBAC can only grant for every Node and every field.
//! A ValidatingAdmissionPolicy narrows it to the installer's own Node and our labels and
//! annotations; that check reads the node name the API server binds into the installer's
//! token. A shoot where either is missing gets no installer at all rather than a cluster-wide
//! grant.

use std::collections::BTreeMap;

use super::error::{FieldError, FieldPath};
use crate::gardener::api::cluster::Shoot;

/// The API version the node policy is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyApi {
    /// `admissionregistration.k8s.io/v1`: Kubernetes 1.30 and later.
    V1,
    /// `admissionregistration.k8s.io/v1beta1`: Kubernetes 1.29 with the API and the token's
    /// node binding switched on in the Shoot.
    V1Beta1,
}

/// What a 1.29 shoot must switch on for the beta policy to work.
const BETA_FEATURE_GATES: &[&str] = &[
    "ValidatingAdmissionPolicy",
    "ServiceAccountTokenPodNodeInfo",
];
const BETA_RUNTIME_CONFIG: &str = "admissionregistration.k8s.io/v1beta1";

/// The policy API the Shoot's API server serves, or why it serves none usable.
pub fn policy_api(shoot: &Shoot) -> Result<PolicyApi, FieldError> {
    let kubernetes = &shoot.spec.kubernetes;
    let path = FieldPath::shoot().child("spec").child("kubernetes");
    let Some((major, minor)) = major_minor(&kubernetes.version) else {
        return Err(FieldError::invalid(
            &path.child("version"),
            &kubernetes.version,
            "is not a Kubernetes version (want <major>.<minor>.<patch>)",
        ));
    };
    if (major, minor) >= (1, 30) {
        return Ok(PolicyApi::V1);
    }
    let too_old = "the installer must be confined to its own Node by a ValidatingAdmissionPolicy";
    if (major, minor) < (1, 29) {
        return Err(FieldError::invalid(
            &path.child("version"),
            &kubernetes.version,
            format!(
                "is too old: {too_old}, which needs the node name in ServiceAccount tokens (Kubernetes 1.29 with feature gates, 1.30 and later by default); upgrade the Shoot to 1.30 or later"
            ),
        ));
    }
    let api_server = kubernetes.kube_api_server.as_ref();
    let empty = BTreeMap::new();
    let gates = api_server.map_or(&empty, |s| &s.feature_gates);
    let runtime_config = api_server.map_or(&empty, |s| &s.runtime_config);
    let mut missing: Vec<String> = BETA_FEATURE_GATES
        .iter()
        .filter(|gate| gates.get(**gate) != Some(&true))
        .map(|gate| format!("kubeAPIServer.featureGates[{gate}]: true"))
        .collect();
    if runtime_config.get(BETA_RUNTIME_CONFIG) != Some(&true) {
        missing.push(format!(
            "kubeAPIServer.runtimeConfig[{BETA_RUNTIME_CONFIG}]: true"
        ));
    }
    if missing.is_empty() {
        return Ok(PolicyApi::V1Beta1);
    }
    Err(FieldError::invalid(
        &path.child("version"),
        &kubernetes.version,
        format!(
            "needs more switched on: {too_old}; on 1.29 set {} in spec.kubernetes, or upgrade the Shoot to 1.30 or later",
            missing.join(", ")
        ),
    ))
}

/// `1.29.4`, `v1.30.0` → (1, 29), (1, 30).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gardener::api::cluster::KubeApiServer;

    fn shoot(version: &str, gates: &[&str], runtime_config: &[&str]) -> Shoot {
        let mut shoot = Shoot::default();
        shoot.spec.kubernetes.version = version.into();
        if !gates.is_empty() || !runtime_config.is_empty() {
            shoot.spec.kubernetes.kube_api_server = Some(KubeApiServer {
                feature_gates: gates.iter().map(|g| (g.to_string(), true)).collect(),
                runtime_config: runtime_config
                    .iter()
                    .map(|g| (g.to_string(), true))
                    .collect(),
            });
        }
        shoot
    }

    #[test]
    fn current_versions_use_v1() {
        for version in ["1.30.0", "v1.33.4", "1.36.1", "2.0.0"] {
            assert_eq!(
                policy_api(&shoot(version, &[], &[])),
                Ok(PolicyApi::V1),
                "{version}"
            );
        }
    }

    #[test]
    fn on_1_29_the_beta_api_needs_the_gates_and_the_runtime_config() {
        let all = shoot("1.29.7", BETA_FEATURE_GATES, &[BETA_RUNTIME_CONFIG]);
        assert_eq!(policy_api(&all), Ok(PolicyApi::V1Beta1));

        let without_binding = shoot(
            "1.29.7",
            &["ValidatingAdmissionPolicy"],
            &[BETA_RUNTIME_CONFIG],
        );
        let err = policy_api(&without_binding).unwrap_err().to_string();
        assert!(
            err.starts_with("Shoot.spec.kubernetes.version: \"1.29.7\""),
            "{err}"
        );
        assert!(
            err.contains("featureGates[ServiceAccountTokenPodNodeInfo]: true"),
            "{err}"
        );
        assert!(
            !err.contains("featureGates[ValidatingAdmissionPolicy]"),
            "{err}"
        );
        assert!(!err.contains("runtimeConfig"), "{err}");

        let nothing = policy_api(&shoot("1.29.7", &[], &[]))
            .unwrap_err()
            .to_string();
        assert!(
            nothing.contains("runtimeConfig[admissionregistration.k8s.io/v1beta1]: true"),
            "{nothing}"
        );
    }

    #[test]
    fn older_versions_and_garbage_are_refused_naming_the_version() {
        let old = policy_api(&shoot(
            "1.28.15",
            BETA_FEATURE_GATES,
            &[BETA_RUNTIME_CONFIG],
        ))
        .unwrap_err()
        .to_string();
        assert!(old.contains("\"1.28.15\" is too old"), "{old}");
        assert!(old.contains("upgrade the Shoot to 1.30"), "{old}");
        let garbage = policy_api(&shoot("latest", &[], &[]))
            .unwrap_err()
            .to_string();
        assert!(
            garbage.contains("\"latest\" is not a Kubernetes version"),
            "{garbage}"
        );
        let empty = policy_api(&shoot("", &[], &[])).unwrap_err().to_string();
        assert!(
            empty.contains("\"\" is not a Kubernetes version"),
            "{empty}"
        );
    }
}
