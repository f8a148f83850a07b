//! HTTP JSON-RPC 2.0: parsing, batches, dispatch, Agave's error objects.

use {
    super::{
        errors::{error_response, RpcError},
        methods,
        params::Params,
        Node,
    },
    axum::{
        body::Bytes,
        extract::{DefaultBodyLimit, State},
        http::{header, StatusCode},
        response::{IntoResponse, Response},
        routing::{get, post},
        Router,
    },
    serde_json::{json, Value},
    std::{panic::AssertUnwindSafe, sync::Arc},
};

/// Largest request body accepted (Agave's MAX_REQUEST_BODY_SIZE); larger ones get HTTP 413.
pub const MAX_REQUEST_BODY_SIZE: usize = 50 * (1 << 20);

pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/", post(handle))
        .route("/health", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY_SIZE))
        .with_state(node)
}

async fn handle(State(node): State<Arc<Node>>, body: Bytes) -> Response {
    let out = tokio::task::spawn_blocking(move || handle_body(&node, &body)).await;
    match out {
        Ok(Some(v)) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Ok(None) => StatusCode::OK.into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response(),
    }
}

/// The response to a raw request body (None: only notifications, nothing to answer).
pub fn handle_body(node: &Node, body: &[u8]) -> Option<Value> {
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Some(error_response(Value::Null, &RpcError::parse_error())),
    };
    match request {
        Value::Array(items) if items.is_empty() => Some(error_response(Value::Null, &RpcError::invalid_request())),
        Value::Array(items) => {
            let out: Vec<Value> = items.into_iter().filter_map(|r| handle_one(node, r)).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        other => handle_one(node, other),
    }
}

/// One request object. Requests without an id are notifications: run, not answered.
pub fn handle_one(node: &Node, request: Value) -> Option<Value> {
    let Value::Object(mut req) = request else {
        return Some(error_response(Value::Null, &RpcError::invalid_request()));
    };
    let id = req.remove("id");
    let reply_id = match &id {
        Some(v @ (Value::Number(_) | Value::String(_) | Value::Null)) => v.clone(),
        Some(_) => return Some(error_response(Value::Null, &RpcError::invalid_request())),
        None => Value::Null,
    };
    let method = match (req.get("jsonrpc"), req.get("method")) {
        (Some(Value::String(v)), Some(Value::String(m))) if v == "2.0" => m.clone(),
        _ => return Some(error_response(reply_id, &RpcError::invalid_request())),
    };
    let result = Params::new(req.remove("params")).and_then(|params| {
        std::panic::catch_unwind(AssertUnwindSafe(|| methods::call(node, &method, params)))
            .unwrap_or_else(|_| Err(RpcError::internal("Internal error")))
    });
    id.as_ref()?;
    Some(match result {
        Ok(value) => json!({ "jsonrpc": "2.0", "result": value, "id": reply_id }),
        Err(e) => error_response(reply_id, &e),
    })
}
