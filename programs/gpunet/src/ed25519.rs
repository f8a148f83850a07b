//! Finds and checks the Ed25519 precompile instruction that carries a node's signature.
//!
//! The precompile has already verified the signature when our instruction runs (an
//! invalid signature fails the whole transaction). What the precompile cannot know is
//! *what* it verified: we check that the instruction right before ours holds exactly one
//! signature whose public key, signature and message all live inside its own data (so no
//! other instruction can swap them in), that the key is the node's and that the message
//! is byte for byte the usage receipt being settled. The same sysvar tells whether we run as a
//! top-level instruction (`require_top_level`).
use anchor_lang::prelude::*;
use anchor_lang::solana_program::ed25519_program;
use anchor_lang::solana_program::sysvar::instructions::{load_current_index_checked, load_instruction_at_checked};

use crate::errors::GpunetError;

/// The precompile's own header: signature count + padding.
const HEADER_LEN: usize = 2;
/// One entry of offsets per signature.
const OFFSETS_LEN: usize = 14;
/// Marks an offset as pointing into the Ed25519 instruction itself.
const THIS_INSTRUCTION: u16 = u16::MAX;
const PUBKEY_LEN: usize = 32;
const SIGNATURE_LEN: usize = 64;

fn read_u16(data: &[u8], at: usize) -> Result<u16> {
    let bytes = data.get(at..at + 2).ok_or(GpunetError::MalformedEd25519Instruction)?;
    Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn slice(data: &[u8], offset: u16, len: usize) -> Result<&[u8]> {
    let start = usize::from(offset);
    let end = start.checked_add(len).ok_or(GpunetError::MalformedEd25519Instruction)?;
    Ok(data.get(start..end).ok_or(GpunetError::MalformedEd25519Instruction)?)
}

/// Requires that the instruction before the current one verifies `message` signed by `signer`.
pub fn require_signed_by_previous_instruction(
    instructions_sysvar: &AccountInfo,
    signer: &Pubkey,
    message: &[u8],
) -> Result<()> {
    let current = load_current_index_checked(instructions_sysvar)?;
    let previous = current.checked_sub(1).ok_or(GpunetError::MissingEd25519Instruction)?;
    let ix = load_instruction_at_checked(usize::from(previous), instructions_sysvar)?;
    require_keys_eq!(ix.program_id, ed25519_program::ID, GpunetError::MissingEd25519Instruction);

    let data = &ix.data;
    require!(data.len() >= HEADER_LEN + OFFSETS_LEN && data[0] == 1, GpunetError::MalformedEd25519Instruction);
    let field = |n: usize| read_u16(data, HEADER_LEN + 2 * n);
    let (sig_offset, sig_ix) = (field(0)?, field(1)?);
    let (key_offset, key_ix) = (field(2)?, field(3)?);
    let (msg_offset, msg_len, msg_ix) = (field(4)?, field(5)?, field(6)?);
    require!(
        sig_ix == THIS_INSTRUCTION && key_ix == THIS_INSTRUCTION && msg_ix == THIS_INSTRUCTION,
        GpunetError::MalformedEd25519Instruction
    );
    slice(data, sig_offset, SIGNATURE_LEN)?;
    let key = slice(data, key_offset, PUBKEY_LEN)?;
    require!(key == signer.as_ref(), GpunetError::WrongSigner);
    let signed = slice(data, msg_offset, usize::from(msg_len))?;
    require!(signed == message, GpunetError::MessageMismatch);
    Ok(())
}

/// Requires that the running instruction is a top-level instruction of gpunet, not a CPI: under
/// a CPI the transaction's current instruction belongs to the calling program. (A wrapper could
/// otherwise pair our settlement with its own logic, e.g. reuse the Ed25519 instruction before it.)
pub fn require_top_level(instructions_sysvar: &AccountInfo) -> Result<()> {
    let current = load_current_index_checked(instructions_sysvar)?;
    let ix = load_instruction_at_checked(usize::from(current), instructions_sysvar)?;
    require_keys_eq!(ix.program_id, crate::ID, GpunetError::CalledByCpi);
    Ok(())
}
