//! One RuntimeClass per shim, scheduling only onto nodes the installer has verified.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::node::v1::{Overhead, RuntimeClass, Scheduling};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use crate::desired_shims::{READY_LABEL_VALUE, ready_label};

use super::names;

/// What a RuntimeClass needs from the validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeClassSpec {
    pub name: String,
    pub handler: String,
    pub overhead: BTreeMap<String, Quantity>,
    pub tolerations: Vec<Toleration>,
}

pub fn runtime_class(spec: &RuntimeClassSpec) -> RuntimeClass {
    RuntimeClass {
        metadata: ObjectMeta {
            name: Some(spec.name.clone()),
            labels: Some(names::labels("runtime-class")),
            ..Default::default()
        },
        handler: spec.handler.clone(),
        overhead: (!spec.overhead.is_empty()).then(|| Overhead {
            pod_fixed: Some(spec.overhead.clone()),
        }),
        scheduling: Some(Scheduling {
            // The installer sets this label only after containerd serves the handler, so pods
            // never land on a node where the sandbox cannot start.
            node_selector: Some(BTreeMap::from([(
                ready_label(&spec.handler),
                READY_LABEL_VALUE.to_string(),
            )])),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
        }),
    }
}
