//! The ManagedResource helper against the real control plane: gardener-resource-manager
//! applies what we deliver into the shoot API server and writes its real conditions
//! (contract §3, tests T9a–T9e).

use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{ConditionStatus, ManagedResource};
use gardener_extension_containerd_shim::gardener::managed_resource::secret::{
    GARBAGE_COLLECTABLE_LABEL, reference_annotation_key,
};
use gardener_extension_containerd_shim::gardener::managed_resource::{
    self as mr, Error, Manifest, SecretData, Wait, decode_secret, pack,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::rbac::{self, rule};
use crate::support::{self, audit, poll};

const MR_NAME: &str = "extension-test";
const ORIGIN: &str = "containerd-shim";
/// GRM's finalizer on ManagedResources of the default class.
const GRM_FINALIZER: &str = "resources.gardener.cloud/gardener-resource-manager";

/// Polls quickly: GRM reacts within a second or two, and the default 2 s would only slow
/// the tests down.
fn fast() -> Wait {
    Wait::new(poll::DEFAULT_TIMEOUT).with_interval(Duration::from_millis(200))
}

/// A shoot namespace in the seed for the ManagedResource and a namespace in the shoot for the
/// objects it delivers, both unique to the test.
struct Fixture {
    c: support::Clusters,
    ns: String,
    target: String,
}

impl Fixture {
    async fn new(test: &str) -> Fixture {
        let c = support::Clusters::connect().await;
        let ns = support::create_shoot_namespace(&c.seed, test).await;
        let target = support::unique_name(&format!("mr-{test}"));
        support::create_namespace(&c.shoot, &target, &[]).await;
        Fixture { c, ns, target }
    }

    fn mrs(&self) -> Api<ManagedResource> {
        Api::namespaced(self.c.seed.clone(), &self.ns)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.c.seed.clone(), &self.ns)
    }

    fn shoot_config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.c.shoot.clone(), &self.target)
    }

    fn config_map(&self, name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(self.target.clone()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    async fn mr(&self) -> ManagedResource {
        self.mrs()
            .get(MR_NAME)
            .await
            .expect("read the ManagedResource")
    }

    /// Writes the ManagedResource of `data` as the seed's admin; true when it wrote.
    async fn write(&self, data: &SecretData) -> bool {
        mr::create_or_update_for_shoot(&self.c.seed, &self.ns, MR_NAME, ORIGIN, false, data)
            .await
            .expect("write the ManagedResource")
    }

    /// The secrets in the shoot namespace, whoever wrote them.
    async fn secrets_now(&self) -> Vec<Secret> {
        self.secrets()
            .list(&Default::default())
            .await
            .expect("list secrets")
            .items
    }

    async fn healthy(&self) {
        mr::wait_until(
            &self.c.seed,
            &self.ns,
            MR_NAME,
            fast(),
            mr::Awaited::Healthy,
        )
        .await
        .expect("the ManagedResource becomes healthy");
    }

    /// Writes `data`, which holds `cm`, and waits until GRM reports it healthy and `cm` stands
    /// in the shoot.
    async fn deliver(&self, data: &SecretData, cm: &ConfigMap) -> ConfigMap {
        self.write(data).await;
        self.healthy().await;
        self.delivered(cm).await
    }

    async fn delete_and_wait(&self) {
        mr::delete(&self.c.seed, &self.ns, MR_NAME)
            .await
            .expect("delete");
        mr::wait_until_deleted(&self.c.seed, &self.ns, MR_NAME, fast())
            .await
            .expect("deleted");
    }

    /// Polls until `cm` stands in the shoot with exactly its data.
    async fn delivered(&self, cm: &ConfigMap) -> ConfigMap {
        let name = cm.name_any();
        let data = cm.data.as_ref();
        let api = self.shoot_config_maps();
        poll::until(
            &format!(
                "ConfigMap {}/{name} in the shoot with the delivered data",
                self.target
            ),
            poll::DEFAULT_TIMEOUT,
            || async {
                match api.get_opt(&name).await.map_err(|e| e.to_string())? {
                    Some(found) if found.data.as_ref() == data => Ok(found),
                    other => Err(format!("{:?}", other.map(|cm| cm.data))),
                }
            },
        )
        .await
    }
}

fn cluster_role(name: &str) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        rules: Some(vec![rule("", &["configmaps"], &["get"])]),
        ..Default::default()
    }
}

fn bundle(objects: &[Manifest]) -> SecretData {
    pack(objects.iter().cloned()).expect("pack the objects")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Strings a YAML 1.1 reader (go-yaml in GRM) would retype or split if written carelessly.
const TRICKY: &[(&str, &str)] = &[
    ("yes", "yes"),
    ("on", "on"),
    ("hex", "0x1F"),
    ("octal", "012"),
    ("float", "1e3"),
    ("null", "null"),
    ("tilde", "~"),
    ("empty", ""),
    ("sexagesimal", "1:20"),
    ("separator", "a\n---\nb\n...\n"),
    ("indented", "  leading spaces\nnext\n"),
    ("blank-lines", "a\n\n\nb\n\n"),
    ("no-final-newline", "x\nsecond"),
    (
        "toml",
        "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.spin]\n  runtime_type = 'io.containerd.spin.v2' # c\n",
    ),
    ("crlf", "a\r\nb"),
    ("spaces", " padded "),
    ("only-newline", "\n"),
    ("dash", "- item"),
    ("colon", "key: value"),
    ("hash", "#comment"),
    ("quotes", "'single' \"double\""),
    (
        "indicators",
        "@at `back %pct !tag &anchor *alias ? q | > [a] {b}",
    ),
    ("plus", "+1"),
    ("inf", ".inf"),
    ("nan", ".NaN"),
    ("underscored", "1_000"),
    ("y", "Y"),
    ("no", "NO"),
    ("off", "Off"),
    ("date", "2001-12-14"),
    (
        "long",
        "word word word word word word word word word word word word word word word word word word",
    ),
    ("unicode", "grüße ✓"),
];

/// T9a, T9c, T9e end to end: the secret is named after its data, the ManagedResource has the
/// shoot shape, GRM applies every object unchanged into the shoot and reports it healthy.
#[tokio::test]
async fn shoot_managed_resource_is_applied_into_the_shoot() {
    let f = Fixture::new("mr-apply").await;
    let cm = f.config_map("tricky", TRICKY);
    let role_name = support::unique_name("mr-apply-role");
    let role = cluster_role(&role_name);
    let objects = [
        Manifest::from_resource(&cm).unwrap(),
        Manifest::from_resource(&role).unwrap(),
    ];
    let data = bundle(&objects);

    let wrote = f.write(&data).await;
    assert!(wrote, "a new ManagedResource is a write");

    // T9a: name, immutability, GC label, computed here independently of the library.
    let secrets = f.secrets_now().await;
    assert_eq!(
        secrets.len(),
        1,
        "exactly one secret: {:?}",
        secrets.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    );
    let secret = &secrets[0];
    let stored = secret.data.clone().unwrap_or_default();
    assert_eq!(stored.keys().collect::<Vec<_>>(), vec!["data.yaml.br"]);
    let checksum = sha256_hex(sha256_hex(&stored["data.yaml.br"].0).as_bytes());
    let secret_name = format!("managedresource-{MR_NAME}-{}", &checksum[..8]);
    assert_eq!(secret.name_any(), secret_name);
    assert_eq!(secret.immutable, Some(true));
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        secret
            .labels()
            .get(GARBAGE_COLLECTABLE_LABEL)
            .map(String::as_str),
        Some("true")
    );

    // T9e: the stored data decodes to exactly our objects, each namespaced one with its namespace.
    let decoded = decode_secret(secret).expect("decode the secret");
    let expected: Vec<_> = objects.iter().map(|m| m.value().clone()).collect();
    assert_eq!(decoded, expected);
    assert_eq!(decoded[0]["metadata"]["namespace"], json!(f.target));

    // T9a/T9c: the ManagedResource as stored (raw, to see that `class` is absent, not null).
    let raw_api: Api<DynamicObject> = Api::namespaced_with(
        f.c.seed.clone(),
        &f.ns,
        &ApiResource::erase::<ManagedResource>(&()),
    );
    let raw = raw_api
        .get(MR_NAME)
        .await
        .expect("read the ManagedResource");
    assert!(
        raw.data["spec"].get("class").is_none(),
        "{}",
        raw.data["spec"]
    );
    assert_eq!(
        raw.data["spec"],
        json!({
            "secretRefs": [{"name": secret_name}],
            "injectLabels": {"shoot.gardener.cloud/no-cleanup": "true"},
            "keepObjects": false,
        })
    );
    assert_eq!(raw.labels().get("origin").map(String::as_str), Some(ORIGIN));
    assert_eq!(
        raw.annotations()
            .get(&reference_annotation_key("secret", &secret_name)),
        Some(&secret_name)
    );

    f.healthy().await;
    let status = f.mr().await;
    for condition in ["ResourcesApplied", "ResourcesHealthy"] {
        assert_eq!(
            status.condition(condition).map(|c| c.status),
            Some(ConditionStatus::True),
            "{condition}"
        );
    }

    let applied = f.delivered(&cm).await;
    assert_eq!(
        applied
            .labels()
            .get("shoot.gardener.cloud/no-cleanup")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        applied.annotations().get("resources.gardener.cloud/origin"),
        Some(&format!("{}/{MR_NAME}", f.ns))
    );
    let shoot_role = Api::<ClusterRole>::all(f.c.shoot.clone())
        .get(&role_name)
        .await
        .expect("ClusterRole in the shoot");
    assert_eq!(shoot_role.rules, role.rules);
    assert!(shoot_role.metadata.namespace.is_none());

    f.delete_and_wait().await;
}

/// The seed RBAC the helper needs, for the audited controller identity.
async fn grant_controller(f: &Fixture) -> Client {
    let rules = vec![
        rule("", &["secrets"], &["get", "create", "patch", "delete"]),
        rule(
            "resources.gardener.cloud",
            &["managedresources"],
            &["get", "create", "update", "patch", "delete"],
        ),
    ];
    rbac::grant_controller(&f.c.seed, "managed-resources", &f.ns, vec![], rules).await;
    let controller = support::client_from(&f.c.env.seed_controller_kubeconfig).await;
    let probe: Api<ManagedResource> = Api::namespaced(controller.clone(), &f.ns);
    poll::until(
        "the controller's RBAC to take effect",
        poll::DEFAULT_TIMEOUT,
        || async { probe.get_opt("probe").await.map_err(|e| e.to_string()) },
    )
    .await;
    controller
}

/// The audited requests the controller identity made in the test's namespace between the two
/// marker reads, as (verb, resource, name).
async fn audited_between(f: &Fixture, first: &str, second: &str) -> Vec<(String, String, String)> {
    audit::between_markers(&f.c.env.seed_audit_log, &f.ns, first, second)
        .await
        .into_iter()
        .filter(|r| r.user == rbac::CONTROLLER_USER)
        .map(|r| (r.verb, r.resource, r.name))
        .collect()
}

/// The steady state: a second call with equal objects makes no write request at all.
#[tokio::test]
async fn unchanged_objects_write_nothing() {
    let f = Fixture::new("mr-steady").await;
    let controller = grant_controller(&f).await;
    let cm = f.config_map("steady", &[("k", "v")]);
    let data = bundle(&[Manifest::from_resource(&cm).unwrap()]);
    assert!(
        mr::create_or_update_for_shoot(&controller, &f.ns, MR_NAME, ORIGIN, false, &data)
            .await
            .expect("create")
    );
    // Let GRM add its finalizer and write its status first: those must not look like changes.
    f.healthy().await;
    let before_mr = f.mr().await;
    let secret_name = data.secret_name(MR_NAME);
    let before_secret = f.secrets().get(&secret_name).await.expect("secret");

    let secrets: Api<Secret> = Api::namespaced(controller.clone(), &f.ns);
    let (open, close) = (
        support::unique_name("marker-open"),
        support::unique_name("marker-close"),
    );
    assert!(secrets.get_opt(&open).await.expect("marker").is_none());
    // Packed again from scratch: equal objects must give equal bytes.
    let again = bundle(&[Manifest::from_resource(&cm.clone()).unwrap()]);
    let wrote = mr::create_or_update_for_shoot(&controller, &f.ns, MR_NAME, ORIGIN, false, &again)
        .await
        .expect("update");
    assert!(secrets.get_opt(&close).await.expect("marker").is_none());
    assert!(!wrote, "nothing changed, so nothing may be written");

    let requests = audited_between(&f, &open, &close).await;
    assert!(
        !requests.is_empty(),
        "the helper must at least read; is the audit log recording? {requests:?}"
    );
    let writes: Vec<_> = requests
        .iter()
        .filter(|(verb, _, _)| verb != "get" && verb != "list" && verb != "watch")
        .collect();
    assert!(
        writes.is_empty(),
        "write requests in the steady state: {writes:?}"
    );

    let after_mr = f.mr().await;
    assert_eq!(after_mr.resource_version(), before_mr.resource_version());
    let after_secret = f.secrets().get(&secret_name).await.expect("secret");
    assert_eq!(
        after_secret.resource_version(),
        before_secret.resource_version()
    );
    assert_eq!(f.secrets_now().await.len(), 1);
}

/// T9b: changed objects go into a new secret; the ManagedResource points at it, drops stale
/// references and keeps foreign metadata and GRM's finalizer; the old secret stays for GRM's
/// garbage collector; the shoot object is updated.
#[tokio::test]
async fn changed_objects_move_to_a_new_secret() {
    let f = Fixture::new("mr-change").await;
    let v1 = f.config_map("changing", &[("version", "1")]);
    let data1 = bundle(&[Manifest::from_resource(&v1).unwrap()]);
    assert!(f.write(&data1).await);
    f.healthy().await;
    f.delivered(&v1).await;
    let old_secret = data1.secret_name(MR_NAME);

    // Someone else's metadata, and a stale reference that must go.
    let stale_key = "reference.resources.gardener.cloud/configmap-deadbeef";
    let foreign = json!({"metadata": {
        "labels": {"team": "other"},
        "annotations": {"note": "kept", stale_key: "gone"},
    }});
    f.mrs()
        .patch(MR_NAME, &PatchParams::default(), &Patch::Merge(&foreign))
        .await
        .expect("patch foreign metadata");
    let before = f.mr().await;
    assert!(
        before.finalizers().iter().any(|f| f == GRM_FINALIZER),
        "{:?}",
        before.finalizers()
    );

    let v2 = f.config_map("changing", &[("version", "2")]);
    let data2 = bundle(&[Manifest::from_resource(&v2).unwrap()]);
    let new_secret = data2.secret_name(MR_NAME);
    assert_ne!(new_secret, old_secret);
    assert!(f.write(&data2).await);

    let after = f.mr().await;
    assert_eq!(after.uid(), before.uid(), "updated, not recreated");
    assert_eq!(
        after
            .spec
            .secret_refs
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        vec![new_secret.as_str()]
    );
    let annotations = after.annotations();
    assert_eq!(
        annotations.get(&reference_annotation_key("secret", &new_secret)),
        Some(&new_secret)
    );
    assert!(
        !annotations.contains_key(&reference_annotation_key("secret", &old_secret)),
        "{annotations:?}"
    );
    assert!(!annotations.contains_key(stale_key), "{annotations:?}");
    assert_eq!(annotations.get("note").map(String::as_str), Some("kept"));
    assert_eq!(
        after.labels().get("team").map(String::as_str),
        Some("other")
    );
    assert_eq!(
        after.labels().get("origin").map(String::as_str),
        Some(ORIGIN)
    );
    assert!(
        after.finalizers().iter().any(|f| f == GRM_FINALIZER),
        "{:?}",
        after.finalizers()
    );

    let old = f
        .secrets()
        .get_opt(&old_secret)
        .await
        .expect("read old secret");
    let old = old.expect("the superseded secret is left to GRM's garbage collector");
    assert_eq!(
        old.labels()
            .get(GARBAGE_COLLECTABLE_LABEL)
            .map(String::as_str),
        Some("true")
    );

    f.delivered(&v2).await;
    f.healthy().await;

    // Delete removes every referenced secret; the superseded one is not referenced any more.
    f.delete_and_wait().await;
    assert!(
        f.secrets()
            .get_opt(&new_secret)
            .await
            .expect("read")
            .is_none()
    );
}

/// A caller that has just read the ManagedResource hands it over; when that read is stale (the
/// object changed, or appeared, since), the write conflicts and is done again on a fresh read.
#[tokio::test]
async fn a_stale_read_handed_over_is_read_again() {
    let f = Fixture::new("mr-from").await;
    let v1 = f.config_map("handed", &[("version", "1")]);
    let data1 = bundle(&[Manifest::from_resource(&v1).unwrap()]);
    // Read as absent, then someone created it: the create meets AlreadyExists.
    f.write(&data1).await;
    let v2 = f.config_map("handed", &[("version", "2")]);
    let data2 = bundle(&[Manifest::from_resource(&v2).unwrap()]);
    let shoot_bundle = |data| mr::ShootBundle {
        namespace: &f.ns,
        name: MR_NAME,
        origin: ORIGIN,
        keep_objects: false,
        data,
    };
    // A cache that has not seen it yet: the first-write path creates the secret, meets the
    // ManagedResource and leaves it for an update.
    let before = f.mr().await;
    assert!(
        !mr::create_shoot_bundle(&f.c.seed, &shoot_bundle(&data2))
            .await
            .expect("create meets the existing ManagedResource")
    );
    // gardener-resource-manager writes its status and finalizer meanwhile: the spec is ours.
    let unchanged = f.mr().await;
    assert_eq!(unchanged.metadata.generation, before.metadata.generation);
    assert_eq!(unchanged.spec, before.spec);
    assert!(
        mr::create_shoot_bundle(&f.c.seed, &shoot_bundle(&data2))
            .await
            .is_ok_and(|created| !created),
        "a secret that exists already is checked, not an error"
    );
    assert!(
        mr::update_shoot_bundle(&f.c.seed, None, &shoot_bundle(&data2))
            .await
            .expect("update after an absent read")
    );
    let after = f.mr().await;
    assert_eq!(after.spec.secret_refs[0].name, data2.secret_name(MR_NAME));

    // Read, then changed by someone else: the update meets a conflict.
    let stale = f.mr().await;
    f.mrs()
        .patch(
            MR_NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"team": "other"}}})),
        )
        .await
        .expect("a foreign change");
    let v3 = f.config_map("handed", &[("version", "3")]);
    let data3 = bundle(&[Manifest::from_resource(&v3).unwrap()]);
    assert!(
        mr::update_shoot_bundle(&f.c.seed, Some(stale), &shoot_bundle(&data3))
            .await
            .expect("update after a stale read")
    );
    let after = f.mr().await;
    assert_eq!(after.spec.secret_refs[0].name, data3.secret_name(MR_NAME));
    assert_eq!(
        after.labels().get("team").map(String::as_str),
        Some("other"),
        "the foreign change survives"
    );
    f.delivered(&v3).await;
}

/// T9d, migration: keepObjects is set before the delete, so the shoot objects stay.
#[tokio::test]
async fn keep_objects_then_delete_leaves_the_shoot_objects() {
    let f = Fixture::new("mr-keep").await;
    let cm = f.config_map("kept", &[("k", "v")]);
    let data = bundle(&[Manifest::from_resource(&cm).unwrap()]);
    f.deliver(&data, &cm).await;

    // A second bundle supersedes the first secret; deleting the ManagedResource deletes both.
    let cm = f.config_map("kept", &[("k", "v2")]);
    let data = bundle(&[Manifest::from_resource(&cm).unwrap()]);
    f.deliver(&data, &cm).await;

    mr::set_keep_objects(&f.c.seed, &f.ns, MR_NAME, true)
        .await
        .expect("set keepObjects");
    assert_eq!(f.mr().await.spec.keep_objects, Some(true));
    f.delete_and_wait().await;

    assert!(f.mrs().get_opt(MR_NAME).await.expect("read").is_none());
    assert!(
        f.secrets_now().await.is_empty(),
        "the secrets, the superseded one too, are deleted with the ManagedResource"
    );
    let kept = f
        .shoot_config_maps()
        .get_opt("kept")
        .await
        .expect("read shoot ConfigMap");
    let kept = kept.expect("keepObjects leaves the shoot object in place");
    assert!(kept.metadata.deletion_timestamp.is_none());

    // Both are no-ops once the ManagedResource is gone.
    mr::set_keep_objects(&f.c.seed, &f.ns, MR_NAME, false)
        .await
        .expect("NotFound is ignored");
    mr::delete(&f.c.seed, &f.ns, MR_NAME)
        .await
        .expect("NotFound is ignored");
}

/// T9d, deletion: GRM deletes the shoot objects before it releases its finalizer, and
/// wait_until_deleted returns only once the ManagedResource is gone.
#[tokio::test]
async fn delete_removes_the_shoot_objects_before_the_managed_resource_goes() {
    let f = Fixture::new("mr-delete").await;
    let cm = f.config_map("doomed", &[("k", "v")]);
    let role_name = support::unique_name("mr-delete-role");
    let data = bundle(&[
        Manifest::from_resource(&cm).unwrap(),
        Manifest::from_resource(&cluster_role(&role_name)).unwrap(),
    ]);
    f.deliver(&data, &cm).await;
    assert!(f.mr().await.finalizers().iter().any(|f| f == GRM_FINALIZER));

    f.delete_and_wait().await;

    assert!(f.mrs().get_opt(MR_NAME).await.expect("read").is_none());
    assert!(
        f.shoot_config_maps()
            .get_opt("doomed")
            .await
            .expect("read")
            .is_none(),
        "GRM deletes before releasing its finalizer"
    );
    let roles: Api<ClusterRole> = Api::all(f.c.shoot.clone());
    assert!(roles.get_opt(&role_name).await.expect("read").is_none());
}

/// When GRM cannot finish the deletion, the timeout error carries its DeletionPending message.
#[tokio::test]
async fn wait_until_deleted_times_out_with_grms_message() {
    let f = Fixture::new("mr-stuck").await;
    let cm = f.config_map("held", &[("k", "v")]);
    let data = bundle(&[Manifest::from_resource(&cm).unwrap()]);
    f.deliver(&data, &cm).await;
    let hold = json!({"metadata": {"finalizers": ["test.gardener.cloud/hold"]}});
    f.shoot_config_maps()
        .patch("held", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .expect("hold the shoot object");

    mr::delete(&f.c.seed, &f.ns, MR_NAME).await.expect("delete");
    poll::until(
        "GRM to report the pending deletion",
        poll::DEFAULT_TIMEOUT,
        || async {
            let mr = f.mrs().get(MR_NAME).await.map_err(|e| e.to_string())?;
            match mr.condition("ResourcesApplied") {
                Some(c) if c.reason == "DeletionPending" || c.reason == "DeletionFailed" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    let short = Wait::new(Duration::from_secs(1)).with_interval(Duration::from_millis(200));
    let err = mr::wait_until_deleted(&f.c.seed, &f.ns, MR_NAME, short)
        .await
        .expect_err("the shoot object is held");
    match &err {
        // GRM names the object it is waiting for.
        Error::NotDeleted {
            message: Some(message),
            ..
        } => {
            assert!(
                message.contains(&format!("v1/ConfigMap/{}/held", f.target)),
                "{err}"
            )
        }
        other => panic!("expected NotDeleted with GRM's message, got {other}"),
    }
    assert!(err.to_string().contains(&f.ns), "{err}");

    let release = json!({"metadata": {"finalizers": null}});
    f.shoot_config_maps()
        .patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release");
    mr::wait_until_deleted(&f.c.seed, &f.ns, MR_NAME, fast())
        .await
        .expect("deleted once released");
}

/// T9c, seed variant: class `seed`; the role label only outside shoot namespaces.
#[tokio::test]
async fn seed_variant_has_the_seed_class() {
    let c = support::Clusters::connect().await;
    let garden = support::create_namespace(&c.seed, &support::unique_name("garden-mr"), &[]).await;
    let shoot_ns = support::create_shoot_namespace(&c.seed, "mr-seed").await;
    for ns in [&garden, &shoot_ns] {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("seed-object".into()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let data = bundle(&[Manifest::from_resource(&cm).unwrap()]);
        assert!(
            mr::create_or_update_for_seed(&c.seed, ns, MR_NAME, true, &data)
                .await
                .expect("create")
        );
        assert!(
            !mr::create_or_update_for_seed(&c.seed, ns, MR_NAME, true, &data)
                .await
                .expect("again")
        );
        let mrs: Api<ManagedResource> = Api::namespaced(c.seed.clone(), ns);
        let got = mrs.get(MR_NAME).await.expect("read");
        assert_eq!(got.spec.class.as_deref(), Some("seed"));
        assert_eq!(got.spec.inject_labels, None);
        assert_eq!(got.spec.keep_objects, Some(true));
        let role = got.labels().get("gardener.cloud/role").map(String::as_str);
        if ns == &garden {
            assert_eq!(role, Some("seed-system-component"));
        } else {
            assert_eq!(role, None);
        }
        // This control plane runs no seed-class GRM: nothing holds the object back.
        mr::delete(&c.seed, ns, MR_NAME).await.expect("delete");
        mr::wait_until_deleted(&c.seed, ns, MR_NAME, fast())
            .await
            .expect("deleted");
    }
}

/// gardenlet acts on `origin=gardener`; an extension must not claim it.
#[tokio::test]
async fn the_gardener_origin_is_refused() {
    let f = Fixture::new("mr-origin").await;
    let data = bundle(&[Manifest::from_resource(&f.config_map("x", &[])).unwrap()]);
    let err = mr::create_or_update_for_shoot(&f.c.seed, &f.ns, MR_NAME, "gardener", false, &data)
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::InvalidOrigin { .. }), "{err}");
    assert!(f.secrets_now().await.is_empty(), "nothing written");
}
