//! The node's chain state: the SVM, the block ticker, the blockhash window,
//! the transaction history and the signature index by account.

use {
    super::{blockhash::BlockhashWindow, record::TxRecord},
    gpunet_localnet::ProgramBuild,
    litesvm::LiteSVM,
    solana_account::{Account, ReadableAccount},
    solana_clock::Clock,
    solana_epoch_schedule::EpochSchedule,
    solana_hash::Hash,
    solana_keypair::Keypair,
    solana_pubkey::Pubkey,
    solana_signature::Signature,
    solana_signer::Signer,
    solana_transaction_error::TransactionError,
    std::{collections::HashMap, sync::Arc},
    tokio::sync::broadcast,
};

pub const LAMPORTS_PER_SIGNATURE: u64 = 5_000;
/// Lamports the faucet (requestAirdrop) starts with.
pub const FAUCET_LAMPORTS: u64 = 500_000_000 * 1_000_000_000;

/// How far a transaction has come, in the order a client waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Commitment {
    Processed,
    Confirmed,
    Finalized,
}

impl Commitment {
    /// A request's `commitment` (absent: finalized, the RPC's default); the aliases the RPC
    /// still accepts map as agave maps them.
    pub fn parse(name: Option<&str>) -> Self {
        match name {
            Some("processed" | "recent") => Self::Processed,
            Some("confirmed" | "single" | "singleGossip") => Self::Confirmed,
            _ => Self::Finalized,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Confirmed => "confirmed",
            Self::Finalized => "finalized",
        }
    }
}

/// What PubSub subscribers are told about.
#[derive(Clone, Debug)]
pub enum Event {
    Slot { slot: u64, parent: u64 },
    Tx(Arc<TxEvent>),
}

#[derive(Debug)]
pub struct TxEvent {
    pub slot: u64,
    pub signature: String,
    pub err: Option<TransactionError>,
    pub logs: Vec<String>,
    /// Every account key of the transaction (logsSubscribe "mentions").
    pub keys: Vec<Pubkey>,
    /// Accounts the transaction wrote, with their new state.
    pub written: Vec<(Pubkey, Account)>,
}

pub struct Chain {
    pub svm: LiteSVM,
    pub slot: u64,
    /// Unix time of each slot from `first_slot` on (getBlockTime).
    pub first_slot: u64,
    pub slot_times: Vec<i64>,
    pub blockhashes: BlockhashWindow,
    pub genesis_hash: Hash,
    pub identity: Keypair,
    pub faucet: Keypair,
    pub txs: Vec<Arc<TxRecord>>,
    pub by_signature: HashMap<Signature, usize>,
    /// account -> positions in `txs`, oldest first.
    pub by_address: HashMap<Pubkey, Vec<usize>>,
    pub events: broadcast::Sender<Event>,
    /// Set when the state changed since the ledger last saved it.
    pub dirty: bool,
    /// Slots after its own before a transaction counts as confirmed (0: every commitment at once).
    pub confirm_slots: u64,
}

/// Slots after its own before a transaction is finalized, as on a real cluster (32 votes deep).
pub const FINALITY_SLOTS: u64 = 32;

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// The SVM the node runs: the gpunet program (built as `build` says), SPL programs,
/// precompiles; the node does the blockhash, duplicate and signature checks itself.
pub fn node_svm(build: &ProgramBuild) -> Result<LiteSVM, String> {
    // No history in LiteSVM either: the node keeps its own, and LiteSVM's would
    // refuse a resent transaction whose first try preflight refused.
    let mut svm = build.svm()?.with_sigverify(false).with_blockhash_check(false).with_transaction_history(0);
    // Like solana-test-validator: fixed-length epochs from the start (no warmup).
    svm.set_sysvar(&EpochSchedule::without_warmup());
    Ok(svm)
}

impl Chain {
    /// A fresh chain at slot 0.
    pub fn new(svm: LiteSVM) -> Self {
        let now = unix_now();
        let genesis_hash = solana_sha256_hasher::hashv(&[
            b"gpunet-localnet genesis",
            &now.to_le_bytes(),
            Keypair::new().pubkey().as_ref(),
        ]);
        let (events, _) = broadcast::channel(65_536);
        let mut chain = Self {
            svm,
            slot: 0,
            first_slot: 0,
            slot_times: vec![now],
            blockhashes: BlockhashWindow::new(super::blockhash::MAX_RECENT_BLOCKHASHES),
            genesis_hash,
            identity: Keypair::new(),
            faucet: Keypair::new(),
            txs: Vec::new(),
            by_signature: HashMap::new(),
            by_address: HashMap::new(),
            events,
            dirty: true,
            confirm_slots: 0,
        };
        chain.blockhashes.push(genesis_hash, 0);
        chain.set_clock(now);
        let faucet =
            Account { lamports: FAUCET_LAMPORTS, owner: solana_sdk_ids::system_program::ID, ..Account::default() };
        let _ = chain.svm.set_account(chain.faucet.pubkey(), faucet);
        chain
    }

    fn set_clock(&mut self, unix_timestamp: i64) {
        let schedule: EpochSchedule = self.svm.get_sysvar();
        let epoch = schedule.get_epoch(self.slot);
        let mut clock: Clock = self.svm.get_sysvar();
        clock.slot = self.slot;
        clock.epoch = epoch;
        clock.leader_schedule_epoch = schedule.get_leader_schedule_epoch(self.slot);
        clock.unix_timestamp = unix_timestamp;
        if self.slot == self.first_slot && self.txs.is_empty() {
            clock.epoch_start_timestamp = unix_timestamp;
        }
        self.svm.set_sysvar(&clock);
    }

    /// Produces the next block: new slot, Clock advanced, new blockhash.
    pub fn tick(&mut self, unix_timestamp: i64) {
        let parent = self.slot;
        self.slot += 1;
        let prev = self.blockhashes.latest().map(|(h, _)| h).unwrap_or(self.genesis_hash);
        let hash =
            solana_sha256_hasher::hashv(&[prev.as_ref(), &self.slot.to_le_bytes(), &unix_timestamp.to_le_bytes()]);
        self.blockhashes.push(hash, self.slot);
        // Keep the block time monotonic even if the wall clock steps back.
        let time = unix_timestamp.max(*self.slot_times.last().unwrap_or(&unix_timestamp));
        self.slot_times.push(time);
        self.set_clock(time);
        let _ = self.events.send(Event::Slot { slot: self.slot, parent });
    }

    pub fn block_height(&self) -> u64 {
        self.slot
    }

    pub fn block_time(&self, slot: u64) -> Option<i64> {
        slot.checked_sub(self.first_slot).and_then(|i| self.slot_times.get(i as usize)).copied()
    }

    pub fn latest_blockhash(&self) -> (Hash, u64) {
        let (hash, _) = self.blockhashes.latest().unwrap_or((self.genesis_hash, 0));
        (hash, self.blockhashes.last_valid_block_height(&hash).unwrap_or(self.slot))
    }

    pub fn epoch_schedule(&self) -> EpochSchedule {
        self.svm.get_sysvar()
    }

    pub fn get_account(&self, key: &Pubkey) -> Option<Account> {
        self.svm.get_account(key).filter(|a| a.lamports > 0 || !a.data.is_empty())
    }

    /// Decimals of an SPL Token mint, if `mint` is one.
    pub fn mint_decimals(&self, mint: &Pubkey) -> Option<u8> {
        let acc = self.svm.get_account(mint)?;
        super::token::parse_mint(&acc.owner, &acc.data).map(|m| m.decimals)
    }

    /// Every account (pubkey, account), for getProgramAccounts and token queries.
    pub fn all_accounts(&self) -> impl Iterator<Item = (&Pubkey, &solana_account::AccountSharedData)> {
        self.svm.accounts_db().inner.iter().filter(|(_, a)| a.lamports() > 0 || !a.data().is_empty())
    }

    pub fn transaction(&self, sig: &Signature) -> Option<&Arc<TxRecord>> {
        self.by_signature.get(sig).map(|&i| &self.txs[i])
    }

    /// The commitment a transaction of `slot` has reached: with a confirmation delay, "confirmed"
    /// only `confirm_slots` slots later and "finalized" `FINALITY_SLOTS` later, as on a real cluster
    /// (there, a supermajority's votes take those slots to land).
    pub fn commitment_of(&self, slot: u64) -> Commitment {
        let age = self.slot.saturating_sub(slot);
        match self.confirm_slots {
            0 => Commitment::Finalized,
            n if age >= n.max(FINALITY_SLOTS) => Commitment::Finalized,
            n if age >= n => Commitment::Confirmed,
            _ => Commitment::Processed,
        }
    }

    /// A transaction's signature status as of now.
    pub fn status_json(&self, rec: &TxRecord) -> serde_json::Value {
        rec.status_json(self.commitment_of(rec.slot), self.slot.saturating_sub(rec.slot))
    }

    /// Appends a processed transaction to the history and the indexes.
    pub fn record(&mut self, rec: TxRecord) -> Arc<TxRecord> {
        let pos = self.txs.len();
        let rec = Arc::new(rec);
        self.by_signature.insert(rec.tx.signatures[0], pos);
        for key in rec.tx.message.static_account_keys() {
            let list = self.by_address.entry(*key).or_default();
            if list.last() != Some(&pos) {
                list.push(pos);
            }
        }
        self.txs.push(rec.clone());
        self.dirty = true;
        rec
    }

    /// Rebuilds `by_signature` and `by_address` from `txs`.
    pub fn reindex(&mut self) {
        self.by_signature.clear();
        self.by_address.clear();
        for (pos, rec) in self.txs.iter().enumerate() {
            self.by_signature.insert(rec.tx.signatures[0], pos);
            for key in rec.tx.message.static_account_keys() {
                let list = self.by_address.entry(*key).or_default();
                if list.last() != Some(&pos) {
                    list.push(pos);
                }
            }
        }
    }

    /// getSignaturesForAddress: newest first, strictly older than `before`,
    /// strictly newer than `until`, at most `limit`.
    pub fn signatures_for_address(
        &self,
        address: &Pubkey,
        before: Option<&Signature>,
        until: Option<&Signature>,
        limit: usize,
    ) -> Vec<Arc<TxRecord>> {
        let Some(list) = self.by_address.get(address) else {
            return vec![];
        };
        let upper = before.map(|s| self.by_signature.get(s).copied().unwrap_or(usize::MAX));
        let lower = until.and_then(|s| self.by_signature.get(s).copied());
        list.iter()
            .rev()
            .filter(|&&p| upper.is_none_or(|u| p < u))
            .take_while(|&&p| lower.is_none_or(|l| p > l))
            .take(limit)
            .map(|&p| self.txs[p].clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_advances_slot_clock_and_blockhash() {
        let mut chain = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        let mut rx = chain.events.subscribe();
        let (h0, _) = chain.latest_blockhash();
        chain.tick(1_000);
        chain.tick(1_001);
        assert_eq!(chain.slot, 2);
        let clock: Clock = chain.svm.get_sysvar();
        assert_eq!((clock.slot, clock.unix_timestamp), (2, 1_001.max(chain.slot_times[0])));
        let (h2, last_valid) = chain.latest_blockhash();
        assert_ne!(h0, h2);
        assert_eq!(last_valid, 2 + super::super::blockhash::MAX_RECENT_BLOCKHASHES as u64);
        assert!(chain.blockhashes.is_valid(&h0));
        assert!(matches!(rx.try_recv(), Ok(Event::Slot { slot: 1, parent: 0 })));
        assert!(matches!(rx.try_recv(), Ok(Event::Slot { slot: 2, parent: 1 })));
        assert_eq!(chain.block_time(2), Some(chain.slot_times[2]));
        assert_eq!(chain.block_time(3), None);
    }

    #[test]
    fn old_blockhashes_expire_after_150_slots() {
        let mut chain = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        let (h0, _) = chain.latest_blockhash();
        for _ in 0..149 {
            chain.tick(unix_now());
        }
        assert!(chain.blockhashes.is_valid(&h0));
        chain.tick(unix_now());
        assert!(!chain.blockhashes.is_valid(&h0));
    }

    #[test]
    fn a_confirmation_delay_holds_a_transaction_at_processed_then_confirmed() {
        let mut chain = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        assert_eq!(chain.commitment_of(0), Commitment::Finalized, "no delay: every commitment at once");
        chain.confirm_slots = 2;
        let seen = [0, 1, 2, 31, 32].map(|age| {
            chain.slot = 100 + age;
            chain.commitment_of(100)
        });
        use Commitment::*;
        assert_eq!(seen, [Processed, Processed, Confirmed, Confirmed, Finalized]);
        assert_eq!(Commitment::parse(Some("singleGossip")), Confirmed);
        assert_eq!(Commitment::parse(None), Finalized);
    }

    #[test]
    fn block_time_never_goes_back() {
        let mut chain = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        let t0 = chain.slot_times[0];
        chain.tick(t0 - 100);
        assert_eq!(chain.block_time(1), Some(t0));
    }
}
