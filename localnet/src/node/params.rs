//! Positional JSON-RPC params with jsonrpc-core / Agave error messages.

use {
    super::errors::{RpcError, RpcResult},
    serde::de::DeserializeOwned,
    serde_json::{Map, Value},
    solana_pubkey::Pubkey,
    solana_signature::Signature,
    std::str::FromStr,
};

pub struct Params(pub Vec<Value>);

impl Params {
    /// `params` absent or null: no arguments; an array: positional; anything else is refused.
    pub fn new(params: Option<Value>) -> RpcResult<Self> {
        match params {
            None | Some(Value::Null) => Ok(Self(vec![])),
            Some(Value::Array(v)) => Ok(Self(v)),
            Some(_) => Err(RpcError::invalid_params_serde("invalid type: map, expected a sequence")),
        }
    }

    pub fn require(&self, n: usize) -> RpcResult<()> {
        if self.0.len() < n {
            return Err(RpcError::invalid_params(format!("`params` should have at least {n} argument(s)")));
        }
        Ok(())
    }

    pub fn raw(&self, i: usize) -> Option<&Value> {
        self.0.get(i).filter(|v| !v.is_null())
    }

    /// Optional argument `i` (absent or null: None).
    pub fn opt<T: DeserializeOwned>(&self, i: usize) -> RpcResult<Option<T>> {
        match self.raw(i) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(RpcError::invalid_params_serde),
        }
    }

    /// Required argument `i`.
    pub fn req<T: DeserializeOwned>(&self, i: usize) -> RpcResult<T> {
        self.require(i + 1)?;
        let v = self.0[i].clone();
        serde_json::from_value(v).map_err(RpcError::invalid_params_serde)
    }

    pub fn pubkey(&self, i: usize) -> RpcResult<Pubkey> {
        let s: String = self.req(i)?;
        parse_pubkey(&s)
    }

    pub fn signature(&self, i: usize) -> RpcResult<Signature> {
        let s: String = self.req(i)?;
        parse_signature(&s)
    }

    /// The config object at `i` (absent or null: empty).
    pub fn config(&self, i: usize) -> RpcResult<Config> {
        match self.raw(i) {
            None => Ok(Config(Map::new())),
            Some(Value::Object(m)) => Ok(Config(m.clone())),
            Some(v) => Err(RpcError::invalid_params_serde(format!("invalid type: {}, expected a map", kind(v)))),
        }
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string \"{s}\""),
        Value::Array(_) => "sequence".into(),
        Value::Object(_) => "map".into(),
    }
}

pub fn parse_pubkey(s: &str) -> RpcResult<Pubkey> {
    Pubkey::from_str(s).map_err(|e| RpcError::invalid_pubkey(&format!("{e:?}")))
}

pub fn parse_signature(s: &str) -> RpcResult<Signature> {
    Signature::from_str(s).map_err(|e| RpcError::invalid_params(format!("Invalid param: {e:?}")))
}

/// A config object (`{"commitment": ..., "encoding": ...}`).
pub struct Config(pub Map<String, Value>);

impl Config {
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> RpcResult<Option<T>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(RpcError::invalid_params_serde),
        }
    }

    /// Validates `commitment` and `minContextSlot` against the current slot.
    pub fn check(&self, slot: u64) -> RpcResult<()> {
        if let Some(c) = self.get::<String>("commitment")? {
            const OK: [&str; 8] =
                ["processed", "confirmed", "finalized", "recent", "single", "singleGossip", "root", "max"];
            if !OK.contains(&c.as_str()) {
                return Err(RpcError::invalid_params_serde(format!(
                    "unknown variant `{c}`, expected one of `processed`, `confirmed`, `finalized`"
                )));
            }
        }
        if let Some(min) = self.get::<u64>("minContextSlot")? {
            if min > slot {
                return Err(RpcError::min_context_slot_not_reached(slot));
            }
        }
        Ok(())
    }
}
