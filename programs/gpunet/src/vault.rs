//! Token movements into and out of the program's vault PDAs.
use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Token, TokenAccount, Transfer};

/// Moves `amount` from a wallet's token account into a vault, signed by the wallet.
pub fn deposit<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    vault: &Account<'info, TokenAccount>,
    owner: &Signer<'info>,
    amount: u64,
) -> Result<()> {
    let accounts =
        Transfer { from: from.to_account_info(), to: vault.to_account_info(), authority: owner.to_account_info() };
    token::transfer(CpiContext::new(token_program.to_account_info(), accounts), amount)
}

/// Moves `amount` out of a vault, signed by the vault's authority PDA; zero moves nothing.
pub fn pay_out<'info>(
    token_program: &Program<'info, Token>,
    vault: &Account<'info, TokenAccount>,
    to: &Account<'info, TokenAccount>,
    vault_authority: AccountInfo<'info>,
    signer_seeds: &[&[u8]],
    amount: u64,
) -> Result<()> {
    if amount == 0 {
        return Ok(());
    }
    let accounts = Transfer { from: vault.to_account_info(), to: to.to_account_info(), authority: vault_authority };
    let signers = [signer_seeds];
    token::transfer(CpiContext::new_with_signer(token_program.to_account_info(), accounts, &signers), amount)
}

/// Closes an empty vault, returning its rent to `rent_to`.
pub fn close<'info>(
    token_program: &Program<'info, Token>,
    vault: &Account<'info, TokenAccount>,
    rent_to: AccountInfo<'info>,
    vault_authority: AccountInfo<'info>,
    signer_seeds: &[&[u8]],
) -> Result<()> {
    let accounts = CloseAccount { account: vault.to_account_info(), destination: rent_to, authority: vault_authority };
    let signers = [signer_seeds];
    token::close_account(CpiContext::new_with_signer(token_program.to_account_info(), accounts, &signers))
}
