//! The chart's RBAC is exactly what the controller uses. The rules `helm template` renders are
//! bound to the controller's own identity in the seed (`containerd-shim-controller`, which has
//! no other permissions), the real binary runs with that identity through a whole Extension
//! lifecycle, and the seed's audit log of that identity's requests is compared with the rules
//! in both directions: nothing was forbidden, and nothing granted went unused.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use gardener_extension_containerd_shim::gardener::api::{
    Cluster, ConditionStatus, Extension, ManagedResource,
};
use gardener_extension_containerd_shim::shim::identity::{COMPONENT, MANAGED_RESOURCE};
use gardener_extension_containerd_shim::shim::osc_webhook::{CONFIGURATION, PATH};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::process::Replica;
use crate::support::{self, gardenlet, objects, poll};

#[path = "../support/helm.rs"]
mod helm;

use helm::Grant;

/// The identity `hack/control-plane.sh` gives the controller (SEED_CONTROLLER_KUBECONFIG).
const CONTROLLER_USER: &str = "containerd-shim-controller";
const EXTENSION: &str = "containerd-shim";
/// The webhook's certificate Secret in the release namespace.
const WEBHOOK_CERTS: &str = "gardener-extension-containerd-shim-webhook-certs";
const GARBAGE_COLLECTABLE_LABEL: &str = "resources.gardener.cloud/garbage-collectable-reference";

fn config(shims: Value) -> Value {
    json!({"apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
           "kind": "ContainerdShimConfig", "shims": shims})
}

#[tokio::test]
async fn the_charts_rbac_grants_exactly_what_the_controller_uses() {
    let c = support::Clusters::connect().await;
    // Earlier tests leave Extensions behind, which the binary would watch, and bundles that
    // share the shoot objects with ours.
    crate::support::bundles::remove_leftovers(&c.seed, &c.shoot).await;

    // The chart, rendered for a release namespace of this test.
    let release_ns = support::unique_name("extension-containerd-shim");
    support::create_namespace(&c.seed, &release_ns, &[]).await;
    let rendered = helm::template("containerd-shim", &release_ns, &[]);
    let cluster_rules = helm::find(&rendered, "ClusterRole", None)["rules"].clone();
    let role_rules = helm::find(&rendered, "Role", None)["rules"].clone();
    let role_grants = helm::grants(&role_rules);
    let granted: BTreeSet<Scoped> = scoped(&helm::grants(&cluster_rules), Scope::Cluster)
        .union(&scoped(&role_grants, Scope::ReleaseNamespace))
        .cloned()
        .collect();
    // No cluster-wide read of Secrets: the controller reads the secrets it knows by name.
    let secret_reads: Vec<String> = show(&granted)
        .into_iter()
        .filter(|g| g.starts_with("list core/secrets") || g.starts_with("watch core/secrets"))
        .collect();
    assert!(
        secret_reads.is_empty(),
        "the chart lets the controller read every Secret: {secret_reads:?}"
    );
    let rbac = bind_to_controller_user(&c.seed, &release_ns, &cluster_rules, &role_rules).await;
    // The empty webhook configuration the chart owns, as Helm or gardener-resource-manager
    // creates it: the controller may only patch it.
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(c.seed.clone());
    let _ = configurations
        .delete(CONFIGURATION, &DeleteParams::default())
        .await;
    configurations
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                helm::find(
                    &rendered,
                    "MutatingWebhookConfiguration",
                    Some(CONFIGURATION),
                )
                .clone(),
            )
            .expect("the chart's MutatingWebhookConfiguration"),
        )
        .await
        .expect("create the chart's MutatingWebhookConfiguration");

    let audit_start = audit_log_length(&c.env.seed_audit_log);
    // The chart's webhook flags; the port and the certificate directory are this test's.
    let cert_dir = tempfile::tempdir().expect("temp dir");
    let mut flags: Vec<String> = helm::find(&rendered, "Deployment", None)["spec"]["template"]
        ["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with("--webhook-"))
        .map(|a| match a.split_once('=') {
            Some(("--webhook-bind-address", _)) => format!(
                "--webhook-bind-address=127.0.0.1:{}",
                support::process::free_port()
            ),
            Some(("--webhook-cert-dir", _)) => {
                format!("--webhook-cert-dir={}", cert_dir.path().display())
            }
            // Soon enough to see the controller replace a damaged certificate Secret.
            Some(("--webhook-resync-period", _)) => "--webhook-resync-period=1s".to_string(),
            _ => a.to_string(),
        })
        .collect();
    assert!(
        flags.len() >= 5,
        "the chart passes no webhook flags: {flags:?}"
    );
    flags.push("--healthcheck-period=2s".to_string());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut controller = Replica::spawn_with_env(
        "controller",
        &c.env.seed_controller_kubeconfig,
        &release_ns,
        &flags,
        &[("WEBHOOK_CONFIG_NAMESPACE", release_ns.as_str())],
    );
    controller.wait_ready().await;

    webhook_registration(&c.seed, &release_ns).await;
    lifecycle(&c, &c.env.seed_audit_log, audit_start).await;

    // A graceful stop releases the leader-election Lease and ends the watches, so the audit
    // log is complete.
    controller.signal("TERM");
    let status = controller.wait_exit().await;
    assert!(
        status.success(),
        "the controller exited with {status}:\n{}",
        controller.logs()
    );

    let requests = poll::until(
        "the audit log to record the controller's requests",
        poll::DEFAULT_TIMEOUT,
        || async { read_audit_log(&c.env.seed_audit_log, audit_start) },
    )
    .await;
    let forbidden: Vec<String> = requests
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{} {}", r.verb, r.uri))
        .collect();
    assert!(
        forbidden.is_empty(),
        "requests of {CONTROLLER_USER} were forbidden by the chart's RBAC:\n{}",
        forbidden.join("\n")
    );
    // Every request names the binary, its version and the component that sent it, so an
    // operator reading the audit log can tell them apart.
    let prefix = format!(
        "gardener-extension-containerd-shim/{} (",
        env!("CARGO_PKG_VERSION")
    );
    let components: BTreeSet<&str> = requests
        .iter()
        .map(|r| {
            r.user_agent
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(')'))
                .unwrap_or_else(|| {
                    panic!("{} {} sent User-Agent {:?}", r.verb, r.uri, r.user_agent)
                })
        })
        .collect();
    assert_eq!(
        components,
        BTreeSet::from([
            "cache",
            "extension",
            "healthcheck",
            "heartbeat",
            "leader-election",
            "osc-webhook"
        ]),
        "the components seen in the User-Agents"
    );
    // A request in the release namespace that the Role covers used the Role; every other
    // request needed the ClusterRole. So a cluster-wide grant that only the release namespace
    // uses shows up as unused (it belongs in the Role), and a Role grant used elsewhere as not
    // granted.
    let used: BTreeSet<Scoped> = requests
        .iter()
        .filter_map(|r| {
            let grant = r.grant.clone()?;
            let scope = if r.namespace == release_ns && role_grants.contains(&grant) {
                Scope::ReleaseNamespace
            } else {
                Scope::Cluster
            };
            Some((scope, grant))
        })
        .collect();
    eprintln!(
        "{} requests of {CONTROLLER_USER}; used: {:?}",
        requests.len(),
        show(&used)
    );
    let not_granted = show(&used.difference(&granted).cloned().collect());
    assert!(
        not_granted.is_empty(),
        "the controller used what the chart does not grant: {not_granted:?}"
    );
    let unused = show(&granted.difference(&used).cloned().collect());
    assert!(
        unused.is_empty(),
        "the chart grants what the controller never used: {unused:?}\nused: {:?}",
        show(&used)
    );

    // Uninstalling removes the configuration with the release.
    configurations
        .delete(CONFIGURATION, &DeleteParams::default())
        .await
        .expect("delete the MutatingWebhookConfiguration");
    rbac.delete(&c.seed).await;
}

/// The controller fills in the chart's configuration with the Service and its own CA, keeps
/// its certificate in the release namespace's Secret, and replaces that Secret when it is
/// damaged (a new CA, registered again).
async fn webhook_registration(seed: &Client, release_ns: &str) {
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(seed.clone());
    let secrets: Api<Secret> = Api::namespaced(seed.clone(), release_ns);
    let registered_ca = || async {
        let config = configurations
            .get(CONFIGURATION)
            .await
            .map_err(|e| e.to_string())?;
        let webhook = config
            .webhooks
            .and_then(|w| w.into_iter().next())
            .ok_or("no webhook yet")?;
        let service = webhook.client_config.service.ok_or("no service")?;
        assert_eq!(
            (
                service.namespace.as_str(),
                service.name.as_str(),
                service.port,
                service.path.as_deref()
            ),
            (release_ns, COMPONENT, Some(443), Some(PATH))
        );
        let ca = webhook
            .client_config
            .ca_bundle
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        let secret = secrets
            .get(WEBHOOK_CERTS)
            .await
            .map_err(|e| e.to_string())?;
        let stored = secret
            .data
            .and_then(|d| d.get("ca.crt").cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or("no ca.crt in the Secret")?;
        if ca.is_empty() || ca != stored {
            return Err(format!("caBundle {ca:?} is not the Secret's CA {stored:?}"));
        }
        Ok::<String, String>(ca)
    };
    let first = poll::until(
        "the webhook registered with the Secret's CA",
        poll::DEFAULT_TIMEOUT,
        registered_ca,
    )
    .await;
    secrets
        .patch(
            WEBHOOK_CERTS,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"state.json": "bm90IGpzb24="}})),
        )
        .await
        .expect("damage the certificate Secret");
    poll::until(
        "a new CA after the Secret was damaged",
        poll::DEFAULT_TIMEOUT,
        || async {
            let ca = registered_ca().await?;
            if ca == first {
                Err("still the first CA".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
}

/// The Extension's life as gardenlet drives it, arranged so that every code path that needs a
/// permission runs: a live Namespace read (an Extension outside a shoot namespace), a live
/// Cluster read (the Extension before its Cluster), a bundle update that labels a secret of an
/// older release, a migration and restore, and a deletion.
async fn lifecycle(c: &support::Clusters, audit_log: &Path, audit_start: u64) {
    let ns_name = support::unique_name("shoot--rbac--lifecycle");
    support::create_namespace(&c.seed, &ns_name, &[]).await;
    let extensions: Api<Extension> = Api::namespaced(c.seed.clone(), &ns_name);

    // 1. Not (yet) a shoot namespace: the controller reads the Namespace and refuses.
    extensions
        .create(
            &PostParams::default(),
            &objects::extension(
                &ns_name,
                EXTENSION,
                Some(config(json!([{"name": "wasmtime"}]))),
            ),
        )
        .await
        .expect("create Extension");
    poll::until(
        "an error for the Extension outside a shoot namespace",
        poll::DEFAULT_TIMEOUT,
        || async {
            let ext = extensions.get(EXTENSION).await.map_err(|e| e.to_string())?;
            match ext.status.and_then(|s| s.last_error) {
                Some(e) => Ok(e),
                None => Err("no lastError yet".to_string()),
            }
        },
    )
    .await;

    // 2. A shoot namespace without its Cluster: the controller looks for it (404) and retries.
    Api::<Namespace>::all(c.seed.clone())
        .patch(
            &ns_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gardener.cloud/role": "shoot"}}})),
        )
        .await
        .expect("label the shoot namespace");
    let ts = gardenlet::request_reconcile(&extensions, EXTENSION).await;
    poll::until(
        "the controller to look for the missing Cluster",
        poll::DEFAULT_TIMEOUT,
        || async {
            let requests = read_audit_log(audit_log, audit_start)?;
            requests
                .iter()
                .find(|r| {
                    r.verb == "get"
                        && r.resource == "clusters"
                        && r.name == ns_name
                        && r.code == 404
                })
                .map(|_| ())
                .ok_or_else(|| "no GET of the Cluster yet".to_string())
        },
    )
    .await;

    // 3. The Cluster appears: the retry succeeds, the bundle reaches the shoot, health is written.
    Api::<Cluster>::all(c.seed.clone())
        .create(
            &PostParams::default(),
            &objects::cluster(&ns_name, objects::shoot("rbac")),
        )
        .await
        .expect("create Cluster");
    gardenlet::wait_ready(&extensions, EXTENSION, Some(&ts)).await;
    crate::support::bundles::wait_runtime_class(&c.shoot, "wasmtime").await;
    gardenlet::wait_condition(
        &extensions,
        EXTENSION,
        "SystemComponentsHealthy",
        "True",
        |c| c.status == ConditionStatus::True,
    )
    .await;

    // 4. The bundle's secret looks like one an older release wrote (not garbage-collectable);
    //    a configuration change writes a new secret, updates the ManagedResource and labels the
    //    old secret.
    let mrs: Api<ManagedResource> = Api::namespaced(c.seed.clone(), &ns_name);
    let secrets: Api<Secret> = Api::namespaced(c.seed.clone(), &ns_name);
    let old_secret = mrs
        .get(MANAGED_RESOURCE)
        .await
        .expect("the ManagedResource")
        .spec
        .secret_refs[0]
        .name
        .clone();
    secrets
        .patch(
            &old_secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {GARBAGE_COLLECTABLE_LABEL: null}}})),
        )
        .await
        .expect("unlabel the bundle secret");
    extensions
        .patch(
            EXTENSION,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerConfig":
                config(json!([{"name": "wasmtime"}, {"name": "spin"}]))}})),
        )
        .await
        .expect("change the providerConfig");
    let ts = gardenlet::request_reconcile(&extensions, EXTENSION).await;
    gardenlet::wait_ready(&extensions, EXTENSION, Some(&ts)).await;
    crate::support::bundles::wait_runtime_class(&c.shoot, "wasmtime-spin-v2").await;
    let relabelled = secrets
        .get_opt(&old_secret)
        .await
        .expect("read the old secret");
    if let Some(secret) = relabelled {
        assert_eq!(
            secret
                .labels()
                .get(GARBAGE_COLLECTABLE_LABEL)
                .map(String::as_str),
            Some("true"),
            "the old secret is labelled for gardener-resource-manager's garbage collection"
        );
    }

    // 5. Control-plane migration: the ManagedResource leaves the seed, the shoot objects stay.
    gardenlet::request_operation(&extensions, EXTENSION, "migrate").await;
    gardenlet::wait_migrated(&extensions, EXTENSION).await;
    assert!(
        mrs.get_opt(MANAGED_RESOURCE)
            .await
            .expect("read MR")
            .is_none()
    );

    // 6. Restore on the same seed brings the ManagedResource back.
    let ts = gardenlet::request_operation(&extensions, EXTENSION, "restore").await;
    gardenlet::wait_ready(&extensions, EXTENSION, Some(&ts)).await;
    assert!(
        mrs.get_opt(MANAGED_RESOURCE)
            .await
            .expect("read MR")
            .is_some()
    );

    // 7. Deletion: uninstall (no nodes, so immediately clean), then the bundle goes, then the
    //    finalizer.
    gardenlet::delete(&extensions, EXTENSION).await;
    gardenlet::wait_deleted(&extensions, EXTENSION).await;
    poll::until(
        "the RuntimeClasses to leave the shoot",
        poll::DEFAULT_TIMEOUT,
        || async {
            let rcs = Api::<RuntimeClass>::all(c.shoot.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let left: Vec<String> = rcs
                .items
                .iter()
                .map(|r| r.name_any())
                .filter(|n| n == "wasmtime" || n == "wasmtime-spin-v2")
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still there: {left:?}"))
            }
        },
    )
    .await;
}

/// The RBAC objects this test created; deleted at the end.
struct BoundRbac {
    cluster_role: String,
    namespace: String,
    role: String,
}

impl BoundRbac {
    async fn delete(self, seed: &Client) {
        let dp = DeleteParams::default();
        Api::<ClusterRoleBinding>::all(seed.clone())
            .delete(&self.cluster_role, &dp)
            .await
            .expect("delete ClusterRoleBinding");
        Api::<ClusterRole>::all(seed.clone())
            .delete(&self.cluster_role, &dp)
            .await
            .expect("delete ClusterRole");
        Api::<RoleBinding>::namespaced(seed.clone(), &self.namespace)
            .delete(&self.role, &dp)
            .await
            .expect("delete RoleBinding");
        Api::<Role>::namespaced(seed.clone(), &self.namespace)
            .delete(&self.role, &dp)
            .await
            .expect("delete Role");
    }
}

/// Creates a ClusterRole and a Role (in the release namespace) with the chart's rules, bound to
/// the controller's user instead of the chart's ServiceAccount, and waits until the API server
/// authorizes with them.
async fn bind_to_controller_user(
    seed: &Client,
    namespace: &str,
    cluster_rules: &Value,
    role_rules: &Value,
) -> BoundRbac {
    let cluster_role = support::unique_name("test-containerd-shim-controller");
    let role = cluster_role.clone();
    let subjects =
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CONTROLLER_USER}]);
    let pp = PostParams::default();
    Api::<ClusterRole>::all(seed.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": cluster_role}, "rules": cluster_rules}))
            .expect("ClusterRole"),
        )
        .await
        .expect("create ClusterRole");
    Api::<ClusterRoleBinding>::all(seed.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": cluster_role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": subjects}))
            .expect("ClusterRoleBinding"),
        )
        .await
        .expect("create ClusterRoleBinding");
    Api::<Role>::namespaced(seed.clone(), namespace)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": role, "namespace": namespace}, "rules": role_rules}))
            .expect("Role"),
        )
        .await
        .expect("create Role");
    Api::<RoleBinding>::namespaced(seed.clone(), namespace)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": role, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": subjects}))
            .expect("RoleBinding"),
        )
        .await
        .expect("create RoleBinding");

    // The authorizer sees RBAC objects through its own caches: one request checked per object
    // pair, so the controller's first requests are not forbidden by a lagging cache.
    let reviews: Api<SubjectAccessReview> = Api::all(seed.clone());
    for (verb, group, resource, ns) in [
        ("list", "extensions.gardener.cloud", "extensions", None),
        ("create", "coordination.k8s.io", "leases", Some(namespace)),
    ] {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(CONTROLLER_USER.to_string()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    namespace: ns.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        poll::until(
            &format!("{CONTROLLER_USER} to be allowed to {verb} {resource}"),
            poll::DEFAULT_TIMEOUT,
            || async {
                let answer = reviews
                    .create(&pp, &review)
                    .await
                    .map_err(|e| e.to_string())?;
                match answer.status {
                    Some(s) if s.allowed => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    BoundRbac {
        cluster_role,
        namespace: namespace.to_string(),
        role,
    }
}

/// One request of the controller's user, from the audit log.
#[derive(Debug)]
struct AuditedRequest {
    verb: String,
    resource: String,
    name: String,
    code: u16,
    uri: String,
    user_agent: String,
    /// The namespace of the request; empty for cluster-scoped objects and lists across all
    /// namespaces.
    namespace: String,
    /// What the request needs: None for non-resource URLs (discovery, /version).
    grant: Option<Grant>,
}

/// Where a grant applies: everywhere (ClusterRole) or in the release namespace (Role).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    ReleaseNamespace,
}

type Scoped = (Scope, Grant);

fn scoped(grants: &BTreeSet<Grant>, scope: Scope) -> BTreeSet<Scoped> {
    grants.iter().map(|g| (scope.clone(), g.clone())).collect()
}

fn show(grants: &BTreeSet<Scoped>) -> Vec<String> {
    grants.iter().map(|(s, g)| format!("{g} ({s:?})")).collect()
}

fn audit_log_length(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The controller user's requests recorded after `offset` (one per audit ID, the last stage
/// recorded). Fails while the log has a partial last line.
fn read_audit_log(path: &Path, offset: u64) -> Result<Vec<AuditedRequest>, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let mut by_id: std::collections::BTreeMap<String, AuditedRequest> = Default::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line)
            .map_err(|e| format!("an audit line is not JSON yet ({e}): {line}"))?;
        if event["user"]["username"] != CONTROLLER_USER {
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let object = &event["objectRef"];
        let resource = match (s(&object["resource"]), s(&object["subresource"])) {
            (r, sub) if sub.is_empty() => r,
            (r, sub) => format!("{r}/{sub}"),
        };
        let verb = s(&event["verb"]);
        let grant = (!object.is_null()).then(|| Grant {
            group: s(&object["apiGroup"]),
            resource: resource.clone(),
            verb: verb.clone(),
        });
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16;
        by_id.insert(
            s(&event["auditID"]),
            AuditedRequest {
                verb,
                resource,
                name: s(&object["name"]),
                code,
                uri: s(&event["requestURI"]),
                user_agent: s(&event["userAgent"]),
                namespace: s(&object["namespace"]),
                grant,
            },
        );
    }
    if by_id.is_empty() {
        return Err("no request of the controller recorded yet".to_string());
    }
    Ok(by_id.into_values().collect())
}
