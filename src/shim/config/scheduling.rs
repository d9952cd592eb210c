//! Validation of the fields that shape scheduling and the RuntimeClass: overhead,
//! tolerations, node selector and pod annotations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::catalog::CatalogOverhead;
use super::error::{FieldError, FieldPath};
use super::syntax;
use super::types::{Overhead, TaintEffect, Toleration, TolerationOperator};
use crate::desired_shims::READY_LABEL_PREFIX;
use crate::gardener::api::cluster::WORKER_POOL_LABEL;

pub const MAX_TOLERATIONS: usize = 16;
pub const MAX_NODE_SELECTOR: usize = 16;
pub const MAX_POD_ANNOTATIONS: usize = 16;

/// The RuntimeClass `overhead.podFixed` map: the shoot owner's, else the catalog's suggestion.
pub fn overhead(
    requested: Option<&Overhead>,
    suggested: Option<&CatalogOverhead>,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    match requested {
        Some(overhead) => {
            let fixed = path.child("podFixed");
            for (name, value) in [
                ("cpu", &overhead.pod_fixed.cpu),
                ("memory", &overhead.pod_fixed.memory),
            ] {
                let Some(value) = value else { continue };
                match syntax::non_negative_quantity(&value.0) {
                    Ok(()) => {
                        out.insert(name.to_owned(), value.clone());
                    }
                    Err(problem) => {
                        errors.push(FieldError::invalid(&fixed.child(name), &value.0, problem))
                    }
                }
            }
        }
        None => {
            if let Some(suggested) = suggested {
                for (name, value) in [("cpu", &suggested.cpu), ("memory", &suggested.memory)] {
                    if let Some(value) = value {
                        out.insert(name.to_owned(), Quantity(value.clone()));
                    }
                }
            }
        }
    }
    out
}

/// Tolerations as Kubernetes validates them, converted to the API type.
pub fn tolerations(
    requested: &[Toleration],
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Vec<core::Toleration> {
    if requested.len() > MAX_TOLERATIONS {
        errors.push(FieldError::new(
            path,
            format!(
                "{} entries exceed the limit of {MAX_TOLERATIONS}",
                requested.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, toleration) in requested.iter().enumerate() {
        let at = path.index(i);
        let before = errors.len();
        let key = toleration.key.as_deref().unwrap_or("");
        let value = toleration.value.as_deref().unwrap_or("");
        let operator = toleration.operator.unwrap_or(TolerationOperator::Equal);
        if !key.is_empty()
            && let Err(problem) = syntax::qualified_name(key)
        {
            errors.push(FieldError::invalid(&at.child("key"), key, problem));
        }
        if key.is_empty() && operator != TolerationOperator::Exists {
            errors.push(FieldError::invalid(
                &at.child("operator"),
                operator.as_str(),
                "must be Exists when key is empty",
            ));
        }
        match operator {
            TolerationOperator::Exists if !value.is_empty() => errors.push(FieldError::invalid(
                &at.child("value"),
                value,
                "must be empty when operator is Exists",
            )),
            TolerationOperator::Equal => {
                if let Err(problem) = syntax::label_value(value) {
                    errors.push(FieldError::invalid(&at.child("value"), value, problem));
                }
            }
            TolerationOperator::Exists => {}
        }
        if let Some(seconds) = toleration.toleration_seconds
            && toleration.effect != Some(TaintEffect::NoExecute)
        {
            errors.push(FieldError::invalid(
                &at.child("tolerationSeconds"),
                &seconds.to_string(),
                "is only allowed with effect NoExecute",
            ));
        }
        if errors.len() == before {
            out.push(core::Toleration {
                key: toleration.key.clone().filter(|k| !k.is_empty()),
                operator: toleration.operator.map(|o| o.as_str().to_owned()),
                value: toleration.value.clone().filter(|v| !v.is_empty()),
                effect: toleration.effect.map(|e| e.as_str().to_owned()),
                toleration_seconds: toleration.toleration_seconds,
            });
        }
    }
    out
}

/// The shoot owner's node selector: valid label syntax, and none of the labels the extension
/// or the pool selection own.
pub fn node_selector(
    requested: &BTreeMap<String, String>,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<String, String> {
    if requested.len() > MAX_NODE_SELECTOR {
        errors.push(FieldError::new(
            path,
            format!(
                "{} entries exceed the limit of {MAX_NODE_SELECTOR}",
                requested.len()
            ),
        ));
    }
    let mut out = BTreeMap::new();
    for (key, value) in requested {
        let at = path.key(key);
        let before = errors.len();
        if let Err(problem) = syntax::qualified_name(key) {
            errors.push(FieldError::invalid(&at, key, problem));
        } else if key.starts_with(READY_LABEL_PREFIX) {
            errors.push(FieldError::invalid(
                &at,
                key,
                "is a readiness label the extension sets itself after installing a shim",
            ));
        } else if key == WORKER_POOL_LABEL {
            errors.push(FieldError::invalid(
                &at,
                key,
                "selects worker pools; use workerPools instead",
            ));
        }
        if let Err(problem) = syntax::label_value(value) {
            errors.push(FieldError::invalid(&at, value, problem));
        }
        if errors.len() == before {
            out.insert(key.clone(), value.clone());
        }
    }
    out
}

/// The shoot owner's `podAnnotations`, else the catalog default.
pub fn pod_annotations(
    requested: Option<&[String]>,
    default: &[String],
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Vec<String> {
    let Some(requested) = requested else {
        return default.to_vec();
    };
    if requested.len() > MAX_POD_ANNOTATIONS {
        errors.push(FieldError::new(
            path,
            format!(
                "{} entries exceed the limit of {MAX_POD_ANNOTATIONS}",
                requested.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, pattern) in requested.iter().enumerate() {
        if let Err(problem) = syntax::annotation_pattern(pattern) {
            errors.push(FieldError::invalid(&path.index(i), pattern, problem));
        } else if !out.contains(pattern) {
            out.push(pattern.clone());
        }
    }
    out
}
