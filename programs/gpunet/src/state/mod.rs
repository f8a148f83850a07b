pub mod config;
pub mod evidence;
pub mod lease;
pub mod node;
pub mod pool;
pub mod provider;
pub mod reward;
pub mod seeds;
pub mod staking;
pub mod usage;

pub use config::*;
pub use evidence::*;
pub use lease::*;
pub use node::*;
pub use pool::*;
pub use provider::*;
pub use reward::*;
pub use seeds::*;
pub use staking::*;
pub use usage::*;

#[cfg(test)]
mod tests {
    use anchor_lang::prelude::Pubkey;
    use anchor_lang::Space;

    use super::*;

    /// Clients, the indexer and the explorers decode these layouts: a size change must be deliberate.
    #[test]
    fn account_sizes_are_pinned() {
        assert_eq!(8 + Config::INIT_SPACE, 310);
        assert_eq!(8 + Provider::INIT_SPACE, 127);
        assert_eq!(8 + Node::INIT_SPACE, 188);
        assert_eq!(8 + Lease::INIT_SPACE, 1_351);
        assert_eq!(8 + Evidence::INIT_SPACE, 58);
        assert_eq!(8 + Staking::INIT_SPACE, 131);
        assert_eq!(8 + Pool::INIT_SPACE, 749);
        assert_eq!(8 + Cohort::INIT_SPACE, 81);
        assert_eq!(8 + Delegation::INIT_SPACE, 138);
        assert_eq!(8 + RewardIndex::INIT_SPACE, 25);
        assert_eq!(8 + RewardRoot::INIT_SPACE, 109);
    }

    #[test]
    fn receipt_message_layout() {
        let lease = Pubkey::new_from_array([1; 32]);
        let node = Pubkey::new_from_array([2; 32]);
        let receipt = Receipt { epoch: 3, gpu_seconds: 4, through: 5 };
        let msg = receipt.message(&lease, &node);
        assert_eq!(&msg[..16], b"gpunet-receipt1\0");
        assert_eq!(&msg[16..48], crate::ID.as_ref());
        assert_eq!((&msg[48..80], &msg[80..112]), (&[1u8; 32][..], &[2u8; 32][..]));
        assert_eq!(msg[112..120], 3u64.to_le_bytes());
        assert_eq!(msg[120..128], 4u64.to_le_bytes());
        assert_eq!(msg[128..136], 5i64.to_le_bytes());
    }
}
