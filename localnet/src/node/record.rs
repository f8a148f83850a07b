//! What the node records per processed transaction (LiteSVM keeps no slot,
//! block time or balances), and how getTransaction / getSignatureStatuses show it.

use {
    super::{chain::Commitment, token::TokenBalance},
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde::{Deserialize, Serialize},
    serde_json::{json, Value},
    solana_message::VersionedMessage,
    solana_transaction::versioned::VersionedTransaction,
    solana_transaction_error::TransactionError,
};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InnerIx {
    pub program_id_index: u8,
    pub accounts: Vec<u8>,
    pub data: Vec<u8>,
    pub stack_height: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TxRecord {
    pub slot: u64,
    pub block_time: i64,
    pub tx: VersionedTransaction,
    pub err: Option<TransactionError>,
    pub fee: u64,
    pub pre_balances: Vec<u64>,
    pub post_balances: Vec<u64>,
    pub pre_token_balances: Vec<TokenBalance>,
    pub post_token_balances: Vec<TokenBalance>,
    pub logs: Vec<String>,
    /// (top-level instruction index, its inner instructions).
    pub inner: Vec<(u8, Vec<InnerIx>)>,
    pub compute_units: u64,
    /// (program id, data) when the transaction set return data.
    pub return_data: Option<(String, Vec<u8>)>,
}

pub fn err_json(err: &Option<TransactionError>) -> Value {
    match err {
        None => Value::Null,
        Some(e) => serde_json::to_value(e).unwrap_or(Value::Null),
    }
}

pub fn status_json(err: &Option<TransactionError>) -> Value {
    match err {
        None => json!({ "Ok": null }),
        Some(_) => json!({ "Err": err_json(err) }),
    }
}

pub fn return_data_json(rd: &Option<(String, Vec<u8>)>) -> Value {
    match rd {
        None => Value::Null,
        Some((program, data)) => {
            json!({ "programId": program, "data": [B64.encode(data), "base64"] })
        }
    }
}

impl TxRecord {
    pub fn signature(&self) -> String {
        self.tx.signatures[0].to_string()
    }

    /// Its signature status, `reached` being the commitment it has reached now and `age` the slots since.
    pub fn status_json(&self, reached: Commitment, age: u64) -> Value {
        json!({
            "slot": self.slot,
            "confirmations": if reached == Commitment::Finalized { Value::Null } else { json!(age) },
            "err": err_json(&self.err),
            "status": status_json(&self.err),
            "confirmationStatus": reached.name(),
        })
    }

    pub fn meta_json(&self) -> Value {
        let inner: Vec<Value> = self
            .inner
            .iter()
            .map(|(index, ixs)| {
                json!({
                    "index": index,
                    "instructions": ixs.iter().map(|ix| json!({
                        "programIdIndex": ix.program_id_index,
                        "accounts": ix.accounts,
                        "data": bs58::encode(&ix.data).into_string(),
                        "stackHeight": ix.stack_height,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut meta = json!({
            "err": err_json(&self.err),
            "status": status_json(&self.err),
            "fee": self.fee,
            "preBalances": self.pre_balances,
            "postBalances": self.post_balances,
            "innerInstructions": inner,
            "logMessages": self.logs,
            "preTokenBalances": self.pre_token_balances.iter().map(TokenBalance::to_json).collect::<Vec<_>>(),
            "postTokenBalances": self.post_token_balances.iter().map(TokenBalance::to_json).collect::<Vec<_>>(),
            "rewards": [],
            "computeUnitsConsumed": self.compute_units,
        });
        if matches!(self.tx.message, VersionedMessage::V0(_)) {
            meta["loadedAddresses"] = json!({ "writable": [], "readonly": [] });
        }
        if self.return_data.is_some() {
            meta["returnData"] = return_data_json(&self.return_data);
        }
        meta
    }

    /// getTransaction's result; `encoding` is "json" or "base64"/"base58".
    pub fn to_json(&self, encoding: &str, with_version: bool) -> Value {
        let transaction = match encoding {
            "base64" => json!([B64.encode(bincode::serialize(&self.tx).unwrap_or_default()), "base64"]),
            "base58" => json!([bs58::encode(bincode::serialize(&self.tx).unwrap_or_default()).into_string(), "base58"]),
            _ => json!({
                "signatures": self.tx.signatures.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "message": message_json(&self.tx.message),
            }),
        };
        let mut v = json!({
            "slot": self.slot,
            "blockTime": self.block_time,
            "meta": self.meta_json(),
            "transaction": transaction,
        });
        if with_version {
            v["version"] = match &self.tx.message {
                VersionedMessage::Legacy(_) => json!("legacy"),
                VersionedMessage::V0(_) => json!(0),
            };
        }
        v
    }
}

/// A message in getTransaction's "json" encoding.
pub fn message_json(message: &VersionedMessage) -> Value {
    let header = message.header();
    let instructions: Vec<Value> = message
        .instructions()
        .iter()
        .map(|ix| {
            json!({
                "programIdIndex": ix.program_id_index,
                "accounts": ix.accounts,
                "data": bs58::encode(&ix.data).into_string(),
                "stackHeight": null,
            })
        })
        .collect();
    let mut v = json!({
        "header": {
            "numRequiredSignatures": header.num_required_signatures,
            "numReadonlySignedAccounts": header.num_readonly_signed_accounts,
            "numReadonlyUnsignedAccounts": header.num_readonly_unsigned_accounts,
        },
        "accountKeys": message.static_account_keys().iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        "recentBlockhash": message.recent_blockhash().to_string(),
        "instructions": instructions,
    });
    if let VersionedMessage::V0(m) = message {
        v["addressTableLookups"] = json!(m
            .address_table_lookups
            .iter()
            .map(|l| json!({
                "accountKey": l.account_key.to_string(),
                "writableIndexes": l.writable_indexes,
                "readonlyIndexes": l.readonly_indexes,
            }))
            .collect::<Vec<_>>());
    }
    v
}
