//! Transaction execution: sendTransaction (with preflight), simulateTransaction, requestAirdrop.

use {
    super::{
        chain::{Chain, Event, TxEvent, LAMPORTS_PER_SIGNATURE},
        errors::{RpcError, SEND_TRANSACTION_PREFLIGHT_FAILURE},
        record::{err_json, return_data_json, InnerIx, TxRecord},
        token::{self, TokenBalance},
    },
    litesvm::types::TransactionMetadata,
    serde_json::{json, Value},
    solana_account::Account,
    solana_message::VersionedMessage,
    solana_pubkey::Pubkey,
    solana_signature::Signature,
    solana_signer::Signer,
    solana_transaction::versioned::VersionedTransaction,
    solana_transaction_error::TransactionError,
    std::{
        panic::AssertUnwindSafe,
        str::FromStr,
        sync::{Arc, LazyLock},
    },
};

/// A transaction that passed `Chain::verify`: the only kind `Chain::send` takes.
pub struct Verified(VersionedTransaction);

static PRECOMPILES: LazyLock<[Pubkey; 3]> = LazyLock::new(|| {
    [
        "Ed25519SigVerify111111111111111111111111111",
        "KeccakSecp256k11111111111111111111111111111",
        "Secp256r1SigVerify1111111111111111111111111",
    ]
    .map(|s| Pubkey::from_str(s).unwrap())
});

/// The fee the node charges: 5000 lamports per signature, precompile signatures included.
pub fn fee_for_message(message: &VersionedMessage) -> u64 {
    let keys = message.static_account_keys();
    let precompile_sigs: u64 = message
        .instructions()
        .iter()
        .filter(|ix| keys.get(ix.program_id_index as usize).is_some_and(|p| PRECOMPILES.contains(p)))
        .map(|ix| ix.data.first().copied().unwrap_or(0) as u64)
        .sum();
    LAMPORTS_PER_SIGNATURE * (message.header().num_required_signatures as u64 + precompile_sigs)
}

/// `RpcSimulateTransactionResult` as Agave serializes it.
pub fn simulation_json(
    err: &Option<TransactionError>,
    meta: &TransactionMetadata,
    accounts: Value,
    replacement: Value,
) -> Value {
    let rd = (!meta.return_data.data.is_empty() || meta.return_data.program_id != Pubkey::default())
        .then(|| (meta.return_data.program_id.to_string(), meta.return_data.data.clone()));
    json!({
        "err": err_json(err),
        "logs": meta.logs,
        "accounts": accounts,
        "unitsConsumed": meta.compute_units_consumed,
        "returnData": return_data_json(&rd),
        "innerInstructions": null,
        "replacementBlockhash": replacement,
        "loadedAccountsDataSize": 0,
    })
}

fn preflight_failure(err: TransactionError, meta: &TransactionMetadata) -> RpcError {
    RpcError::new(SEND_TRANSACTION_PREFLIGHT_FAILURE, format!("Transaction simulation failed: {err}"))
        .with_data(simulation_json(&Some(err), meta, Value::Null, Value::Null))
}

fn inner_ixs(meta: &TransactionMetadata) -> Vec<(u8, Vec<InnerIx>)> {
    meta.inner_instructions
        .iter()
        .enumerate()
        .filter(|(_, list)| !list.is_empty())
        .map(|(i, list)| {
            let ixs = list
                .iter()
                .map(|ii| InnerIx {
                    program_id_index: ii.instruction.program_id_index,
                    accounts: ii.instruction.accounts.clone(),
                    data: ii.instruction.data.clone(),
                    stack_height: ii.stack_height as u32,
                })
                .collect();
            (i as u8, ixs)
        })
        .collect()
}

impl Chain {
    fn balances(&self, keys: &[Pubkey]) -> Vec<u64> {
        keys.iter().map(|k| self.svm.get_balance(k).unwrap_or(0)).collect()
    }

    fn token_balances(&self, keys: &[Pubkey]) -> Vec<TokenBalance> {
        keys.iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let acc = self.svm.get_account(k)?;
                let ta = token::parse_token_account(&acc.owner, &acc.data)?;
                let decimals = self.mint_decimals(&ta.mint)?;
                Some(TokenBalance {
                    account_index: i as u8,
                    mint: ta.mint.to_string(),
                    owner: ta.owner.to_string(),
                    program_id: acc.owner.to_string(),
                    amount: ta.amount,
                    decimals,
                })
            })
            .collect()
    }

    /// Checks done before a transaction may run: sanitize and signatures.
    /// sendTransaction's checks that need no chain state (sanitized, every signature valid): done
    /// before the chain is locked, so concurrent requests verify in parallel.
    pub fn verify(tx: VersionedTransaction) -> Result<Verified, RpcError> {
        tx.sanitize()
            .map_err(|e| RpcError::invalid_params(format!("invalid transaction: {}", TransactionError::from(e))))?;
        if tx.signatures.is_empty() || !tx.verify_with_results().iter().all(|ok| *ok) {
            return Err(RpcError::signature_verification_failure());
        }
        Ok(Verified(tx))
    }

    /// sendTransaction. Ok(signature) also when, with skipPreflight, the
    /// transaction is dropped (bad blockhash, duplicate, unpaid fee), as a validator does.
    pub fn send(&mut self, Verified(tx): Verified, skip_preflight: bool) -> Result<Signature, RpcError> {
        let signature = tx.signatures[0];
        let refused = if self.by_signature.contains_key(&signature) {
            Some(TransactionError::AlreadyProcessed)
        } else if !self.blockhashes.is_valid(tx.message.recent_blockhash()) {
            Some(TransactionError::BlockhashNotFound)
        } else {
            None
        };
        if let Some(err) = refused {
            return if skip_preflight {
                Ok(signature)
            } else {
                Err(preflight_failure(err, &TransactionMetadata::default()))
            };
        }
        self.execute(tx, !skip_preflight)?;
        Ok(signature)
    }

    /// Runs a verified transaction once and records it if it was included.
    ///
    /// With `preflight`, a transaction that fails is refused with Agave's preflight
    /// error and leaves no trace: the only state LiteSVM changes for a failed
    /// transaction is the fee taken from the payer, which is put back. This gives
    /// preflight's outcome without running every transaction twice.
    fn execute(&mut self, tx: VersionedTransaction, preflight: bool) -> Result<(), RpcError> {
        let keys: Vec<Pubkey> = tx.message.static_account_keys().to_vec();
        let payer_before = self.svm.get_account(&keys[0]);
        let pre_balances = self.balances(&keys);
        let pre_token_balances = self.token_balances(&keys);
        let fee = fee_for_message(&tx.message);
        let writable: Vec<bool> = (0..keys.len()).map(|i| tx.message.is_maybe_writable(i, None)).collect();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.svm.send_transaction(tx.clone())))
            .map_err(|_| RpcError::internal("Internal error: the transaction made the runtime panic"))?;
        let (err, meta) = match result {
            Ok(meta) => (None, meta),
            Err(failed) => (Some(failed.err), failed.meta),
        };
        // A failed transaction was included (its fee charged) iff the payer's balance moved.
        let included = err.is_none() || self.svm.get_balance(&keys[0]) != payer_before.as_ref().map(|a| a.lamports);
        if let (Some(err), true) = (&err, preflight) {
            if included {
                if let Some(before) = payer_before {
                    self.svm.set_account(keys[0], before).map_err(|e| RpcError::internal(e.to_string()))?;
                }
            }
            return Err(preflight_failure(err.clone(), &meta));
        }
        if !included {
            return Ok(()); // e.g. the fee payer cannot pay: dropped, no state change
        }
        let written: Vec<(Pubkey, Account)> = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| if err.is_none() { writable[*i] } else { *i == 0 })
            .map(|(_, k)| (*k, self.svm.get_account(k).unwrap_or_default()))
            .collect();
        let rd = (!meta.return_data.data.is_empty())
            .then(|| (meta.return_data.program_id.to_string(), meta.return_data.data.clone()));
        let rec = TxRecord {
            slot: self.slot,
            block_time: self.block_time(self.slot).unwrap_or_else(super::chain::unix_now),
            err: err.clone(),
            fee,
            pre_balances,
            post_balances: self.balances(&keys),
            pre_token_balances,
            post_token_balances: self.token_balances(&keys),
            logs: meta.logs.clone(),
            inner: inner_ixs(&meta),
            compute_units: meta.compute_units_consumed,
            return_data: rd,
            tx,
        };
        let rec = self.record(rec);
        let _ = self.events.send(Event::Tx(Arc::new(TxEvent {
            slot: rec.slot,
            signature: rec.signature(),
            err,
            logs: rec.logs.clone(),
            keys,
            written,
        })));
        Ok(())
    }

    /// simulateTransaction's value. `replace`: run against the latest blockhash.
    pub fn simulate(
        &self,
        tx: VersionedTransaction,
        sig_verify: bool,
        replace: bool,
        addresses: &[Pubkey],
        encode: &dyn Fn(&Account) -> Value,
    ) -> Result<Value, RpcError> {
        let tx = if sig_verify {
            Self::verify(tx)?.0
        } else {
            tx.sanitize()
                .map_err(|e| RpcError::invalid_params(format!("invalid transaction: {}", TransactionError::from(e))))?;
            tx
        };
        let replacement = if replace {
            let (hash, last_valid) = self.latest_blockhash();
            json!({ "blockhash": hash.to_string(), "lastValidBlockHeight": last_valid })
        } else {
            Value::Null
        };
        let empty = TransactionMetadata::default();
        if !replace && !self.blockhashes.is_valid(tx.message.recent_blockhash()) {
            return Ok(simulation_json(&Some(TransactionError::BlockhashNotFound), &empty, Value::Null, replacement));
        }
        if sig_verify && self.by_signature.contains_key(&tx.signatures[0]) {
            return Ok(simulation_json(&Some(TransactionError::AlreadyProcessed), &empty, Value::Null, replacement));
        }
        let sim = std::panic::catch_unwind(AssertUnwindSafe(|| self.svm.simulate_transaction(tx)))
            .map_err(|_| RpcError::internal("Internal error: the transaction made the runtime panic"))?;
        Ok(match sim {
            Err(failed) => simulation_json(&Some(failed.err), &failed.meta, Value::Null, replacement),
            Ok(info) => {
                let accounts = if addresses.is_empty() {
                    Value::Null
                } else {
                    Value::Array(
                        addresses
                            .iter()
                            .map(|a| {
                                let acc = info
                                    .post_accounts
                                    .iter()
                                    .find(|(k, _)| k == a)
                                    .map(|(_, acc)| Account::from(acc.clone()))
                                    .or_else(|| self.get_account(a));
                                acc.map_or(Value::Null, |acc| encode(&acc))
                            })
                            .collect(),
                    )
                };
                simulation_json(&None, &info.meta, accounts, replacement)
            }
        })
    }

    /// requestAirdrop: a system transfer from the node's faucet.
    pub fn airdrop(&mut self, to: &Pubkey, lamports: u64) -> Result<Signature, RpcError> {
        let failed = || RpcError::internal("airdrop request failed. This can happen when the rate limit is reached.");
        let (blockhash, _) = self.latest_blockhash();
        let payer = self.faucet.pubkey();
        let mut ixs = vec![solana_system_interface::instruction::transfer(&payer, to, lamports)];
        // Same recipient and amount in the same slot would repeat the signature:
        // vary a compute-unit limit instruction until the signature is new.
        for attempt in 0u32..1_000 {
            let message = solana_message::Message::new_with_blockhash(&ixs, Some(&payer), &blockhash);
            let tx = VersionedTransaction::try_new(VersionedMessage::Legacy(message), &[&self.faucet])
                .map_err(|_| failed())?;
            if self.by_signature.contains_key(&tx.signatures[0]) {
                let mut data = vec![2u8];
                data.extend_from_slice(&(1_400_000 - attempt).to_le_bytes());
                let cb = Pubkey::from_str("ComputeBudget111111111111111111111111111111").unwrap();
                ixs.truncate(1);
                ixs.insert(0, solana_instruction::Instruction { program_id: cb, accounts: vec![], data });
                continue;
            }
            let sig = self
                .send(Self::verify(tx)?, false)
                .map_err(|e| RpcError::internal(format!("airdrop request failed: {}", e.message)))?;
            return Ok(sig);
        }
        Err(failed())
    }
}
