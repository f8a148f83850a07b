//! The gpunet program, registered natively in a LiteSVM.
use litesvm::LiteSVM;
use solana_account_info::AccountInfo;
use solana_program_error::ProgramResult;
use solana_pubkey::Pubkey;

use crate::add_native_program;

/// Anchor's `entry<'info>` wants `&'info [AccountInfo<'info>]`, which the plain entry type
/// cannot promise (`AccountInfo` is invariant in its lifetime). The accounts outlive this
/// call and Anchor keeps no reference past it, so narrowing the slice's lifetime is sound.
fn gpunet_entry(program_id: &Pubkey, accounts: &[AccountInfo], data: &[u8]) -> ProgramResult {
    let accounts: &[AccountInfo] = unsafe { std::mem::transmute::<&[AccountInfo], &[AccountInfo]>(accounts) };
    gpunet::entry(program_id, accounts, data)
}

/// A LiteSVM with the SPL programs, the precompiles and the gpunet program at `gpunet::ID`.
pub fn gpunet_svm() -> LiteSVM {
    let mut svm = LiteSVM::new();
    add_native_program(&mut svm, gpunet::ID, gpunet_entry);
    svm
}
