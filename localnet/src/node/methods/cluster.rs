//! Cluster, slot, blockhash and fee methods.

use {
    crate::node::{
        encoding::with_context,
        errors::{RpcError, RpcResult},
        exec::fee_for_message,
        params::{parse_pubkey, Params},
        Node, API_VERSION,
    },
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde_json::{json, Value},
    solana_message::VersionedMessage,
    solana_pubkey::{pubkey, Pubkey},
    solana_signer::Signer,
    std::collections::BTreeMap,
};

const COMPUTE_BUDGET_PROGRAM: Pubkey = pubkey!("ComputeBudget111111111111111111111111111111");

pub fn get_version(_: &Node, _: Params) -> RpcResult<Value> {
    Ok(json!({ "solana-core": API_VERSION, "feature-set": 3_640_012_085u32 }))
}

pub fn get_health(_: &Node, _: Params) -> RpcResult<Value> {
    Ok(json!("ok"))
}

pub fn get_identity(node: &Node, _: Params) -> RpcResult<Value> {
    Ok(json!({ "identity": node.chain().identity.pubkey().to_string() }))
}

pub fn get_genesis_hash(node: &Node, _: Params) -> RpcResult<Value> {
    Ok(json!(node.chain().genesis_hash.to_string()))
}

pub fn get_slot(node: &Node, p: Params) -> RpcResult<Value> {
    let chain = node.chain();
    p.config(0)?.check(chain.slot)?;
    Ok(json!(chain.slot))
}

pub fn get_block_height(node: &Node, p: Params) -> RpcResult<Value> {
    let chain = node.chain();
    p.config(0)?.check(chain.slot)?;
    Ok(json!(chain.block_height()))
}

pub fn get_transaction_count(node: &Node, p: Params) -> RpcResult<Value> {
    let chain = node.chain();
    p.config(0)?.check(chain.slot)?;
    Ok(json!(chain.txs.len()))
}

pub fn get_epoch_info(node: &Node, p: Params) -> RpcResult<Value> {
    let chain = node.chain();
    p.config(0)?.check(chain.slot)?;
    let schedule = chain.epoch_schedule();
    let (epoch, slot_index) = schedule.get_epoch_and_slot_index(chain.slot);
    Ok(json!({
        "absoluteSlot": chain.slot,
        "blockHeight": chain.block_height(),
        "epoch": epoch,
        "slotIndex": slot_index,
        "slotsInEpoch": schedule.get_slots_in_epoch(epoch),
        "transactionCount": chain.txs.len(),
    }))
}

pub fn get_epoch_schedule(node: &Node, _: Params) -> RpcResult<Value> {
    let s = node.chain().epoch_schedule();
    Ok(json!({
        "slotsPerEpoch": s.slots_per_epoch,
        "leaderScheduleSlotOffset": s.leader_schedule_slot_offset,
        "warmup": s.warmup,
        "firstNormalEpoch": s.first_normal_epoch,
        "firstNormalSlot": s.first_normal_slot,
    }))
}

pub fn get_latest_blockhash(node: &Node, p: Params) -> RpcResult<Value> {
    let chain = node.chain();
    p.config(0)?.check(chain.slot)?;
    let (hash, last_valid) = chain.latest_blockhash();
    Ok(with_context(chain.slot, json!({ "blockhash": hash.to_string(), "lastValidBlockHeight": last_valid })))
}

pub fn is_blockhash_valid(node: &Node, p: Params) -> RpcResult<Value> {
    let s: String = p.req(0)?;
    let chain = node.chain();
    p.config(1)?.check(chain.slot)?;
    let hash = s.parse::<solana_hash::Hash>().map_err(|e| RpcError::invalid_params(format!("Invalid param: {e:?}")))?;
    Ok(with_context(chain.slot, json!(chain.blockhashes.is_valid(&hash))))
}

pub fn get_fee_for_message(node: &Node, p: Params) -> RpcResult<Value> {
    let s: String = p.req(0)?;
    let bytes = B64.decode(&s).map_err(|e| RpcError::invalid_params(format!("invalid base64 encoding: {e:?}")))?;
    let message: VersionedMessage = bincode::deserialize(&bytes).map_err(|e| {
        RpcError::invalid_params(format!("failed to deserialize solana_message::versioned::VersionedMessage: {e}"))
    })?;
    message.sanitize().map_err(|e| RpcError::invalid_params(format!("invalid transaction message: {e}")))?;
    let chain = node.chain();
    p.config(1)?.check(chain.slot)?;
    let fee = chain.blockhashes.is_valid(message.recent_blockhash()).then(|| fee_for_message(&message));
    Ok(with_context(chain.slot, json!(fee)))
}

pub fn get_minimum_balance_for_rent_exemption(node: &Node, p: Params) -> RpcResult<Value> {
    let len: usize = p.req(0)?;
    if len > 10 * 1024 * 1024 {
        return Err(RpcError::invalid_params("Invalid param: data length exceeds 10485760 bytes"));
    }
    Ok(json!(node.chain().svm.minimum_balance_for_rent_exemption(len)))
}

pub fn get_block_time(node: &Node, p: Params) -> RpcResult<Value> {
    let slot: u64 = p.req(0)?;
    let chain = node.chain();
    if slot > chain.slot {
        return Err(RpcError::block_not_available(slot));
    }
    chain.block_time(slot).map(|t| json!(t)).ok_or_else(|| RpcError::slot_skipped(slot))
}

/// Slots whose fees getRecentPrioritizationFees reports (Agave keeps a cache of 150 blocks).
const RECENT_FEE_SLOTS: u64 = 150;
/// Accounts one request may name (Agave's MAX_TX_ACCOUNT_LOCKS).
const MAX_FEE_ACCOUNTS: usize = 128;

/// Per recent slot that landed transactions (oldest first), what a transaction writing the given
/// accounts had to pay, as Agave's prioritization fee cache answers it: the highest, over those
/// accounts, of the lowest compute-unit price (micro-lamports per CU) among the slot's transactions
/// that write the account, and never below the slot's lowest price overall (with no account
/// given: that lowest price). 0 where nobody set a price.
pub fn get_recent_prioritization_fees(node: &Node, p: Params) -> RpcResult<Value> {
    let given: Vec<String> = p.opt(0)?.unwrap_or_default();
    if given.len() > MAX_FEE_ACCOUNTS {
        return Err(RpcError::invalid_params(format!("Too many inputs provided; max {MAX_FEE_ACCOUNTS}")));
    }
    let accounts = given.iter().map(|s| parse_pubkey(s)).collect::<RpcResult<Vec<Pubkey>>>()?;
    let chain = node.chain();
    // slot -> (the slot's lowest price, each given account's lowest price among its writers)
    let mut slots: BTreeMap<u64, (u64, BTreeMap<Pubkey, u64>)> = BTreeMap::new();
    for rec in chain.txs.iter().rev().take_while(|r| r.slot + RECENT_FEE_SLOTS > chain.slot) {
        let message = &rec.tx.message;
        let price = compute_unit_price(message);
        let (lowest, by_account) = slots.entry(rec.slot).or_insert((u64::MAX, BTreeMap::new()));
        *lowest = (*lowest).min(price);
        for (i, key) in message.static_account_keys().iter().enumerate() {
            if message.is_maybe_writable(i, None) && accounts.contains(key) {
                let fee = by_account.entry(*key).or_insert(u64::MAX);
                *fee = (*fee).min(price);
            }
        }
    }
    Ok(Value::Array(
        slots
            .into_iter()
            .map(|(slot, (lowest, by_account))| {
                let fee = by_account.values().copied().fold(lowest, u64::max);
                json!({ "slot": slot, "prioritizationFee": fee })
            })
            .collect(),
    ))
}

/// The price a transaction set with ComputeBudget's SetComputeUnitPrice (micro-lamports per CU), or 0.
fn compute_unit_price(message: &VersionedMessage) -> u64 {
    const SET_COMPUTE_UNIT_PRICE: u8 = 3;
    let keys = message.static_account_keys();
    message
        .instructions()
        .iter()
        .filter(|ix| keys.get(ix.program_id_index as usize) == Some(&COMPUTE_BUDGET_PROGRAM))
        .find_map(|ix| match ix.data.split_first() {
            Some((&SET_COMPUTE_UNIT_PRICE, rest)) => {
                rest.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
            }
            _ => None,
        })
        .unwrap_or(0)
}
