//! Cluster, slot, blockhash and fee methods.

use {
    crate::node::{
        encoding::with_context,
        errors::{RpcError, RpcResult},
        exec::fee_for_message,
        params::Params,
        Node, API_VERSION,
    },
    base64::{engine::general_purpose::STANDARD as B64, Engine},
    serde_json::{json, Value},
    solana_message::VersionedMessage,
    solana_signer::Signer,
};

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

pub fn get_recent_prioritization_fees(node: &Node, _: Params) -> RpcResult<Value> {
    Ok(json!([{ "slot": node.chain().slot, "prioritizationFee": 0 }]))
}
