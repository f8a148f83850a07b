//! JSON-RPC methods, one file per area, and the dispatch table.

pub mod accounts;
mod cluster;
mod transactions;

use {
    super::{
        errors::{RpcError, RpcResult},
        params::Params,
        Node,
    },
    serde_json::Value,
};

/// Runs `method`; an unknown method is Agave's -32601.
pub fn call(node: &Node, method: &str, params: Params) -> RpcResult<Value> {
    match method {
        "getVersion" => cluster::get_version(node, params),
        "getHealth" => cluster::get_health(node, params),
        "getIdentity" => cluster::get_identity(node, params),
        "getGenesisHash" => cluster::get_genesis_hash(node, params),
        "getSlot" => cluster::get_slot(node, params),
        "getBlockHeight" => cluster::get_block_height(node, params),
        "getEpochInfo" => cluster::get_epoch_info(node, params),
        "getEpochSchedule" => cluster::get_epoch_schedule(node, params),
        "getLatestBlockhash" => cluster::get_latest_blockhash(node, params),
        "isBlockhashValid" => cluster::is_blockhash_valid(node, params),
        "getFeeForMessage" => cluster::get_fee_for_message(node, params),
        "getMinimumBalanceForRentExemption" => cluster::get_minimum_balance_for_rent_exemption(node, params),
        "getBlockTime" => cluster::get_block_time(node, params),
        "getTransactionCount" => cluster::get_transaction_count(node, params),
        "getRecentPrioritizationFees" => cluster::get_recent_prioritization_fees(node, params),
        "requestAirdrop" => accounts::request_airdrop(node, params),
        "getBalance" => accounts::get_balance(node, params),
        "getAccountInfo" => accounts::get_account_info(node, params),
        "getMultipleAccounts" => accounts::get_multiple_accounts(node, params),
        "getProgramAccounts" => accounts::get_program_accounts(node, params),
        "getTokenAccountBalance" => accounts::get_token_account_balance(node, params),
        "getTokenAccountsByOwner" => accounts::get_token_accounts_by_owner(node, params),
        "getTokenSupply" => accounts::get_token_supply(node, params),
        "sendTransaction" => transactions::send_transaction(node, params),
        "simulateTransaction" => transactions::simulate_transaction(node, params),
        "getSignatureStatuses" => transactions::get_signature_statuses(node, params),
        "getTransaction" => transactions::get_transaction(node, params),
        "getSignaturesForAddress" => transactions::get_signatures_for_address(node, params),
        _ => Err(RpcError::method_not_found()),
    }
}
