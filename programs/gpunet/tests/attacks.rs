//! One negative test per Sealevel attack class (missing signer, wrong owner, data mismatch, type
//! cosplay, re-initialisation, arbitrary CPI, duplicate accounts, bumps, PDA sharing, closing and
//! revival, fake sysvar); the attacks an independent review played are in review.rs.
//! Usage-proof attacks live in settlement.rs.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::prelude::{AccountMeta, Pubkey};
use gpunet::errors::GpunetError;
use gpunet::state::{Provider, SEED_PROVIDER};
use solana_account::Account;
use solana_signer::Signer;

#[test]
fn missing_signer() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    let payer = h.wallet();
    let lease = LeaseRef::new(client.wallet.pubkey(), 1);
    let mut ix = h.open_lease_ix(&client, &lease, terms(1, 1));
    ix.accounts[0].is_signer = false; // spend the client's tokens without its signature
    assert_error(h.send(&[ix], &[&payer]), AnchorError::AccountNotSigner);
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
}

/// A copy of a genuine program account, placed at `at` and owned by `owner`.
fn forge(h: &mut Harness, genuine: &Pubkey, at: Pubkey, owner: Pubkey) {
    let mut account: Account = h.svm.get_account(genuine).unwrap();
    account.owner = owner;
    h.svm.set_account(at, account).unwrap();
}

#[test]
fn wrong_owner() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    // byte-for-byte a node, but owned by the system program
    let fake = GpuNode { node: Pubkey::new_unique(), ..h.node(&s, h100_spec(1)) };
    forge(&mut h, &node.node, fake.node, anchor_lang::system_program::ID);
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert_error(h.assign(&lease, &[(&fake, 1)]), AnchorError::AccountOwnedByWrongProgram);
}

#[test]
fn account_data_mismatch() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let other = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    // assign with a node paired with a provider that does not own it
    let bad = GpuNode { provider: other.provider, ..h.node(&s, h100_spec(1)) };
    assert_error(h.assign(&lease, &[(&bad, 1)]), GpunetError::AccountMismatch);
    // settle paying a provider that does not own the node
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let wrong = GpuNode { provider: other.provider, payout_tokens: other.tokens, ..h.node(&s, h100_spec(1)) };
    let wrong = GpuNode { node: node.node, key: node.key.insecure_clone(), ..wrong };
    assert_error(h.settle(&lease, &wrong, receipt), GpunetError::AccountMismatch);
}

#[test]
fn type_cosplay() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    // a provider account (owned by gpunet, right size class) passed where a node is expected
    let cosplay = GpuNode { node: s.provider, ..h.node(&s, h100_spec(1)) };
    assert_error(h.assign(&lease, &[(&cosplay, 1)]), AnchorError::AccountDiscriminatorMismatch);
}

#[test]
fn reinitialisation() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let ix = h.register_node_ix(&s, &node.key.pubkey(), h100_spec(2));
    assert!(h.send(&[ix], &[&s.wallet, &node.key]).is_err());
    assert_eq!(h.account::<gpunet::state::Node>(&node.node).spec.gpu_count, 1);
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert!(h.send(&[h.open_lease_ix(&client, &lease, terms(2, 2))], &[&client.wallet]).is_err());
    assert_eq!(h.account::<gpunet::state::Lease>(&lease.lease).terms.gpu_count, 1);
}

#[test]
fn arbitrary_cpi_target() {
    let mut h = Harness::new();
    let s = h.supplier(0);
    let mut ix = h.stake_ix(&s, 10 * IO);
    ix.accounts[5].pubkey = Pubkey::new_unique(); // a "token program" the attacker wrote
    assert_error(h.send(&[ix], &[&s.wallet]), AnchorError::InvalidProgramId);
}

#[test]
fn duplicate_mutable_accounts() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    // moving a share from a node to itself would double-count its GPUs
    assert_error(h.reassign(&lease, &node, &node), GpunetError::DuplicateNode);
    let lease2 = h.open_lease(&client, 2, terms(2, 1));
    let twin = GpuNode { key: node.key.insecure_clone(), ..node };
    assert_error(h.assign(&lease2, &[(&node, 1), (&twin, 1)]), GpunetError::DuplicateNode);
}

#[test]
fn non_canonical_bump() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let (canonical, bump) = Pubkey::find_program_address(&[SEED_PROVIDER, s.wallet.pubkey().as_ref()], &gpunet::ID);
    assert_eq!(h.account::<Provider>(&canonical).bump, bump, "init stores the canonical bump");
    // the same seeds with a lower, non-canonical bump give another valid PDA
    let other_bump = (0..bump).rev().find_map(|b| {
        Pubkey::create_program_address(&[SEED_PROVIDER, s.wallet.pubkey().as_ref(), &[b]], &gpunet::ID).ok()
    });
    let non_canonical = other_bump.expect("a non-canonical bump exists");
    forge(&mut h, &canonical, non_canonical, gpunet::ID);
    let mut ix = h.request_unstake_ix(&s, IO);
    ix.accounts[2].pubkey = non_canonical;
    assert_error(h.send(&[ix], &[&s.wallet]), AnchorError::ConstraintSeeds);
}

#[test]
fn pda_sharing() {
    let mut h = Harness::new();
    let victim = h.supplier(1_000 * IO);
    let attacker = h.supplier(1_000 * IO);
    h.send(&[h.request_unstake_ix(&attacker, 1_000 * IO)], &[&attacker.wallet]).unwrap();
    h.advance(UNBONDING_SECONDS);
    // withdraw the attacker's unbonded stake out of the victim's vault
    let mut ix = h.withdraw_unstaked_ix(&attacker);
    ix.accounts[3].pubkey = victim.vault;
    assert_error(h.send(&[ix], &[&attacker.wallet]), AnchorError::ConstraintSeeds);
    assert_eq!(h.balance(&victim.vault), 1_000 * IO);

    // refund one lease out of another lease's vault
    let client = h.client(1_000 * IO);
    let small = h.open_lease(&client, 1, terms(1, 1));
    let big = h.open_lease(&client, 2, terms(4, 10));
    let wallet = client.wallet.insecure_clone();
    let mut ix = h.close_lease_ix(&wallet.pubkey(), &small, &client.tokens);
    ix.accounts[3].pubkey = big.vault;
    assert_error(h.send(&[ix], &[&wallet]), AnchorError::ConstraintSeeds);
}

#[test]
fn account_closing_and_revival() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    // release (after the unbonding period since its deregistration), then refund the rent to the
    // address in the same transaction
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    h.advance(UNBONDING_SECONDS);
    let revive = solana_system_interface::instruction::transfer(&s.wallet.pubkey(), &node.node, 10_000_000);
    h.send(&[h.release_node_ix(&s, &node.node), revive], &[&s.wallet]).unwrap();
    let account = h.svm.get_account(&node.node).unwrap();
    assert_eq!(account.owner, anchor_lang::system_program::ID, "a revived address is a plain system account");
    assert!(account.data.is_empty());
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert_error(h.assign(&lease, &[(&node, 1)]), AnchorError::AccountOwnedByWrongProgram);
    assert_error(
        h.send(&[h.update_node_ix(&s, &node.node, US, 1)], &[&s.wallet]),
        AnchorError::AccountOwnedByWrongProgram,
    );
}

#[test]
fn fake_sysvar() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &node, 60);
    // an account dressed as the instructions sysvar (sysvar owner), holding forged content
    let fake = Pubkey::new_unique();
    let forged = Account {
        lamports: 1_000_000,
        data: vec![0; 256],
        owner: anchor_lang::solana_program::sysvar::ID,
        executable: false,
        rent_epoch: 0,
    };
    h.svm.set_account(fake, forged).unwrap();
    let [_, mut settle_ix] = h.usage_ixs(&lease, &node, receipt);
    settle_ix.accounts[7] = AccountMeta::new_readonly(fake, false);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[settle_ix], &[&attester]), GpunetError::AccountMismatch);
}
