//! The HTTP endpoints: `/healthz` and `/readyz` on the health address, `/metrics` on the
//! metrics address (one server when both addresses are the same).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::error::RuntimeError;
use super::options::BindAddress;
use super::readiness::{ProbeReport, Readiness};

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The running servers. Each task ends with the server's name, address and the error it
/// stopped with, if any.
pub(crate) type ServerTasks = JoinSet<(&'static str, String, std::io::Result<()>)>;

/// Binds every enabled server (a bind failure is returned before anything is served) and
/// starts serving until `shutdown` is cancelled.
pub(crate) async fn start(
    health: &BindAddress,
    metrics: &BindAddress,
    readiness: Readiness,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> Result<ServerTasks, RuntimeError> {
    let health_routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness);
    let metrics_routes = Router::new()
        .route("/metrics", get(metrics_handler))
        .with_state(registry);

    let mut servers: Vec<(&'static str, &BindAddress, Router)> = Vec::new();
    match (health, metrics) {
        (BindAddress::Disabled, BindAddress::Disabled) => {}
        (h, m) if h == m => {
            servers.push(("health and metrics", h, health_routes.merge(metrics_routes)))
        }
        (h, m) => {
            if *h != BindAddress::Disabled {
                servers.push(("health", h, health_routes));
            }
            if *m != BindAddress::Disabled {
                servers.push(("metrics", m, metrics_routes));
            }
        }
    }

    let mut listeners = Vec::new();
    for (server, address, router) in servers {
        if let Some(listener) = bind(server, address).await? {
            listeners.push((server, listener, router));
        }
    }
    let mut tasks = JoinSet::new();
    for (server, listener, router) in listeners {
        let address = listener
            .local_addr()
            .map_or_else(|_| "unknown address".to_string(), |a| a.to_string());
        tracing::info!(server, address = %address, "Serving");
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let result = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            (server, address, result)
        });
    }
    Ok(tasks)
}

/// Listens on `address`. Without a host, every interface is meant: IPv6 `[::]` (which also
/// accepts IPv4 on Linux), falling back to `0.0.0.0` where IPv6 is unavailable.
pub(crate) async fn bind(
    server: &'static str,
    address: &BindAddress,
) -> Result<Option<TcpListener>, RuntimeError> {
    let error = |source| RuntimeError::Bind {
        server,
        address: address.to_string(),
        source,
    };
    match address {
        BindAddress::Disabled => Ok(None),
        BindAddress::Listen {
            host: Some(host),
            port,
        } => TcpListener::bind((host.as_str(), *port))
            .await
            .map(Some)
            .map_err(error),
        BindAddress::Listen { host: None, port } => {
            let any_v6 = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, *port));
            match TcpListener::bind(any_v6).await {
                Ok(listener) => Ok(Some(listener)),
                Err(_) => {
                    let any_v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, *port));
                    TcpListener::bind(any_v4).await.map(Some).map_err(error)
                }
            }
        }
    }
}

async fn healthz(State(readiness): State<Readiness>) -> Response {
    probe_response(readiness.healthz())
}

async fn readyz(State(readiness): State<Readiness>) -> Response {
    probe_response(readiness.readyz())
}

fn probe_response(report: ProbeReport) -> Response {
    let status = if report.ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        report.body,
    )
        .into_response()
}

async fn metrics_handler(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "Failed to encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let taken = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("cannot bind a free port: {e}"),
        };
        let port = taken.local_addr().map(|a| a.port()).unwrap_or_default();
        let address = BindAddress::Listen {
            host: Some("127.0.0.1".into()),
            port,
        };
        let err = bind("metrics", &address)
            .await
            .expect_err("the port is taken");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("127.0.0.1:{port}")) && msg.contains("metrics"),
            "{msg}"
        );
        assert!(matches!(
            bind("metrics", &BindAddress::Disabled).await,
            Ok(None)
        ));
    }

    #[test]
    fn probe_failures_are_http_500() {
        let response = probe_response(ProbeReport {
            ok: false,
            body: "x".into(),
        });
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let response = probe_response(ProbeReport {
            ok: true,
            body: "ok".into(),
        });
        assert_eq!(response.status(), StatusCode::OK);
    }
}
