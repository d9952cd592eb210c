//! The `User-Agent` every Kubernetes client of this crate sends: `<binary>/<version>
//! (<component>)`, e.g. `gardener-extension-containerd-shim/0.1.0 (healthcheck)`.
//!
//! The API server records it in its audit log and in its access logs, so an operator can tell
//! this extension's requests (and which of its controllers made them) from every other
//! client's. kube-rs sends no User-Agent of its own.

use http::HeaderValue;
use http::header::USER_AGENT;
use kube::client::Body;
use kube::{Client, Config};

/// The version of this crate, which both binaries are built from.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A component name that cannot be sent as a header value (a control character).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a valid User-Agent")]
pub struct InvalidUserAgent(pub String);

/// `<binary>/<version> (<component>)`.
pub fn user_agent(binary: &str, component: &str) -> String {
    format!("{binary}/{VERSION} ({component})")
}

fn header(value: &str) -> Result<HeaderValue, InvalidUserAgent> {
    HeaderValue::from_str(value).map_err(|_| InvalidUserAgent(value.to_string()))
}

/// Makes every client built from `config` send `value`.
pub fn set(config: &mut Config, value: &str) -> Result<(), InvalidUserAgent> {
    let value = header(value)?;
    config.headers.retain(|(name, _)| name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(())
}

/// A client that sends `value` as its User-Agent and otherwise is `base`: the same
/// credentials, and the same connection pool, so one client per controller costs no extra
/// connections. `base` must not send a User-Agent of its own (its headers are added after
/// ours). Must be called within a tokio runtime (like building any kube client).
pub fn client_with(base: &Client, value: &str) -> Result<Client, InvalidUserAgent> {
    let service = WithUserAgent {
        inner: base.clone(),
        value: header(value)?,
    };
    Ok(Client::new(service, base.default_namespace()))
}

/// A tower service that sets the header and sends the request through another client.
#[derive(Clone)]
struct WithUserAgent {
    inner: Client,
    value: HeaderValue,
}

impl tower_service::Service<http::Request<Body>> for WithUserAgent {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // The inner client queues the request itself.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        request.headers_mut().insert(USER_AGENT, self.value.clone());
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_binary_version_and_component() {
        assert_eq!(
            user_agent("gardener-extension-containerd-shim", "extension"),
            format!("gardener-extension-containerd-shim/{VERSION} (extension)")
        );
    }

    #[test]
    fn replaces_an_earlier_value_and_refuses_control_characters() {
        let mut config = Config::new("https://127.0.0.1:1".parse().expect("uri"));
        set(&mut config, "a/1 (x)").expect("valid");
        set(&mut config, "a/1 (y)").expect("valid");
        let values: Vec<_> = config
            .headers
            .iter()
            .filter(|(name, _)| name == USER_AGENT)
            .map(|(_, v)| v.to_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(values, ["a/1 (y)"]);
        assert!(set(&mut config, "bad\nvalue").is_err());
    }

    /// The header reaches a real HTTP server, through the wrapper and its base client alike.
    #[tokio::test]
    async fn the_header_is_sent() {
        use axum::http::HeaderMap;
        let app = axum::Router::new().route(
            "/ua",
            axum::routing::get(|headers: HeaderMap| async move {
                let values: Vec<String> = headers
                    .get_all(USER_AGENT)
                    .iter()
                    .map(|v| v.to_str().unwrap_or_default().to_string())
                    .collect();
                values.join("|")
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let config = Config::new(format!("http://{address}").parse().expect("uri"));
        let mut configured = config.clone();
        set(&mut configured, "base/1 (shoot)").expect("valid");
        let configured = Client::try_from(configured).expect("client");
        let base = Client::try_from(config).expect("client");
        let controller = client_with(&base, "base/1 (extension)").expect("valid");
        let get = || http::Request::get("/ua").body(Vec::new()).expect("request");
        assert_eq!(
            configured.request_text(get()).await.expect("configured"),
            "base/1 (shoot)"
        );
        assert_eq!(
            controller.request_text(get()).await.expect("wrapped"),
            "base/1 (extension)"
        );
        assert_eq!(base.request_text(get()).await.expect("base"), "");
        server.abort();
    }
}
