//! `admission.k8s.io/v1` AdmissionReview: the request the API server sends, the response we
//! return. Only the fields the webhook reads are decoded; the Shoots stay raw text until
//! [`ShootView`] decodes them (another extension's providerConfig may nest deeper than the JSON
//! decoder's recursion limit; raw text is skipped without one).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::decision::{Verdict, decide};
use super::shoot_view::ShootView;
use crate::shim::config::Catalog;
use crate::shim::config::error::FieldError;

pub const API_VERSION: &str = "admission.k8s.io/v1";
pub const KIND: &str = "AdmissionReview";
/// The group of the Shoots we admit.
pub const SHOOT_GROUP: &str = "core.gardener.cloud";

/// The review as it arrives.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRequest {
    pub api_version: String,
    pub kind: String,
    pub request: Option<Request>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    pub operation: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The review we send back.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewResponse {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub response: Response,
}

#[derive(Debug, PartialEq, Serialize)]
pub struct Response {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A mutating webhook's change: `JSONPatch`.
    #[serde(rename = "patchType", skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// The JSON Patch, base64-encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

#[derive(Debug, PartialEq, Serialize)]
pub struct Status {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

/// Why a body is not an AdmissionReview we can answer at all (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not an AdmissionReview: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("unsupported AdmissionReview {api_version} {kind}: want {API_VERSION} {KIND}")]
    Version { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// What happened to one review, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    AllowedUnchanged(usize),
    Refused(usize),
    /// Not a Shoot create or update: nothing for us to check.
    NotOurs,
    Undecodable,
}

/// Answers one AdmissionReview body.
pub fn answer(body: &[u8], catalog: &Catalog) -> Result<(ReviewResponse, Outcome), ReviewError> {
    let review: ReviewRequest = serde_json::from_slice(body)?;
    if review.api_version != API_VERSION || review.kind != KIND {
        return Err(ReviewError::Version {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    let (response, outcome) = respond(request, catalog);
    Ok((
        ReviewResponse {
            api_version: API_VERSION,
            kind: KIND,
            response,
        },
        outcome,
    ))
}

fn respond(request: Request, catalog: &Catalog) -> (Response, Outcome) {
    let uid = request.uid;
    let is_shoot = request.kind.group == SHOOT_GROUP && request.kind.kind == "Shoot";
    let object = match (&request.object, request.operation.as_str()) {
        (Some(object), "CREATE" | "UPDATE") if is_shoot => object,
        // DELETE, CONNECT or another resource (a webhook configuration broader than ours):
        // nothing the seed would refuse.
        _ => return (allowed(uid, Vec::new()), Outcome::NotOurs),
    };
    let new = match ShootView::from_json(object.get()) {
        Ok(view) => view,
        Err(e) => {
            let message = format!("cannot decode the Shoot: {e}");
            return (
                denied(uid, 400, "BadRequest", message),
                Outcome::Undecodable,
            );
        }
    };
    // An old object we cannot read leaves the update judged as a create.
    let old = request
        .old_object
        .as_ref()
        .filter(|_| request.operation == "UPDATE")
        .and_then(|raw| ShootView::from_json(raw.get()).ok());
    match decide(&new, old.as_ref(), catalog) {
        Verdict::Allowed => (allowed(uid, Vec::new()), Outcome::Allowed),
        Verdict::AllowedUnchanged(errors) => {
            let count = errors.len();
            let warnings = errors
                .iter()
                .map(|e| format!("containerd-shim: {e} (unchanged by this update; the seed reports it until fixed)"))
                .collect();
            (allowed(uid, warnings), Outcome::AllowedUnchanged(count))
        }
        Verdict::Refused(errors) => {
            let count = errors.len();
            (
                denied(uid, 422, "Invalid", message(&errors)),
                Outcome::Refused(count),
            )
        }
    }
}

/// `invalid containerd-shim configuration: <path>: <value> <problem>`, every problem on its
/// own line so that `kubectl apply` shows them as a list.
pub fn message(errors: &[FieldError]) -> String {
    match errors {
        [one] => format!("invalid containerd-shim configuration: {one}"),
        many => {
            let mut text = format!(
                "invalid containerd-shim configuration ({} problems):",
                many.len()
            );
            for error in many {
                text.push_str("\n- ");
                text.push_str(&error.to_string());
            }
            text
        }
    }
}

pub fn allowed(uid: String, warnings: Vec<String>) -> Response {
    Response {
        uid,
        allowed: true,
        status: None,
        warnings,
        patch_type: None,
        patch: None,
    }
}

pub fn denied(uid: String, code: u16, reason: &'static str, message: String) -> Response {
    Response {
        uid,
        allowed: false,
        status: Some(Status {
            code,
            reason,
            message,
        }),
        warnings: Vec::new(),
        patch_type: None,
        patch: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn catalog() -> Catalog {
        Catalog::builtin().unwrap()
    }

    fn shoot(pools: &[&str]) -> Value {
        let workers: Vec<Value> = pools.iter().map(|p| json!({"name": p})).collect();
        json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
               "metadata": {"name": "s", "namespace": "garden-p"},
               "spec": {"extensions": [{"type": "containerd-shim", "providerConfig": {
                   "apiVersion": "containerd-shim.extensions.gardener.cloud/v1alpha1",
                   "kind": "ContainerdShimConfig", "shims": [{"name": "crun", "workerPools": ["a"]}]}}],
                   "kubernetes": {"version": "1.33.2"},
                   "provider": {"type": "local", "workers": workers}}})
    }

    fn review(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
            "uid": "u-1",
            "kind": {"group": SHOOT_GROUP, "version": "v1beta1", "kind": "Shoot"},
            "resource": {"group": SHOOT_GROUP, "version": "v1beta1", "resource": "shoots"},
            "operation": operation, "name": "s", "namespace": "garden-p",
            "object": object, "oldObject": old}})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_valid_shoot_is_allowed_echoing_the_uid() {
        let (response, outcome) =
            answer(&review("CREATE", shoot(&["a"]), None), &catalog()).unwrap();
        assert_eq!(outcome, Outcome::Allowed);
        let text = serde_json::to_value(&response).unwrap();
        assert_eq!(
            text,
            json!({"apiVersion": API_VERSION, "kind": KIND,
                   "response": {"uid": "u-1", "allowed": true}})
        );
    }

    #[test]
    fn an_invalid_shoot_is_refused_with_path_and_value() {
        let (response, outcome) =
            answer(&review("CREATE", shoot(&["b"]), None), &catalog()).unwrap();
        assert_eq!(outcome, Outcome::Refused(1));
        assert!(!response.response.allowed);
        let status = response.response.status.unwrap();
        assert_eq!(status.code, 422);
        assert_eq!(
            status.message,
            "invalid containerd-shim configuration: spec.extensions[0].providerConfig.shims[0].workerPools[0]: \"a\" is not a worker pool of the Shoot (pools: b)"
        );
    }

    #[test]
    fn an_unchanged_invalid_shoot_is_allowed_with_warnings() {
        let mut scaled = shoot(&["b"]);
        scaled["metadata"]["labels"] = json!({"x": "y"});
        let (response, outcome) =
            answer(&review("UPDATE", scaled, Some(shoot(&["b"]))), &catalog()).unwrap();
        assert_eq!(outcome, Outcome::AllowedUnchanged(1));
        assert!(response.response.allowed);
        assert!(response.response.warnings[0].contains("\"a\""));
    }

    #[test]
    fn deletes_and_other_kinds_are_not_ours_and_garbage_is_an_error() {
        let (r, outcome) = answer(&review("DELETE", shoot(&["b"]), None), &catalog()).unwrap();
        assert!(r.response.allowed);
        assert_eq!(outcome, Outcome::NotOurs);
        assert!(matches!(
            answer(b"{}", &catalog()),
            Err(ReviewError::Decode(_))
        ));
        let v1beta1 = json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": KIND}).to_string();
        assert!(matches!(
            answer(v1beta1.as_bytes(), &catalog()),
            Err(ReviewError::Version { .. })
        ));
        let (r, outcome) = answer(
            &review("CREATE", json!({"spec": {"extensions": 1}}), None),
            &catalog(),
        )
        .unwrap();
        assert_eq!(outcome, Outcome::Undecodable);
        assert_eq!(r.response.status.unwrap().code, 400);
    }
}
