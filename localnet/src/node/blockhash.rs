//! The window of recent blockhashes a transaction may reference.
//!
//! LiteSVM keeps a single blockhash; the node produces one per slot and accepts
//! a transaction only if its blockhash is among the last `capacity` ones (as a
//! validator does with its 150-entry blockhash queue).

use {
    serde::{Deserialize, Serialize},
    solana_hash::Hash,
    std::collections::{HashMap, VecDeque},
};

/// How many recent blockhashes stay valid (Agave's MAX_PROCESSING_AGE is 150).
pub const MAX_RECENT_BLOCKHASHES: usize = 150;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlockhashWindow {
    capacity: usize,
    /// (blockhash, slot it was produced at, block height), oldest first.
    entries: VecDeque<(Hash, u64)>,
    #[serde(skip)]
    index: HashMap<Hash, u64>,
}

impl BlockhashWindow {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0);
        Self { capacity, entries: VecDeque::new(), index: HashMap::new() }
    }

    /// Rebuilds the lookup index (after deserialization).
    pub fn reindex(&mut self) {
        self.index = self.entries.iter().copied().collect();
    }

    /// Adds the blockhash of a new block at `height`, evicting the oldest one when full.
    pub fn push(&mut self, hash: Hash, height: u64) {
        if self.entries.len() == self.capacity {
            if let Some((old, _)) = self.entries.pop_front() {
                self.index.remove(&old);
            }
        }
        self.entries.push_back((hash, height));
        self.index.insert(hash, height);
    }

    pub fn latest(&self) -> Option<(Hash, u64)> {
        self.entries.back().copied()
    }

    /// Whether a transaction referencing `hash` may still be processed.
    pub fn is_valid(&self, hash: &Hash) -> bool {
        self.index.contains_key(hash)
    }

    /// The block height at which `hash` stops being valid, as getLatestBlockhash
    /// reports it (`lastValidBlockHeight`).
    pub fn last_valid_block_height(&self, hash: &Hash) -> Option<u64> {
        self.index.get(hash).map(|h| h + self.capacity as u64)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> Hash {
        Hash::new_from_array([n; 32])
    }

    #[test]
    fn keeps_the_last_capacity_hashes() {
        let mut w = BlockhashWindow::new(3);
        for n in 1..=5 {
            w.push(h(n), n as u64);
        }
        assert_eq!(w.len(), 3);
        assert!(!w.is_valid(&h(1)));
        assert!(!w.is_valid(&h(2)));
        assert!(w.is_valid(&h(3)) && w.is_valid(&h(4)) && w.is_valid(&h(5)));
        assert_eq!(w.latest(), Some((h(5), 5)));
        assert_eq!(w.last_valid_block_height(&h(5)), Some(8));
        assert_eq!(w.last_valid_block_height(&h(1)), None);
    }

    #[test]
    fn unknown_hash_is_invalid() {
        let mut w = BlockhashWindow::new(MAX_RECENT_BLOCKHASHES);
        w.push(h(1), 1);
        assert!(!w.is_valid(&h(9)));
        assert!(!w.is_valid(&Hash::default()));
    }

    #[test]
    fn survives_a_serde_round_trip() {
        let mut w = BlockhashWindow::new(4);
        for n in 1..=6 {
            w.push(h(n), n as u64);
        }
        let bytes = bincode::serialize(&w).unwrap();
        let mut back: BlockhashWindow = bincode::deserialize(&bytes).unwrap();
        back.reindex();
        assert!(back.is_valid(&h(6)) && back.is_valid(&h(3)) && !back.is_valid(&h(2)));
        back.push(h(7), 7);
        assert!(!back.is_valid(&h(3)));
    }
}
