//! Every PDA seed the program uses, in one place (clients derive the same addresses).

pub const SEED_CONFIG: &[u8] = b"config";
pub const SEED_PROVIDER: &[u8] = b"provider";
pub const SEED_STAKE_VAULT: &[u8] = b"stake_vault";
pub const SEED_NODE: &[u8] = b"node";
pub const SEED_LEASE: &[u8] = b"lease";
pub const SEED_LEASE_VAULT: &[u8] = b"lease_vault";
pub const SEED_EVIDENCE: &[u8] = b"evidence";
