//! Acting as the node installer against an API server: its ServiceAccount, with the node name
//! the API server binds into the installer's token, impersonated by the admin of a kubeconfig.

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client that acts as the installer of `node`, from an admin `kubeconfig`.
pub async fn installer_on(mut kubeconfig: Kubeconfig, node: &str) -> Client {
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate =
                Some("system:serviceaccount:kube-system:containerd-shim-installer".into());
            auth.impersonate_groups = Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:kube-system".into(),
                "system:authenticated".into(),
            ]);
            auth.impersonate_user_extra = Some(
                [(
                    "authentication.kubernetes.io/node-name".to_string(),
                    vec![node.to_string()],
                )]
                .into(),
            );
        }
    }
    client_of(kubeconfig).await
}

/// A client from a kubeconfig's current context.
pub async fn client_of(kubeconfig: Kubeconfig) -> Client {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// The message of a request the API server refused (403, or 422 from an admission policy);
/// an error describing anything else.
pub fn denied<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Result<String, String> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 422 => {
            Ok(status.message)
        }
        other => Err(format!("expected a denial, got {other:?}")),
    }
}

/// Polls `request` until the API server refuses it with a message containing `expected`: the
/// API server loads RBAC objects, admission policies and their bindings through informers, each
/// in its own time. Pass a dry-run request where an attempt that slips through before the
/// refusal is in place would change something.
pub async fn until_refused<T, F, Fut>(what: &str, expected: &str, request: F)
where
    T: std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    crate::support::poll::until(
        &format!("{what} refused"),
        crate::support::poll::DEFAULT_TIMEOUT,
        || async {
            let message = denied(request().await)?;
            if message.contains(expected) {
                Ok(())
            } else {
                Err(format!("refused, but not with {expected:?}: {message}"))
            }
        },
    )
    .await;
}
