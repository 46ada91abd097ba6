//! Refusals as HTTP responses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::ToolError;

/// A refusal as JSON: the error's status and `{"error", "reason", "status"}`.
pub(crate) fn json_error(err: &ToolError) -> Response {
    let status =
        StatusCode::from_u16(err.status().code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(err.to_json())).into_response()
}
