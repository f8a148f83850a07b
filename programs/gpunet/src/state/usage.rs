//! The canonical usage receipt a worker signs with its node key, every metering tick.
//!
//! A receipt is cumulative: the GPU-seconds the node has delivered to its share of the lease since
//! the share was assigned to it, through a moment. Each one supersedes the ones before, so the
//! worker keeps only its newest and the attester settles whenever it likes: `settle_usage` pays the
//! difference to what is settled. `epoch` names the assignment (`Assignment::epoch`), so a receipt
//! from an earlier assignment of the same node to the same lease never counts for a later one.
//!
//! Layout (136 bytes, little-endian integers), produced byte for byte by the Python worker:
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! |      0 |   16 | domain tag `b"gpunet-receipt1\0"`        |
//! |     16 |   32 | program id (binds the receipt to one deployment) |
//! |     48 |   32 | lease account address                   |
//! |     80 |   32 | node signing key                        |
//! |    112 |    8 | epoch (u64): the assignment's epoch in the lease |
//! |    120 |    8 | gpu_seconds (u64): cumulative since the assignment |
//! |    128 |    8 | through (i64, unix seconds): what the cumulative runs through |
use anchor_lang::prelude::*;

pub const RECEIPT_DOMAIN_TAG: &[u8; 16] = b"gpunet-receipt1\0";
pub const RECEIPT_MESSAGE_LEN: usize = 136;

/// A node's cumulative usage of its share of a lease, as signed by the node.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The assignment it is for (`Assignment::epoch`).
    pub epoch: u64,
    /// GPU-seconds delivered since the assignment, in all.
    pub gpu_seconds: u64,
    /// The moment (unix seconds) `gpu_seconds` runs through.
    pub through: i64,
}

impl Receipt {
    pub fn message(&self, lease: &Pubkey, node_key: &Pubkey) -> [u8; RECEIPT_MESSAGE_LEN] {
        let mut msg = [0u8; RECEIPT_MESSAGE_LEN];
        msg[0..16].copy_from_slice(RECEIPT_DOMAIN_TAG);
        msg[16..48].copy_from_slice(crate::ID.as_ref());
        msg[48..80].copy_from_slice(lease.as_ref());
        msg[80..112].copy_from_slice(node_key.as_ref());
        msg[112..120].copy_from_slice(&self.epoch.to_le_bytes());
        msg[120..128].copy_from_slice(&self.gpu_seconds.to_le_bytes());
        msg[128..136].copy_from_slice(&self.through.to_le_bytes());
        msg
    }
}
