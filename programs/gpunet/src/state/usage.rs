//! The canonical usage-report message a worker signs with its node key.
//!
//! Layout (144 bytes, little-endian integers), produced byte for byte by the Python worker:
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! |      0 |   16 | domain tag `b"gpunet-usage-v1\0"`        |
//! |     16 |   32 | program id (binds the report to one deployment) |
//! |     48 |   32 | lease account address                   |
//! |     80 |   32 | node signing key                        |
//! |    112 |    8 | seq (u64), 1 for the first report of a (lease, node) |
//! |    120 |    8 | period_start (i64, unix seconds)        |
//! |    128 |    8 | period_end (i64, unix seconds)          |
//! |    136 |    8 | gpu_seconds (u64)                       |
use anchor_lang::prelude::*;

pub const USAGE_DOMAIN_TAG: &[u8; 16] = b"gpunet-usage-v1\0";
pub const USAGE_MESSAGE_LEN: usize = 144;

/// One period of usage of one node on one lease, as signed by the node.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageReport {
    /// 1 + the previous settled seq for this (lease, node).
    pub seq: u64,
    /// Start of the period (unix seconds).
    pub period_start: i64,
    /// End of the period (unix seconds), after the start.
    pub period_end: i64,
    /// GPU-seconds used in the period.
    pub gpu_seconds: u64,
}

impl UsageReport {
    pub fn message(&self, lease: &Pubkey, node_key: &Pubkey) -> [u8; USAGE_MESSAGE_LEN] {
        let mut msg = [0u8; USAGE_MESSAGE_LEN];
        msg[0..16].copy_from_slice(USAGE_DOMAIN_TAG);
        msg[16..48].copy_from_slice(crate::ID.as_ref());
        msg[48..80].copy_from_slice(lease.as_ref());
        msg[80..112].copy_from_slice(node_key.as_ref());
        msg[112..120].copy_from_slice(&self.seq.to_le_bytes());
        msg[120..128].copy_from_slice(&self.period_start.to_le_bytes());
        msg[128..136].copy_from_slice(&self.period_end.to_le_bytes());
        msg[136..144].copy_from_slice(&self.gpu_seconds.to_le_bytes());
        msg
    }
}
