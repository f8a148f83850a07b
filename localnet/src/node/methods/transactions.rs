//! sendTransaction, simulateTransaction and the transaction-history methods.

use {
    crate::node::{
        chain::Chain,
        encoding::{encode_account, with_context, AccountOpts, Encoding},
        errors::{RpcError, RpcResult},
        params::{parse_pubkey, parse_signature, Params},
        Node,
    },
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde_json::{json, Value},
    solana_transaction::versioned::VersionedTransaction,
};

const PACKET_DATA_SIZE: usize = 1232;
const MAX_BASE58_SIZE: usize = 1683;
const MAX_BASE64_SIZE: usize = 1644;
const MAX_SIGNATURE_STATUSES: usize = 256;
const MAX_SIGNATURES_FOR_ADDRESS: usize = 1000;
const TX_TYPE: &str = "solana_transaction::versioned::VersionedTransaction";

/// Decodes a wire transaction as Agave's `decode_and_deserialize` does.
pub fn decode_transaction(encoded: &str, encoding: &str) -> RpcResult<VersionedTransaction> {
    let bytes = match encoding {
        "base58" => {
            if encoded.len() > MAX_BASE58_SIZE {
                return Err(RpcError::invalid_params(format!(
                    "base58 encoded {TX_TYPE} too large: {} bytes (max: encoded/raw {MAX_BASE58_SIZE}/{PACKET_DATA_SIZE})",
                    encoded.len()
                )));
            }
            bs58::decode(encoded)
                .into_vec()
                .map_err(|e| RpcError::invalid_params(format!("invalid base58 encoding: {e:?}")))?
        }
        "base64" => {
            if encoded.len() > MAX_BASE64_SIZE {
                return Err(RpcError::invalid_params(format!(
                    "base64 encoded {TX_TYPE} too large: {} bytes (max: encoded/raw {MAX_BASE64_SIZE}/{PACKET_DATA_SIZE})",
                    encoded.len()
                )));
            }
            B64.decode(encoded).map_err(|e| RpcError::invalid_params(format!("invalid base64 encoding: {e:?}")))?
        }
        other => {
            return Err(RpcError::invalid_params(format!(
                "unsupported encoding: {other}. Supported encodings: base58, base64"
            )))
        }
    };
    if bytes.len() > PACKET_DATA_SIZE {
        return Err(RpcError::invalid_params(format!(
            "decoded {TX_TYPE} too large: {} bytes (max: {PACKET_DATA_SIZE} bytes)",
            bytes.len()
        )));
    }
    bincode::deserialize(&bytes).map_err(|e| RpcError::invalid_params(format!("failed to deserialize {TX_TYPE}: {e}")))
}

pub fn send_transaction(node: &Node, p: Params) -> RpcResult<Value> {
    let encoded: String = p.req(0)?;
    let cfg = p.config(1)?;
    let encoding = cfg.get::<String>("encoding")?.unwrap_or_else(|| "base58".into());
    let skip_preflight = cfg.get::<bool>("skipPreflight")?.unwrap_or(false);
    let _: Option<u64> = cfg.get("maxRetries")?;
    if let Some(c) = cfg.0.get("preflightCommitment").cloned() {
        let mut tmp = serde_json::Map::new();
        tmp.insert("commitment".into(), c);
        crate::node::params::Config(tmp).check(u64::MAX)?;
    }
    let tx = Chain::verify(decode_transaction(&encoded, &encoding)?)?;
    let mut chain = node.chain();
    cfg.check(chain.slot)?;
    Ok(json!(chain.send(tx, skip_preflight)?.to_string()))
}

pub fn simulate_transaction(node: &Node, p: Params) -> RpcResult<Value> {
    let encoded: String = p.req(0)?;
    let cfg = p.config(1)?;
    let encoding = cfg.get::<String>("encoding")?.unwrap_or_else(|| "base58".into());
    let sig_verify = cfg.get::<bool>("sigVerify")?.unwrap_or(false);
    let replace = cfg.get::<bool>("replaceRecentBlockhash")?.unwrap_or(false);
    if sig_verify && replace {
        return Err(RpcError::invalid_params("sigVerify may not be used with replaceRecentBlockhash"));
    }
    let tx = decode_transaction(&encoded, &encoding)?;
    let (addresses, opts) = match cfg.0.get("accounts").filter(|v| !v.is_null()) {
        None => (vec![], AccountOpts { encoding: Encoding::Base64, data_slice: None }),
        Some(acc_cfg) => {
            let acc_cfg = crate::node::params::Config(acc_cfg.as_object().cloned().unwrap_or_default());
            let addrs: Vec<String> = acc_cfg.get("addresses")?.unwrap_or_default();
            let addrs = addrs.iter().map(|a| parse_pubkey(a)).collect::<RpcResult<Vec<_>>>()?;
            (addrs, AccountOpts::from_config(&acc_cfg, Encoding::Base64)?)
        }
    };
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let encode = |acc: &solana_account::Account| encode_account(&chain, acc, &opts).unwrap_or(Value::Null);
    let value = chain.simulate(tx, sig_verify, replace, &addresses, &encode)?;
    Ok(with_context(chain.slot, value))
}

pub fn get_signature_statuses(node: &Node, p: Params) -> RpcResult<Value> {
    let sigs: Vec<String> = p.req(0)?;
    if sigs.len() > MAX_SIGNATURE_STATUSES {
        return Err(RpcError::invalid_params(format!("Too many inputs provided; max {MAX_SIGNATURE_STATUSES}")));
    }
    let sigs = sigs.iter().map(|s| parse_signature(s)).collect::<RpcResult<Vec<_>>>()?;
    let _ = p.config(1)?.get::<bool>("searchTransactionHistory")?;
    let chain = node.chain();
    let values: Vec<Value> =
        sigs.iter().map(|s| chain.transaction(s).map_or(Value::Null, |r| chain.status_json(r))).collect();
    Ok(with_context(chain.slot, Value::Array(values)))
}

pub fn get_transaction(node: &Node, p: Params) -> RpcResult<Value> {
    let sig = p.signature(0)?;
    // The second argument is either an encoding string (legacy) or a config object.
    let (encoding, max_version) = match p.raw(1) {
        Some(Value::String(e)) => (e.clone(), None),
        _ => {
            let cfg = p.config(1)?;
            let enc = cfg.get::<String>("encoding")?.unwrap_or_else(|| "json".into());
            if let Some(c) = cfg.get::<String>("commitment")? {
                if c == "processed" {
                    return Err(RpcError::invalid_params("Method does not support commitment below `confirmed`"));
                }
            }
            (enc, cfg.get::<u8>("maxSupportedTransactionVersion")?)
        }
    };
    if !["json", "jsonParsed", "base64", "base58", "binary"].contains(&encoding.as_str()) {
        return Err(RpcError::invalid_params_serde(format!(
            "unknown variant `{encoding}`, expected one of `binary`, `base64`, `base58`, `json`, `jsonParsed`"
        )));
    }
    let chain = node.chain();
    let Some(rec) = chain.transaction(&sig) else {
        return Ok(Value::Null);
    };
    if matches!(rec.tx.message, solana_message::VersionedMessage::V0(_)) && max_version.is_none() {
        return Err(RpcError::new(
            -32015,
            "Transaction version (0) is not supported by the requesting client. Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0",
        ));
    }
    Ok(rec.to_json(&encoding, max_version.is_some()))
}

pub fn get_signatures_for_address(node: &Node, p: Params) -> RpcResult<Value> {
    let address = p.pubkey(0)?;
    let cfg = p.config(1)?;
    let limit = cfg.get::<usize>("limit")?.unwrap_or(MAX_SIGNATURES_FOR_ADDRESS);
    if limit == 0 || limit > MAX_SIGNATURES_FOR_ADDRESS {
        return Err(RpcError::invalid_params(format!("Invalid limit; max {MAX_SIGNATURES_FOR_ADDRESS}")));
    }
    let before = cfg.get::<String>("before")?.map(|s| parse_signature(&s)).transpose()?;
    let until = cfg.get::<String>("until")?.map(|s| parse_signature(&s)).transpose()?;
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let list = chain.signatures_for_address(&address, before.as_ref(), until.as_ref(), limit);
    Ok(Value::Array(
        list.iter()
            .map(|r| {
                json!({
                    "signature": r.signature(),
                    "slot": r.slot,
                    "err": crate::node::record::err_json(&r.err),
                    "memo": null,
                    "blockTime": r.block_time,
                    "confirmationStatus": chain.commitment_of(r.slot).name(),
                })
            })
            .collect(),
    ))
}
