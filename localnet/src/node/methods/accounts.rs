//! Account, program-account and SPL Token methods, and requestAirdrop.

use {
    crate::node::{
        encoding::{encode_account, with_context, AccountOpts, Encoding},
        errors::{RpcError, RpcResult},
        params::{parse_pubkey, Config, Params},
        token, Node,
    },
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde_json::{json, Value},
    solana_account::{Account, ReadableAccount},
    solana_pubkey::Pubkey,
};

const MAX_MULTIPLE_ACCOUNTS: usize = 100;
const MAX_FILTERS: usize = 4;

pub fn request_airdrop(node: &Node, p: Params) -> RpcResult<Value> {
    let to = p.pubkey(0)?;
    let lamports: u64 = p.req(1)?;
    let mut chain = node.chain();
    p.config(2)?.check(chain.slot)?;
    Ok(json!(chain.airdrop(&to, lamports)?.to_string()))
}

pub fn get_balance(node: &Node, p: Params) -> RpcResult<Value> {
    let key = p.pubkey(0)?;
    let chain = node.chain();
    p.config(1)?.check(chain.slot)?;
    Ok(with_context(chain.slot, json!(chain.get_account(&key).map_or(0, |a| a.lamports))))
}

pub fn get_account_info(node: &Node, p: Params) -> RpcResult<Value> {
    let key = p.pubkey(0)?;
    let cfg = p.config(1)?;
    let opts = AccountOpts::from_config(&cfg, Encoding::Binary)?;
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let value = match chain.get_account(&key) {
        Some(acc) => encode_account(&chain, &acc, &opts)?,
        None => Value::Null,
    };
    Ok(with_context(chain.slot, value))
}

pub fn get_multiple_accounts(node: &Node, p: Params) -> RpcResult<Value> {
    let keys: Vec<String> = p.req(0)?;
    if keys.len() > MAX_MULTIPLE_ACCOUNTS {
        return Err(RpcError::invalid_params(format!("Too many inputs provided; max {MAX_MULTIPLE_ACCOUNTS}")));
    }
    let keys = keys.iter().map(|k| parse_pubkey(k)).collect::<RpcResult<Vec<_>>>()?;
    let cfg = p.config(1)?;
    let opts = AccountOpts::from_config(&cfg, Encoding::Base64)?;
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let values = keys
        .iter()
        .map(|k| chain.get_account(k).map_or(Ok(Value::Null), |a| encode_account(&chain, &a, &opts)))
        .collect::<RpcResult<Vec<_>>>()?;
    Ok(with_context(chain.slot, Value::Array(values)))
}

pub enum Filter {
    DataSize(usize),
    Memcmp(usize, Vec<u8>),
}

pub fn parse_filters(cfg: &Config) -> RpcResult<Vec<Filter>> {
    let Some(list) = cfg.get::<Vec<Value>>("filters")? else {
        return Ok(vec![]);
    };
    if list.len() > MAX_FILTERS {
        return Err(RpcError::invalid_params(format!("Too many filters provided; max {MAX_FILTERS}")));
    }
    list.iter()
        .map(|f| {
            if let Some(n) = f.get("dataSize") {
                let n = n
                    .as_u64()
                    .ok_or_else(|| RpcError::invalid_params_serde("invalid type for dataSize, expected u64"))?;
                return Ok(Filter::DataSize(n as usize));
            }
            if let Some(m) = f.get("memcmp") {
                let offset = m
                    .get("offset")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| RpcError::invalid_params_serde("missing field `offset`"))?;
                let bytes = m
                    .get("bytes")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params_serde("missing field `bytes`"))?;
                let bytes = match m.get("encoding").and_then(Value::as_str).unwrap_or("base58") {
                    "base58" if bytes.len() > 175 => {
                        return Err(RpcError::invalid_params("Invalid param: Base58DataTooLarge"))
                    }
                    "base58" => bs58::decode(bytes)
                        .into_vec()
                        .map_err(|_| RpcError::invalid_params("Invalid param: DecodeError"))?,
                    "base64" => {
                        B64.decode(bytes).map_err(|_| RpcError::invalid_params("Invalid param: DecodeError"))?
                    }
                    other => {
                        return Err(RpcError::invalid_params_serde(format!(
                            "unknown variant `{other}`, expected `base58` or `base64`"
                        )))
                    }
                };
                if bytes.len() > 128 {
                    return Err(RpcError::invalid_params("Invalid param: DataTooLarge"));
                }
                return Ok(Filter::Memcmp(offset as usize, bytes));
            }
            Err(RpcError::invalid_params_serde("unknown filter, expected `dataSize` or `memcmp`"))
        })
        .collect()
}

pub fn matches(filters: &[Filter], data: &[u8]) -> bool {
    filters.iter().all(|f| match f {
        Filter::DataSize(n) => data.len() == *n,
        Filter::Memcmp(offset, bytes) => {
            data.get(*offset..offset.saturating_add(bytes.len())) == Some(bytes.as_slice())
        }
    })
}

fn keyed(chain: &crate::node::chain::Chain, key: &Pubkey, acc: &Account, opts: &AccountOpts) -> RpcResult<Value> {
    Ok(json!({ "pubkey": key.to_string(), "account": encode_account(chain, acc, opts)? }))
}

pub fn get_program_accounts(node: &Node, p: Params) -> RpcResult<Value> {
    let program = p.pubkey(0)?;
    let cfg = p.config(1)?;
    let opts = AccountOpts::from_config(&cfg, Encoding::Binary)?;
    let filters = parse_filters(&cfg)?;
    let with_ctx = cfg.get::<bool>("withContext")?.unwrap_or(false);
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let mut found: Vec<(Pubkey, Account)> = chain
        .all_accounts()
        .filter(|(_, a)| *a.owner() == program && matches(&filters, a.data()))
        .map(|(k, a)| (*k, Account::from(a.clone())))
        .collect();
    found.sort_by_key(|(k, _)| *k);
    let values = found.iter().map(|(k, a)| keyed(&chain, k, a, &opts)).collect::<RpcResult<Vec<_>>>()?;
    Ok(if with_ctx { with_context(chain.slot, Value::Array(values)) } else { Value::Array(values) })
}

pub fn get_token_account_balance(node: &Node, p: Params) -> RpcResult<Value> {
    let key = p.pubkey(0)?;
    let chain = node.chain();
    p.config(1)?.check(chain.slot)?;
    let acc =
        chain.get_account(&key).ok_or_else(|| RpcError::invalid_params("Invalid param: could not find account"))?;
    let ta = token::parse_token_account(&acc.owner, &acc.data)
        .ok_or_else(|| RpcError::invalid_params("Invalid param: not a Token account"))?;
    let decimals =
        chain.mint_decimals(&ta.mint).ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
    Ok(with_context(chain.slot, token::ui_token_amount(ta.amount, decimals)))
}

pub fn get_token_supply(node: &Node, p: Params) -> RpcResult<Value> {
    let key = p.pubkey(0)?;
    let chain = node.chain();
    p.config(1)?.check(chain.slot)?;
    let acc = chain.get_account(&key).ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
    let mint = token::parse_mint(&acc.owner, &acc.data)
        .ok_or_else(|| RpcError::invalid_params("Invalid param: not a Token mint"))?;
    Ok(with_context(chain.slot, token::ui_token_amount(mint.supply, mint.decimals)))
}

pub fn get_token_accounts_by_owner(node: &Node, p: Params) -> RpcResult<Value> {
    let owner = p.pubkey(0)?;
    p.require(2)?;
    let filter = p.config(1)?;
    let cfg = p.config(2)?;
    let opts = AccountOpts::from_config(&cfg, Encoding::Binary)?;
    let chain = node.chain();
    cfg.check(chain.slot)?;
    let (program, mint) = match (filter.get::<String>("mint")?, filter.get::<String>("programId")?) {
        (Some(m), None) => {
            let mint = parse_pubkey(&m)?;
            let acc = chain
                .get_account(&mint)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
            if !token::is_token_program(&acc.owner) {
                return Err(RpcError::invalid_params("Invalid param: not a Token mint"));
            }
            (acc.owner, Some(mint))
        }
        (None, Some(pid)) => {
            let pid = parse_pubkey(&pid)?;
            if !token::is_token_program(&pid) {
                return Err(RpcError::invalid_params("Invalid param: unrecognized Token program id"));
            }
            (pid, None)
        }
        _ => return Err(RpcError::invalid_params_serde("expected exactly one of `mint` or `programId`")),
    };
    let mut found: Vec<(Pubkey, Account)> = chain
        .all_accounts()
        .filter(|(_, a)| *a.owner() == program)
        .filter(|(_, a)| {
            token::parse_token_account(a.owner(), a.data())
                .is_some_and(|t| t.owner == owner && mint.is_none_or(|m| t.mint == m))
        })
        .map(|(k, a)| (*k, Account::from(a.clone())))
        .collect();
    found.sort_by_key(|(k, _)| *k);
    let values = found.iter().map(|(k, a)| keyed(&chain, k, a, &opts)).collect::<RpcResult<Vec<_>>>()?;
    Ok(with_context(chain.slot, Value::Array(values)))
}
