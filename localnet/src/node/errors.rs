//! JSON-RPC error objects with Agave's codes and messages.

use serde_json::{json, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// sendTransaction's preflight simulation failed.
pub const SEND_TRANSACTION_PREFLIGHT_FAILURE: i64 = -32002;
pub const TRANSACTION_SIGNATURE_VERIFICATION_FAILURE: i64 = -32003;
pub const BLOCK_NOT_AVAILABLE: i64 = -32004;
pub const LONG_TERM_STORAGE_SLOT_SKIPPED: i64 = -32009;
pub const MIN_CONTEXT_SLOT_NOT_REACHED: i64 = -32016;

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

pub type RpcResult<T = Value> = Result<T, RpcError>;

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    pub fn parse_error() -> Self {
        Self::new(PARSE_ERROR, "Parse error")
    }
    pub fn invalid_request() -> Self {
        Self::new(INVALID_REQUEST, "Invalid request")
    }
    pub fn method_not_found() -> Self {
        Self::new(METHOD_NOT_FOUND, "Method not found")
    }
    /// A message of Agave's own (e.g. "Invalid param: WrongSize").
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
    /// The message jsonrpc-core gives when the params do not deserialize.
    pub fn invalid_params_serde(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_PARAMS, format!("Invalid params: {detail}."))
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
    pub fn invalid_pubkey(detail: &str) -> Self {
        Self::invalid_params(format!("Invalid param: {detail}"))
    }
    pub fn signature_verification_failure() -> Self {
        Self::new(TRANSACTION_SIGNATURE_VERIFICATION_FAILURE, "Transaction signature verification failure")
    }
    pub fn block_not_available(slot: u64) -> Self {
        Self::new(BLOCK_NOT_AVAILABLE, format!("Block not available for slot {slot}"))
    }
    pub fn slot_skipped(slot: u64) -> Self {
        Self::new(LONG_TERM_STORAGE_SLOT_SKIPPED, format!("Slot {slot} was skipped, or missing in long-term storage"))
    }
    pub fn min_context_slot_not_reached(context_slot: u64) -> Self {
        Self::new(MIN_CONTEXT_SLOT_NOT_REACHED, "Minimum context slot has not been reached")
            .with_data(json!({ "contextSlot": context_slot }))
    }

    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// A full JSON-RPC 2.0 error response.
pub fn error_response(id: Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "error": error.to_json(), "id": id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_objects_have_agave_shape() {
        let e = RpcError::block_not_available(7).to_json();
        assert_eq!(e, json!({"code": -32004, "message": "Block not available for slot 7"}));
        let r = error_response(Value::Null, &RpcError::parse_error());
        assert_eq!(r, json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}));
    }
}
