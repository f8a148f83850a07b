//! A record that one piece of fault evidence has been used for a slash.
use anchor_lang::prelude::*;

use crate::state::FaultKind;

/// PDA `[SEED_EVIDENCE, evidence_hash]`: created by the slash that used the evidence, so the same
/// evidence can never slash twice (its creation fails once it exists).
#[account]
#[derive(InitSpace)]
pub struct Evidence {
    /// The node slashed for it.
    pub node: Pubkey,
    pub fault: FaultKind,
    /// When the slash landed (unix seconds).
    pub slashed_at: i64,
    /// Canonical bump of this PDA.
    pub bump: u8,
    /// When the fault was committed, as the attester found it (appended last).
    pub fault_at: i64,
}
