//! How an API request that does not succeed is answered: [`ApiError`], each
//! way with its status, mapped to HTTP in one place; refusals of who asks or
//! what it may do are counted and logged once ([`answer`]).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use clawboard_roles::write_policy::Refusal;
use serde_json::{Value, json};

/// Every way an API request ends other than its answer, each with its status.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    /// No running instance holds the token (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The write policy refused it (403, 400, 413 or 422 by the refusal).
    #[error("{0}")]
    Refused(Refusal),
    /// The zone table or the lanes refused it (403).
    #[error("{message}")]
    Forbidden { message: String, rule: Option<String> },
    /// Not valid (400 for the request itself, 422 for what it names).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unprocessable(String),
    /// What it names does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// It contradicts what exists: an escalation raised already, a status change
    /// the entry's status does not allow (409).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A 403 without a zone rule.
    pub(super) fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::Forbidden { message: message.into(), rule: None }
    }

    /// Refused because of who asks or what it may do (logged and counted), as
    /// opposed to a broken request or a failure.
    fn is_denial(&self) -> bool {
        match self {
            ApiError::Unauthorized(_) | ApiError::Forbidden { .. } => true,
            ApiError::Refused(r) => r.is_denial(),
            _ => false,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Refused(Refusal::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Refused(Refusal::Invalid(_)) | ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Refused(Refusal::BadPath(_)) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Refused(_) | ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::Internal(e.to_string())
    }
}

/// `{"error": …, "rule": …}` with the error's status.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let rule = match &self {
            ApiError::Refused(r) => r.rule().map(str::to_owned),
            ApiError::Forbidden { rule, .. } => rule.clone(),
            _ => None,
        };
        (status, Json(json!({"error": self.to_string(), "rule": rule}))).into_response()
    }
}

/// The answer to a request: `ok` with the value, or the error's status.
pub(super) fn respond(r: Result<Value, ApiError>, ok: StatusCode) -> Response {
    match r {
        Ok(v) => (ok, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// [`respond`] to a role's request; a denial is counted in `refusals` and
/// logged once, naming `who` and `what` it asked.
pub(super) fn answer(
    r: Result<Value, ApiError>,
    ok: StatusCode,
    refusals: &AtomicU64,
    who: &str,
    what: &str,
) -> Response {
    if let Err(e) = r.as_ref()
        && e.is_denial()
    {
        refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(who, "{what} refused: {e}");
    }
    respond(r, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_counted_and_other_failures_are_not() {
        let n = AtomicU64::new(0);
        let status = |r| answer(r, StatusCode::CREATED, &n, "w (instance i)", "entry request").status();
        assert_eq!(status(Ok(json!({}))), StatusCode::CREATED);
        assert_eq!(status(Err(ApiError::Unauthorized("expired".into()))), StatusCode::UNAUTHORIZED);
        assert_eq!(status(Err(ApiError::forbidden("no lane"))), StatusCode::FORBIDDEN);
        assert_eq!(n.load(Ordering::Relaxed), 2);
        assert_eq!(status(Err(ApiError::Unprocessable("kind: missing".into()))), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status(Err(ApiError::NotFound("no entry".into()))), StatusCode::NOT_FOUND);
        assert_eq!(status(Err(ApiError::Conflict("done already".into()))), StatusCode::CONFLICT);
        assert_eq!(status(Err(ApiError::Internal("join".into()))), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(n.load(Ordering::Relaxed), 2, "a broken request or a failure is not a refusal");
    }
}
