//! Stake and unbonding: stake moves into the provider's vault, only free stake unbonds,
//! and it comes back only after the unbonding period.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use gpunet::errors::GpunetError;
use gpunet::events::{ProviderRegistered, Staked, UnstakeRequested, UnstakeWithdrawn};
use gpunet::state::Provider;
use solana_signer::Signer;

#[test]
fn stake_unbond_and_withdraw_after_the_unbonding_period() {
    let mut h = Harness::new();
    let s = h.supplier(0);
    let wallet_start = h.balance(&s.tokens);

    let meta = h.send(&[h.stake_ix(&s, 300 * IO)], &[&s.wallet]).unwrap();
    assert_eq!(event::<Staked>(&meta).staked, 300 * IO);
    assert_eq!(h.balance(&s.vault), 300 * IO);
    assert_eq!(h.balance(&s.tokens), wallet_start - 300 * IO);

    let meta = h.send(&[h.request_unstake_ix(&s, 120 * IO)], &[&s.wallet]).unwrap();
    let ev: UnstakeRequested = event(&meta);
    assert_eq!((ev.staked, ev.unbonding), (180 * IO, 120 * IO));
    assert_eq!(ev.unbonding_ends_at, h.now() + UNBONDING_SECONDS);
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.unbonding), (180 * IO, 120 * IO));
    assert_eq!(h.balance(&s.vault), 300 * IO, "unbonding stake stays in the vault");

    h.advance(UNBONDING_SECONDS - 1);
    assert_error(h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]), GpunetError::StillUnbonding);
    h.advance(1);
    let meta = h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]).unwrap();
    assert_eq!(event::<UnstakeWithdrawn>(&meta).amount, 120 * IO);
    assert_eq!(h.balance(&s.vault), 180 * IO);
    assert_eq!(h.balance(&s.tokens), wallet_start - 180 * IO);
    assert_eq!(h.account::<Provider>(&s.provider).unbonding, 0);
    assert_error(h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]), GpunetError::NothingUnbonding);
}

#[test]
fn register_provider_emits_and_cannot_repeat() {
    let mut h = Harness::new();
    let wallet = h.wallet();
    let meta = h.send(&[h.register_provider_ix(&wallet.pubkey())], &[&wallet]).unwrap();
    let ev: ProviderRegistered = event(&meta);
    assert_eq!(ev.authority, wallet.pubkey());
    assert_eq!(ev.provider, provider_pda(&wallet.pubkey()));
    assert!(h.send(&[h.register_provider_ix(&wallet.pubkey())], &[&wallet]).is_err());
}

#[test]
fn bonded_stake_cannot_be_unstaked() {
    let mut h = Harness::new();
    let s = h.supplier(250 * IO);
    h.node(&s, h100_spec(2)); // bonds 2 x 100 IO
    assert_error(h.send(&[h.request_unstake_ix(&s, 51 * IO)], &[&s.wallet]), GpunetError::InsufficientFreeStake);
    h.send(&[h.request_unstake_ix(&s, 50 * IO)], &[&s.wallet]).unwrap();
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.bonded, p.unbonding), (200 * IO, 200 * IO, 50 * IO));
}

#[test]
fn zero_and_overdrawn_amounts_change_nothing() {
    let mut h = Harness::new();
    let s = h.supplier(100 * IO);
    assert_error(h.send(&[h.stake_ix(&s, 0)], &[&s.wallet]), GpunetError::ZeroAmount);
    assert_error(h.send(&[h.request_unstake_ix(&s, 0)], &[&s.wallet]), GpunetError::ZeroAmount);
    // more than the wallet holds: the token program refuses (insufficient funds = 1)
    let err = instruction_error(h.send(&[h.stake_ix(&s, 1_000_000 * IO)], &[&s.wallet]));
    assert_eq!(err, anchor_lang::solana_program::instruction::InstructionError::Custom(1));
    assert_eq!(h.account::<Provider>(&s.provider).staked, 100 * IO);
    assert_eq!(h.balance(&s.vault), 100 * IO);
}

#[test]
fn only_the_owner_moves_its_stake() {
    let mut h = Harness::new();
    let s = h.supplier(100 * IO);
    let thief = h.supplier(0);
    // the thief names the victim's provider and vault but signs as itself: seeds don't match
    let mut ix = h.request_unstake_ix(&s, 10 * IO);
    ix.accounts[0].pubkey = thief.wallet.pubkey();
    assert_error(h.send(&[ix], &[&thief.wallet]), AnchorError::ConstraintSeeds);
    // withdrawing into the thief's token account from the victim's vault
    let mut ix = h.withdraw_unstaked_ix(&s);
    ix.accounts[4].pubkey = thief.tokens;
    ix.accounts[0].is_signer = false;
    assert_error(h.send(&[ix], &[&thief.wallet]), AnchorError::AccountNotSigner);
    assert_eq!(h.balance(&s.vault), 100 * IO);
}

#[test]
fn a_second_unstake_request_waits_for_the_first_to_be_withdrawn() {
    let mut h = Harness::new();
    let s = h.supplier(300 * IO);
    let first: UnstakeRequested = event(&h.send(&[h.request_unstake_ix(&s, 100 * IO)], &[&s.wallet]).unwrap());
    h.advance(UNBONDING_SECONDS - 10);
    // a second request would have moved the first one's date: it is refused and changes nothing
    assert_error(h.send(&[h.request_unstake_ix(&s, 50 * IO)], &[&s.wallet]), GpunetError::AlreadyUnbonding);
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.unbonding, p.unbonding_ends_at), (200 * IO, 100 * IO, first.unbonding_ends_at));
    h.advance(10);
    let meta = h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]).unwrap();
    assert_eq!(event::<UnstakeWithdrawn>(&meta).amount, 100 * IO);
    // the control: once withdrawn, the next request starts its own full period
    let second: UnstakeRequested = event(&h.send(&[h.request_unstake_ix(&s, 50 * IO)], &[&s.wallet]).unwrap());
    assert_eq!((second.unbonding, second.unbonding_ends_at), (50 * IO, h.now() + UNBONDING_SECONDS));
    assert_eq!(h.balance(&s.vault), 200 * IO);
}
