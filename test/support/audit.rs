//! Reading the seed API server's audit log (`SEED_AUDIT_LOG` of the control plane): what a
//! piece of code asked of the API server, request by request.

use std::path::Path;

use serde_json::Value;

use super::poll;

/// One completed request as the audit log records it.
#[derive(Clone, Debug)]
pub struct Request {
    pub user: String,
    pub verb: String,
    /// The resource, with `/<subresource>` when the request went to one.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub user_agent: String,
}

/// Every completed request logged from byte `from` of the log on.
pub fn completed(log: &Path, from: usize) -> Vec<Request> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.get(from..)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let object = &e["objectRef"];
            let mut resource = text(&object["resource"]);
            if let Some(sub) = object["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            Request {
                user: text(&e["user"]["username"]),
                verb: text(&e["verb"]),
                resource,
                namespace: text(&object["namespace"]),
                name: text(&object["name"]),
                user_agent: text(&e["userAgent"]),
            }
        })
        .collect()
}

/// The completed requests in `ns` between two marker reads (reads of objects named `open` and
/// `close` that need not exist). Waits until the closing marker is logged, so that every
/// request made before it has been logged too.
pub async fn between_markers(log: &Path, ns: &str, open: &str, close: &str) -> Vec<Request> {
    poll::until(
        "the audit log to record the closing marker",
        poll::DEFAULT_TIMEOUT,
        || async {
            let mut inside = false;
            let mut seen = Vec::new();
            for request in completed(log, 0) {
                if request.namespace != ns {
                    continue;
                }
                if request.name == open {
                    inside = true;
                } else if request.name == close {
                    return if inside {
                        Ok(seen)
                    } else {
                        Err("closing marker before the opening one".to_string())
                    };
                } else if inside {
                    seen.push(request);
                }
            }
            Err(format!("marker {close} not logged yet"))
        },
    )
    .await
}
