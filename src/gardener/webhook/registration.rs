//! The seed's `MutatingWebhookConfiguration` for a webhook this extension serves, and how the
//! API server reaches it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// How the API server reaches the webhook server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Through a Service in the extension's namespace (the extension runs in the seed).
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    /// At `https://<host:port>` (the extension runs outside the cluster, as in a local
    /// control plane).
    Url { host_port: String },
}

impl Endpoint {
    /// The names the serving certificate must carry.
    pub fn certificate_names(&self) -> Vec<String> {
        match self {
            Endpoint::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
            Endpoint::Url { host_port } => {
                let host = match host_port.rsplit_once(':') {
                    Some((host, port)) if port.parse::<u16>().is_ok() => host,
                    _ => host_port.as_str(),
                };
                vec![
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_string(),
                ]
            }
        }
    }

    fn client_config(&self, path: &str, ca_bundle: &str) -> WebhookClientConfig {
        let ca_bundle = Some(ByteString(ca_bundle.as_bytes().to_vec()));
        match self {
            Endpoint::Service {
                namespace,
                name,
                port,
            } => WebhookClientConfig {
                ca_bundle,
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_string()),
                    port: Some(*port),
                }),
                url: None,
            },
            Endpoint::Url { host_port } => WebhookClientConfig {
                ca_bundle,
                service: None,
                url: Some(format!("https://{host_port}{path}")),
            },
        }
    }
}

/// One mutating webhook on one namespaced resource.
#[derive(Clone, Debug)]
pub struct MutatingWebhookSpec<'a> {
    /// The configuration's name and the webhook's (a fully qualified name).
    pub configuration: &'a str,
    pub webhook: &'a str,
    pub path: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    /// Only namespaces with all of these labels.
    pub namespace_labels: BTreeMap<String, String>,
    /// CEL conditions on the request (`object`, `oldObject`, `request`), by name.
    pub conditions: Vec<(&'a str, &'a str)>,
    pub failure_policy: &'a str,
    pub timeout_seconds: i32,
}

/// The configuration with `ca_bundle` (PEM) as the trust for `endpoint`. Create and update
/// only; `sideEffects: None` (the webhook only computes a patch); reinvoked when a later
/// webhook changed the object, so that ours sees the final OSC.
pub fn mutating_configuration(
    spec: &MutatingWebhookSpec<'_>,
    endpoint: &Endpoint,
    ca_bundle: &str,
    labels: BTreeMap<String, String>,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(spec.configuration.to_string()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: spec.webhook.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: endpoint.client_config(spec.path, ca_bundle),
            failure_policy: Some(spec.failure_policy.to_string()),
            match_policy: Some("Equivalent".to_string()),
            match_conditions: Some(
                spec.conditions
                    .iter()
                    .map(|(name, expression)| MatchCondition {
                        name: name.to_string(),
                        expression: expression.to_string(),
                    })
                    .collect(),
            )
            .filter(|c: &Vec<MatchCondition>| !c.is_empty()),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(spec.namespace_labels.clone()),
                match_expressions: None,
            }),
            object_selector: None,
            reinvocation_policy: Some("IfNeeded".to_string()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![spec.group.to_string()]),
                api_versions: Some(vec![spec.version.to_string()]),
                operations: Some(vec!["CREATE".to_string(), "UPDATE".to_string()]),
                resources: Some(vec![spec.resource.to_string()]),
                scope: Some("Namespaced".to_string()),
            }]),
            side_effects: "None".to_string(),
            timeout_seconds: Some(spec.timeout_seconds),
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_names_follow_the_endpoint() {
        let service = Endpoint::Service {
            namespace: "extension-shim".into(),
            name: "webhook".into(),
            port: 443,
        };
        assert_eq!(
            service.certificate_names(),
            vec![
                "webhook.extension-shim.svc",
                "webhook.extension-shim.svc.cluster.local"
            ]
        );
        let url = Endpoint::Url {
            host_port: "127.0.0.1:9443".into(),
        };
        assert_eq!(url.certificate_names(), vec!["127.0.0.1"]);
        let v6 = Endpoint::Url {
            host_port: "[::1]:9443".into(),
        };
        assert_eq!(v6.certificate_names(), vec!["::1"]);
    }

    #[test]
    fn the_configuration_scopes_to_labelled_namespaces_and_its_conditions() {
        let spec = MutatingWebhookSpec {
            configuration: "c",
            webhook: "w.example.com",
            path: "/p",
            group: "g",
            version: "v1",
            resource: "rs",
            namespace_labels: BTreeMap::from([("a".into(), "true".into())]),
            conditions: vec![("x", "object.spec.x == 'y'")],
            failure_policy: "Fail",
            timeout_seconds: 10,
        };
        let endpoint = Endpoint::Url {
            host_port: "127.0.0.1:9443".into(),
        };
        let config = mutating_configuration(&spec, &endpoint, "PEM", BTreeMap::new());
        let webhook = &config.webhooks.as_ref().unwrap()[0];
        assert_eq!(
            webhook.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/p")
        );
        assert_eq!(webhook.client_config.ca_bundle.as_ref().unwrap().0, b"PEM");
        assert_eq!(
            webhook.namespace_selector.as_ref().unwrap().match_labels,
            Some(BTreeMap::from([("a".into(), "true".into())]))
        );
        assert_eq!(webhook.match_conditions.as_ref().unwrap()[0].name, "x");
        assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(webhook.side_effects, "None");
    }
}
