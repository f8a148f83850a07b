//! Account encodings (base64, base58, jsonParsed) as Agave's `UiAccount`.

use {
    super::{
        chain::Chain,
        errors::{RpcError, RpcResult, INVALID_REQUEST},
        params::Config,
        token,
    },
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde_json::{json, Value},
    solana_account::Account,
};

const MAX_BASE58_BYTES: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Encoding {
    Binary,
    Base58,
    Base64,
    JsonParsed,
}

#[derive(Clone, Copy, Debug)]
pub struct AccountOpts {
    pub encoding: Encoding,
    pub data_slice: Option<(usize, usize)>,
}

impl AccountOpts {
    /// From a config's `encoding` and `dataSlice`; `default` when no encoding is given.
    pub fn from_config(cfg: &Config, default: Encoding) -> RpcResult<Self> {
        let encoding = match cfg.get::<String>("encoding")?.as_deref() {
            None => default,
            Some("binary") => Encoding::Binary,
            Some("base58") => Encoding::Base58,
            Some("base64") => Encoding::Base64,
            Some("jsonParsed") => Encoding::JsonParsed,
            Some("base64+zstd") => {
                return Err(RpcError::invalid_params(
                    "Invalid params: encoding base64+zstd is not supported by gpunet-localnet; use base64.",
                ))
            }
            Some(other) => {
                let expected = "`binary`, `base58`, `base64`, `jsonParsed`, `base64+zstd`";
                return Err(RpcError::invalid_params_serde(format!(
                    "unknown variant `{other}`, expected one of {expected}"
                )));
            }
        };
        let data_slice = match cfg.0.get("dataSlice") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let offset = v.get("offset").and_then(Value::as_u64);
                let length = v.get("length").and_then(Value::as_u64);
                match (offset, length) {
                    (Some(o), Some(l)) => Some((o as usize, l as usize)),
                    _ => return Err(RpcError::invalid_params_serde("missing field `offset` or `length` in dataSlice")),
                }
            }
        };
        Ok(Self { encoding, data_slice })
    }
}

fn slice(data: &[u8], s: Option<(usize, usize)>) -> &[u8] {
    match s {
        None => data,
        Some((offset, length)) => {
            let start = offset.min(data.len());
            let end = offset.saturating_add(length).min(data.len());
            &data[start..end]
        }
    }
}

/// One account as `UiAccount`.
pub fn encode_account(chain: &Chain, acc: &Account, opts: &AccountOpts) -> RpcResult<Value> {
    encode_account_with(&|m| chain.mint_decimals(m), acc, opts)
}

/// [`encode_account`] with the mint lookup (for jsonParsed token accounts) given.
pub fn encode_account_with(
    mint_decimals: &dyn Fn(&solana_pubkey::Pubkey) -> Option<u8>,
    acc: &Account,
    opts: &AccountOpts,
) -> RpcResult<Value> {
    let data = slice(&acc.data, opts.data_slice);
    let encoded = match opts.encoding {
        Encoding::Binary | Encoding::Base58 if data.len() > MAX_BASE58_BYTES => {
            return Err(RpcError::new(
                INVALID_REQUEST,
                format!("Encoded binary (base 58) data should be less than {MAX_BASE58_BYTES} bytes, please use Base64 encoding."),
            ))
        }
        Encoding::Binary => json!(bs58::encode(data).into_string()),
        Encoding::Base58 => json!([bs58::encode(data).into_string(), "base58"]),
        Encoding::Base64 => json!([B64.encode(data), "base64"]),
        Encoding::JsonParsed => match token::json_parsed(&acc.owner, &acc.data, mint_decimals) {
            Some(parsed) => json!({
                "program": token::program_name(&acc.owner),
                "parsed": parsed,
                "space": acc.data.len(),
            }),
            None => json!([B64.encode(data), "base64"]),
        },
    };
    Ok(json!({
        "lamports": acc.lamports,
        "data": encoded,
        "owner": acc.owner.to_string(),
        "executable": acc.executable,
        "rentEpoch": acc.rent_epoch,
        "space": acc.data.len(),
    }))
}

/// `{"context": {"slot", "apiVersion"}, "value": ...}`.
pub fn with_context(slot: u64, value: Value) -> Value {
    json!({ "context": { "slot": slot, "apiVersion": super::API_VERSION }, "value": value })
}

/// PubSub's account encoding: where an RPC call is refused (base58 of more than
/// 128 bytes), Agave's notifications carry this text as the data instead.
pub fn encode_notification_account(
    mint_decimals: &dyn Fn(&solana_pubkey::Pubkey) -> Option<u8>,
    acc: &Account,
    opts: &AccountOpts,
) -> Value {
    encode_account_with(mint_decimals, acc, opts).unwrap_or_else(|_| {
        const TOO_LARGE: &str = "error: data too large for bs58 encoding";
        let empty = Account { data: vec![], ..acc.clone() };
        let mut v = encode_account_with(mint_decimals, &empty, opts).unwrap_or_else(|_| json!({}));
        v["data"] = match opts.encoding {
            Encoding::Binary => json!(TOO_LARGE),
            _ => json!([TOO_LARGE, "base58"]),
        };
        v["space"] = json!(acc.data.len());
        v
    })
}
