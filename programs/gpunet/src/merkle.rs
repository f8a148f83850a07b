//! The reward tree: one leaf per pool and epoch, sorted-pair inner nodes.
//!
//! Leaf and inner-node hashes carry different prefixes, so an inner node can never pass as a leaf
//! (the second-preimage attack on plain Merkle trees), and a leaf binds the program, the epoch,
//! the IO mint and the pool, so a proof for another deployment, epoch, mint or pool fails. An odd
//! node is carried up a level as it is, never paired with a copy of itself.
//!
//! Leaf (SHA-256 of): `0x00 ‖ "gpunet-reward1" ‖ program ‖ epoch (i64 LE) ‖ mint ‖ provider ‖
//! supplier_amount (u64 LE) ‖ delegators_amount (u64 LE)`. Node: `SHA-256(0x01 ‖ min ‖ max)`.
use anchor_lang::prelude::Pubkey;
use anchor_lang::solana_program::hash::hashv;

pub const LEAF_PREFIX: &[u8] = &[0];
pub const NODE_PREFIX: &[u8] = &[1];
pub const REWARD_DOMAIN: &[u8] = b"gpunet-reward1";

/// One pool's reward for one epoch: the supplier's part (its own stake's) and the delegators'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewardLeaf {
    pub epoch: i64,
    pub provider: Pubkey,
    pub supplier_amount: u64,
    pub delegators_amount: u64,
}

impl RewardLeaf {
    pub fn hash(&self, mint: &Pubkey) -> [u8; 32] {
        hashv(&[
            LEAF_PREFIX,
            REWARD_DOMAIN,
            crate::ID.as_ref(),
            &self.epoch.to_le_bytes(),
            mint.as_ref(),
            self.provider.as_ref(),
            &self.supplier_amount.to_le_bytes(),
            &self.delegators_amount.to_le_bytes(),
        ])
        .to_bytes()
    }
}

pub fn node_hash(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    hashv(&[NODE_PREFIX, low, high]).to_bytes()
}

/// Whether `proof` leads from `leaf` to `root`.
pub fn verify(leaf: [u8; 32], proof: &[[u8; 32]], root: &[u8; 32]) -> bool {
    proof.iter().fold(leaf, |hash, sibling| node_hash(&hash, sibling)) == *root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(n: u8) -> [u8; 32] {
        RewardLeaf { epoch: 1, provider: Pubkey::new_from_array([n; 32]), supplier_amount: 5, delegators_amount: 7 }
            .hash(&Pubkey::new_from_array([9; 32]))
    }

    #[test]
    fn a_three_leaf_tree_proves_each_leaf_and_nothing_else() {
        let (a, b, c) = (leaf(1), leaf(2), leaf(3));
        let ab = node_hash(&a, &b);
        let root = node_hash(&ab, &c); // c carried up unpaired
        assert!(verify(a, &[b, c], &root));
        assert!(verify(b, &[a, c], &root));
        assert!(verify(c, &[ab], &root));
        // the same bytes hash differently as a leaf and as an inner node (the claim hashes the
        // leaf's fields itself, so only a leaf preimage could pass, and none collides with a node)
        assert_ne!(hashv(&[LEAF_PREFIX, &a, &b]).to_bytes(), node_hash(&a, &b));
        // another pool's leaf, an over-long proof and another mint's leaf fail
        assert!(!verify(leaf(4), &[b, c], &root));
        assert!(!verify(a, &[b, c, c], &root));
        let other_mint = RewardLeaf {
            epoch: 1,
            provider: Pubkey::new_from_array([1; 32]),
            supplier_amount: 5,
            delegators_amount: 7,
        }
        .hash(&Pubkey::new_from_array([8; 32]));
        assert!(!verify(other_mint, &[b, c], &root));
    }
}
