//! Every PDA seed the program uses, in one place (clients derive the same addresses).

pub const SEED_CONFIG: &[u8] = b"config";
pub const SEED_PROVIDER: &[u8] = b"provider";
pub const SEED_STAKE_VAULT: &[u8] = b"stake_vault";
pub const SEED_NODE: &[u8] = b"node";
pub const SEED_LEASE: &[u8] = b"lease";
pub const SEED_LEASE_VAULT: &[u8] = b"lease_vault";
pub const SEED_EVIDENCE: &[u8] = b"evidence";
pub const SEED_STAKING: &[u8] = b"staking";
pub const SEED_REWARD_VAULT: &[u8] = b"reward_vault";
pub const SEED_POOL: &[u8] = b"pool";
pub const SEED_COHORT: &[u8] = b"cohort";
pub const SEED_DELEGATION: &[u8] = b"delegation";
pub const SEED_REWARD_INDEX: &[u8] = b"reward_index";
pub const SEED_REWARD_ROOT: &[u8] = b"reward_root";
