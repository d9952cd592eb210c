//! Proof that the harness is real: the seed serves Gardener's CRDs with their validation, and
//! gardener-resource-manager applies ManagedResources from the seed into the shoot.

use std::collections::BTreeMap;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ConditionStatus, Extension, ManagedResource, ManagedResourceSpec,
    managed_resource::LocalObjectReference,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::{self, objects, poll};

#[tokio::test]
async fn seed_stores_gardener_objects_and_validates_them() {
    let c = support::Clusters::connect().await;
    let ns = support::create_shoot_namespace(&c.seed, "harness").await;

    let clusters: Api<Cluster> = Api::all(c.seed.clone());
    clusters
        .create(
            &PostParams::default(),
            &objects::cluster(&ns, objects::shoot("harness")),
        )
        .await
        .expect("create Cluster");
    let cluster = clusters.get(&ns).await.expect("read Cluster back");
    let shoot = cluster
        .shoot()
        .expect("decode Shoot")
        .expect("Shoot present");
    assert_eq!(shoot.spec.provider.workers[0].name, "worker-a");
    assert!(shoot.spec.provider.workers[0].runs_containerd());

    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns);
    let ext = objects::extension(&ns, "containerd-shim", Some(json!({"shims": []})));
    extensions
        .create(&PostParams::default(), &ext)
        .await
        .expect("create Extension");
    let back = extensions
        .get("containerd-shim")
        .await
        .expect("read Extension back");
    assert_eq!(back.spec.type_, "containerd-shim");
    assert_eq!(back.class_or_default(), "shoot");
    assert_eq!(back.spec.provider_config, Some(json!({"shims": []})));

    // The CRD marks spec.type as required: the API server itself must refuse the object.
    let gvk = GroupVersionKind::gvk("extensions.gardener.cloud", "v1alpha1", "Extension");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "extensions");
    let raw: Api<DynamicObject> = Api::namespaced_with(c.seed.clone(), &ns, &ar);
    let mut untyped = DynamicObject::new("no-type", &ar).within(&ns);
    untyped.data = json!({"spec": {"class": "shoot"}});
    let err = raw
        .create(&PostParams::default(), &untyped)
        .await
        .expect_err("an Extension without spec.type must be rejected");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("spec.type"), "{}", status.message);
        }
        other => panic!("expected a validation error from the API server, got {other}"),
    }
}

#[tokio::test]
async fn resource_manager_applies_a_managed_resource_into_the_shoot() {
    let c = support::Clusters::connect().await;
    let ns = support::create_shoot_namespace(&c.seed, "grm").await;
    let target_ns = support::unique_name("grm-target");
    support::create_namespace(&c.shoot, &target_ns, &[]).await;

    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\n  namespace: {target_ns}\ndata:\n  greeting: from-the-seed\n"
    );
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("managedresource-hello".into()),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "data.yaml".to_string(),
            ByteString(manifest.into_bytes()),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(c.seed.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let mr = ManagedResource::new(
        "hello",
        ManagedResourceSpec {
            secret_refs: vec![LocalObjectReference {
                name: "managedresource-hello".into(),
            }],
            ..Default::default()
        },
    );
    let mrs: Api<ManagedResource> = Api::namespaced(c.seed.clone(), &ns);
    mrs.create(&PostParams::default(), &mr)
        .await
        .expect("create ManagedResource");

    let configmaps: Api<ConfigMap> = Api::namespaced(c.shoot.clone(), &target_ns);
    let cm = poll::until(
        "the ConfigMap in the shoot",
        poll::DEFAULT_TIMEOUT,
        || async {
            configmaps
                .get_opt("hello")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not there yet".to_string())
        },
    )
    .await;
    assert_eq!(
        cm.data
            .clone()
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("from-the-seed")
    );
    assert_eq!(
        cm.annotations()
            .get("resources.gardener.cloud/origin")
            .map(String::as_str),
        Some(format!("{ns}/hello").as_str()),
        "gardener-resource-manager stamps its origin annotation"
    );

    poll::until(
        "ResourcesApplied=True and ResourcesHealthy=True",
        poll::DEFAULT_TIMEOUT,
        || async {
            let mr = mrs.get("hello").await.map_err(|e| e.to_string())?;
            let conditions = mr.status.map(|s| s.conditions).unwrap_or_default();
            let is_true = |t: &str| {
                conditions
                    .iter()
                    .any(|c| c.type_ == t && c.status == ConditionStatus::True)
            };
            if is_true("ResourcesApplied") && is_true("ResourcesHealthy") {
                Ok(())
            } else {
                Err(format!("{conditions:?}"))
            }
        },
    )
    .await;
}
