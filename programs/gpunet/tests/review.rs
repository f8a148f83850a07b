//! The holes an independent review exploited against gpunet-localnet, one test per class, each
//! played by the hostile party that found it, with an honest control in the same test, and the
//! closing state that fixes the closing-related classes (close -> settle the rest -> finalize).

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::prelude::{AccountMeta, Pubkey};
use anchor_lang::solana_program::entrypoint::ProgramResult;
use anchor_lang::solana_program::instruction::{Instruction, InstructionError};
use anchor_lang::solana_program::program::invoke;
use anchor_lang::solana_program::program_pack::Pack;
use anchor_spl::token::spl_token;
use gpunet::errors::GpunetError;
use gpunet::events::{LeaseClosed, LeaseFinalized, ProviderSlashed};
use gpunet::state::{FaultKind, Lease, LeaseStatus, Node, Provider, Receipt};
use solana_account::Account;
use solana_signer::Signer;

/// A stranger's plain SPL transfer into a vault.
fn donate(h: &mut Harness, to_vault: &Pubkey, amount: u64) {
    let donor = h.client(amount);
    let ix =
        spl_token::instruction::transfer(&spl_token::ID, &donor.tokens, to_vault, &donor.wallet.pubkey(), &[], amount)
            .unwrap();
    h.send(&[ix], &[&donor.wallet]).expect("donation");
}

/// One supplier with one `gpus`-GPU node, one client with a 1-hour lease on it, assigned.
fn running_lease(h: &mut Harness, gpus: u8, id: u64) -> (Supplier, GpuNode, Client, LeaseRef) {
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(gpus));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, id, terms(gpus, 1));
    h.assign(&lease, &[(&node, gpus)]).unwrap();
    (s, node, client, lease)
}

/// A receipt of the first (and only) assignment of a `running_lease`.
fn receipt(gpu_seconds: u64, through: i64) -> Receipt {
    Receipt { epoch: 1, gpu_seconds, through }
}

#[test]
fn a_donation_to_the_vault_neither_locks_the_lease_nor_its_node() {
    let mut h = Harness::new();
    let (s, node, client, lease) = running_lease(&mut h, 1, 1);
    let (_, honest_node, honest_client, honest) = running_lease(&mut h, 1, 2);
    donate(&mut h, &lease.vault, 1); // the attack: 1 base unit
    h.advance(60);

    for (c, l) in [(&client, &lease), (&honest_client, &honest)] {
        let wallet = c.wallet.insecure_clone();
        h.close(&wallet, l, &c.tokens).unwrap();
        h.finalize(&wallet, l, &c.tokens).unwrap_err(); // usage up to the close may still be settled
    }
    h.advance(SETTLE_WINDOW_SECONDS + 1);
    let stranger = h.wallet();
    let meta = h.finalize(&stranger, &lease, &client.tokens).unwrap();
    let ev: LeaseFinalized = event(&meta);
    assert_eq!(ev.donations, 1, "the surplus is accounted separately");
    let honest_ev: LeaseFinalized = event(&h.finalize(&stranger, &honest, &honest_client.tokens).unwrap());
    assert_eq!(honest_ev.donations, 0);

    // everything the vault held went to the client: the whole deposit back, plus the donation
    assert_eq!(h.balance(&client.tokens), 1_000 * IO + 1);
    assert_eq!(h.balance(&honest_client.tokens), 1_000 * IO);
    assert!(!h.exists(&lease.vault) && !h.exists(&honest.vault));
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.donations), (LeaseStatus::Closed, 1));
    assert_eq!(state.deposited, state.paid + state.fees + state.refunded);
    // the node was freed at the close and its supplier can leave
    for n in [&node, &honest_node] {
        assert_eq!(h.account::<Node>(&n.node).gpus_leased, 0);
    }
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
}

#[test]
fn usage_after_the_lease_end_is_never_billable() {
    let mut h = Harness::new();
    let (s, node, _client, lease) = running_lease(&mut h, 1, 1);
    let end = h.account::<Lease>(&lease.lease).ends_at().unwrap();
    h.advance(3_600 + 600);
    // the supplier donates to its own lease, so the escrow never runs dry, and keeps reporting
    donate(&mut h, &lease.vault, 10 * IO);
    let state: Lease = h.account(&lease.lease);
    let settled_until = state.assignments()[0].settled_until;
    let mut total = 0;
    let mut start = settled_until;
    while start + USAGE_PERIOD_SECONDS <= end {
        total += USAGE_PERIOD_SECONDS as u64;
        h.settle(&lease, &node, receipt(total, start + USAGE_PERIOD_SECONDS)).unwrap();
        start += USAGE_PERIOD_SECONDS;
    }
    assert_eq!(start, end, "the control: every second up to the end is paid");
    let paid_to_end = h.balance(&s.tokens);
    let past = receipt(total + USAGE_PERIOD_SECONDS as u64, end + USAGE_PERIOD_SECONDS);
    assert_error(h.settle(&lease, &node, past), GpunetError::BadPeriod);
    let straddling = receipt(total + 1, end + 1);
    assert_error(h.settle(&lease, &node, straddling), GpunetError::BadPeriod);
    assert_eq!(h.balance(&s.tokens), paid_to_end);
}

#[test]
fn a_running_lease_past_its_end_cannot_be_topped_up() {
    let mut h = Harness::new();
    let (_, _, client, lease) = running_lease(&mut h, 1, 1);
    let wallet = client.wallet.insecure_clone();
    h.advance(3_000);
    h.send(&[h.top_up_lease_ix(&client, &lease, 600)], &[&wallet]).unwrap(); // control: before the end
    assert_eq!(h.account::<Lease>(&lease.lease).ends_at().unwrap(), h.now() - 3_000 + 4_200);
    h.advance(1_200);
    let before = h.balance(&client.tokens);
    assert_error(h.send(&[h.top_up_lease_ix(&client, &lease, 600)], &[&wallet]), GpunetError::LeaseExpired);
    assert_eq!(h.balance(&client.tokens), before);
}

#[test]
fn one_piece_of_evidence_slashes_once_and_a_jailed_node_is_not_slashed_again() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let attester = h.attester.insecure_clone();
    let evidence = [0xE1; 32];
    let slash = |h: &Harness, evidence| {
        h.slash_with_evidence_ix(&attester.pubkey(), &node, FaultKind::MissedHeartbeats, None, evidence)
    };

    let first: ProviderSlashed = event(&h.send(&[slash(&h, evidence)], &[&attester]).unwrap());
    assert_eq!((first.amount, first.evidence_hash), (100 * IO, evidence));
    let vault = h.balance(&s.vault);
    // the same evidence again, after the jail is served and the node unjailed: refused
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    assert!(
        matches!(instruction_error(h.send(&[slash(&h, evidence)], &[&attester])), InstructionError::Custom(0)),
        "the evidence record exists: creating it again fails (system program: account already in use)"
    );
    // new evidence against a node still jailed for the first fault: refused
    h.send(&[slash(&h, [0xE2; 32])], &[&attester]).unwrap(); // control: a new fault of the unjailed node
    let vault_after_second = h.balance(&s.vault);
    assert_eq!(vault_after_second, vault - vault / 10);
    assert_error(h.send(&[slash(&h, [0xE3; 32])], &[&attester]), GpunetError::NodeJailed);
    assert_eq!(h.balance(&s.vault), vault_after_second);
    assert_eq!(h.account::<Provider>(&s.provider).slashed, 1_000 * IO - vault_after_second);
}

#[test]
fn a_slash_compensates_only_a_live_lease_the_node_holds_and_at_most_what_it_lost() {
    let mut h = Harness::new();
    let (s, node, client, lease) = running_lease(&mut h, 1, 1);
    let wallet = client.wallet.insecure_clone();
    // the accomplice's lease is closed and finalized: it was refunded in full
    h.close(&wallet, &lease, &client.tokens).unwrap();
    h.finalize(&h.attester.insecure_clone(), &lease, &client.tokens).unwrap();
    let before = h.balance(&client.tokens);
    assert_error(h.slash(&node, FaultKind::InvalidUsage, Some((&lease, &client.tokens))), GpunetError::LeaseNotLive);
    assert_eq!(h.balance(&client.tokens), before);

    // control: a live lease of the node gets its share, capped by the share's worth over the time
    // it ran (1 GPU x 2 IO/h x 30 min = 1 IO, far below half of a 50 % slash of 1,000 IO); the
    // rest goes to the treasury
    let live = h.open_lease(&client, 2, terms(1, 1));
    h.advance(JAIL_SECONDS); // the node is free again (its lease closed); not jailed yet
    h.assign(&live, &[(&node, 1)]).unwrap();
    h.advance(1_800);
    let treasury = h.treasury;
    let treasury_before = h.balance(&treasury);
    let client_before = h.balance(&client.tokens);
    let ev: ProviderSlashed = event(&h.slash(&node, FaultKind::InvalidUsage, Some((&live, &client.tokens))).unwrap());
    assert_eq!((ev.amount, ev.to_client), (500 * IO, IO));
    assert_eq!(h.balance(&client.tokens), client_before + IO);
    assert_eq!(h.balance(&treasury), treasury_before + 499 * IO);
    assert_eq!(h.account::<Lease>(&live.lease).compensated, IO);

    // a lease the node no longer holds (its share moved away) gets nothing
    let s2 = h.supplier(1_000 * IO);
    let spare = h.node(&s2, h100_spec(1));
    h.reassign(&live, &node, &spare).unwrap();
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    assert_error(
        h.slash(&node, FaultKind::MissedHeartbeats, Some((&live, &client.tokens))),
        GpunetError::NodeNotInLease,
    );
}

#[test]
fn only_a_lost_node_share_moves_and_only_at_the_expected_price() {
    let mut h = Harness::new();
    let (_, node, _, lease) = running_lease(&mut h, 1, 1);
    let s2 = h.supplier(1_000 * IO);
    let spare = h.node(&s2, h100_spec(1));
    // a healthy node's share cannot be taken away
    assert_error(h.reassign(&lease, &node, &spare), GpunetError::NodeNotLost);
    h.slash(&node, FaultKind::MissedHeartbeats, None).unwrap();
    // the spare's supplier raises its price after the move was decided: refused
    let decided = h.reassign_lease_ix(&h.attester.pubkey(), &lease, &node, &spare);
    h.send(&[h.update_node_ix(&s2, &spare.node, EU, 3 * IO)], &[&s2.wallet]).unwrap();
    assert_error(h.send(&[decided], &[&h.attester.insecure_clone()]), GpunetError::PriceChanged);
    // control: at the price it has now, before the end
    h.reassign(&lease, &node, &spare).unwrap();
    assert_eq!(h.account::<Lease>(&lease.lease).assignments()[0].price_per_gpu_hour, 3 * IO);
    // nor after the lease's end, when the spare would be booked for nothing billable
    let s3 = h.supplier(1_000 * IO);
    let late_spare = h.node(&s3, h100_spec(1));
    let (_, late_node, _, late) = running_lease(&mut h, 1, 2);
    h.slash(&late_node, FaultKind::MissedHeartbeats, None).unwrap();
    h.advance(3_600);
    assert_error(h.reassign(&late, &late_node, &late_spare), GpunetError::LeaseExpired);
}

#[test]
fn assignment_refuses_a_price_raised_after_the_placement() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    let attester = h.attester.insecure_clone();
    let decided = h.assign_lease_ix(&attester.pubkey(), &lease, &[(&node, 1)]);
    h.send(&[h.update_node_ix(&s, &node.node, EU, 3 * IO)], &[&s.wallet]).unwrap();
    assert_error(h.send(&[decided], &[&attester]), GpunetError::PriceChanged);
    assert_eq!(h.account::<Lease>(&lease.lease).status, LeaseStatus::Open);
    let short = h.assign_lease_at_ix(&attester.pubkey(), &lease, &[(&node, 1)], vec![]);
    assert_error(h.send(&[short], &[&attester]), GpunetError::InvalidAssignment);
    h.assign(&lease, &[(&node, 1)]).unwrap(); // control: at the current price
}

#[test]
fn a_close_keeps_what_the_nodes_are_owed_until_it_is_settled() {
    let mut h = Harness::new();
    let (s, node, client, lease) = running_lease(&mut h, 2, 1);
    let wallet = client.wallet.insecure_clone();
    h.advance(50);
    let delivered = h.full_use_receipt(&lease, &node, 50);
    // the client closes before the node's last receipt is settled
    let closed: LeaseClosed = event(&h.close(&wallet, &lease, &client.tokens).unwrap());
    let owed = gpunet::math::owed_at_most(2 * IO, 2, h.now() - 50, h.now()).unwrap();
    assert_eq!((closed.retained, closed.billable_until), (owed, h.now()));
    assert_eq!(closed.refund, 6 * IO - owed, "the rest is refunded at once");
    assert_eq!(h.account::<Node>(&node.node).gpus_leased, 0, "the node is free at once");
    // no double close, no top-up; the finalization waits for the settlement
    assert_error(h.close(&wallet, &lease, &client.tokens), GpunetError::LeaseClosed);
    assert_error(h.send(&[h.top_up_lease_ix(&client, &lease, 60)], &[&wallet]), GpunetError::LeaseClosed);
    assert_error(h.finalize(&wallet, &lease, &client.tokens), GpunetError::SettlementWindowOpen);

    // usage after the close is not billable; the delivered period is
    h.advance(30);
    let after = Receipt { gpu_seconds: 2 * 80, through: h.now(), ..delivered };
    assert_error(h.settle(&lease, &node, after), GpunetError::BadPeriod);
    let supplier_before = h.balance(&s.tokens);
    h.settle(&lease, &node, delivered).unwrap();
    assert_eq!(h.balance(&s.tokens) - supplier_before, owed - gpunet::math::bps_of_ceil(owed, FEE_BPS).unwrap());
    // everything owed is settled: anyone may finalize now, and the escrow is all accounted for
    let stranger = h.wallet();
    let done: LeaseFinalized = event(&h.finalize(&stranger, &lease, &client.tokens).unwrap());
    assert_eq!(done.refund, 0);
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - owed);
    assert_error(h.finalize(&stranger, &lease, &client.tokens), AnchorError::AccountNotInitialized); // the vault is gone
    let late = Receipt { gpu_seconds: delivered.gpu_seconds + 1, through: h.now(), ..delivered };
    assert_error(h.settle(&lease, &node, late), AnchorError::AccountNotInitialized);
    // the vault is gone
}

#[test]
fn the_attester_closes_from_the_end_on_and_a_stranger_after_the_grace() {
    let mut h = Harness::new();
    let (_, _, client, by_attester) = running_lease(&mut h, 1, 1);
    let (_, _, other_client, by_stranger) = running_lease(&mut h, 1, 2);
    let stranger = h.wallet();
    let attester = h.attester.insecure_clone();
    h.advance(3_599);
    assert_error(h.close(&attester, &by_attester, &client.tokens), GpunetError::LeaseNotExpired);
    h.advance(1);
    h.close(&attester, &by_attester, &client.tokens).unwrap(); // the coordinator ends leases at their end
    assert_error(h.close(&stranger, &by_stranger, &other_client.tokens), GpunetError::LeaseNotExpired);
    h.advance(CLOSE_GRACE_SECONDS - 1);
    assert_error(h.close(&stranger, &by_stranger, &other_client.tokens), GpunetError::LeaseNotExpired);
    h.advance(1);
    h.close(&stranger, &by_stranger, &other_client.tokens).unwrap();
}

#[test]
fn a_late_close_bills_only_up_to_the_end_and_settles_until_the_deadline() {
    let mut h = Harness::new();
    let (_, node, client, lease) = running_lease(&mut h, 1, 1);
    let end = h.account::<Lease>(&lease.lease).ends_at().unwrap();
    let stranger = h.wallet();
    h.advance(3_600 + CLOSE_GRACE_SECONDS);
    let closed: LeaseClosed = event(&h.close(&stranger, &lease, &client.tokens).unwrap());
    assert_eq!(closed.billable_until, end, "billing stops at the end, not at the late close");
    assert_eq!(closed.retained, 2 * IO, "one GPU-hour at 2 IO could still be owed");
    // the window: the attester settles up to the end; after the deadline nothing settles
    let start = h.account::<Lease>(&lease.lease).assignments()[0].settled_until;
    h.settle(&lease, &node, receipt(60, start + 60)).unwrap();
    h.advance(SETTLE_WINDOW_SECONDS);
    h.settle(&lease, &node, receipt(120, start + 120)).unwrap(); // at the deadline: still in
    h.advance(1);
    assert_error(h.settle(&lease, &node, receipt(180, start + 180)), GpunetError::SettlementWindowOver);
    h.finalize(&stranger, &lease, &client.tokens).unwrap();
}

#[test]
fn a_finalized_lease_is_reclaimed_for_rent_only_after_the_retention() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    let stranger = h.wallet();
    let reclaim = |h: &mut Harness| {
        let ix = h.reclaim_lease_ix(&stranger.pubkey(), &lease);
        h.send(&[ix], &[&stranger])
    };
    assert_error(reclaim(&mut h), GpunetError::LeaseRetained); // still open
    h.close_and_finalize(&client, &lease).unwrap(); // nothing was owed: both at once
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
    h.advance(LEASE_RETENTION_SECONDS - 1);
    assert_error(reclaim(&mut h), GpunetError::LeaseRetained);
    h.advance(1);
    let rent = h.svm.get_account(&lease.lease).unwrap().lamports;
    let lamports_before = h.svm.get_balance(&lease.client).unwrap();
    reclaim(&mut h).unwrap();
    assert!(!h.exists(&lease.lease));
    assert_eq!(h.svm.get_balance(&lease.client).unwrap(), lamports_before + rent, "the rent goes to the client");
}

#[test]
fn only_the_upgrade_authority_initializes_and_never_with_a_freezable_mint() {
    let mut h = Harness::uninitialised();
    let params = h.default_params();
    // a stranger front-runs the admin on a fresh deployment
    let stranger = h.wallet();
    let mut ix = h.initialize_ix(&params);
    ix.accounts[0].pubkey = stranger.pubkey();
    assert_error(h.send(&[ix.clone()], &[&stranger]), GpunetError::NotUpgradeAuthority);
    // ...or passes a ProgramData of its own making (not the loader's account at the loader's PDA)
    let fake = Pubkey::new_unique();
    let real: Account = h.svm.get_account(&gpunet_localnet::program_data_address()).unwrap();
    let mut forged = real.clone();
    forged.data[13..45].copy_from_slice(stranger.pubkey().as_ref());
    h.svm.set_account(fake, forged.clone()).unwrap();
    ix.accounts[4].pubkey = fake;
    assert_error(h.send(&[ix], &[&stranger]), AnchorError::ConstraintSeeds);
    assert!(!h.exists(&config_pda()));

    // a mint with a freeze authority is refused, even to the admin
    let admin = h.admin.insecure_clone();
    let freezable = Pubkey::new_unique();
    let mut mint: Account = h.svm.get_account(&h.mint).unwrap();
    let mut state = spl_token::state::Mint::unpack(&mint.data).unwrap();
    state.freeze_authority = Some(admin.pubkey()).into();
    spl_token::state::Mint::pack(state, &mut mint.data).unwrap();
    h.svm.set_account(freezable, mint).unwrap();
    let mut ix = h.initialize_ix(&params);
    ix.accounts[2].pubkey = freezable;
    ix.accounts[3].pubkey = h.token_account_for_mint(&admin.pubkey(), &freezable);
    let mut frozen_params = params.clone();
    frozen_params.treasury = ix.accounts[3].pubkey;
    ix.data = anchor_lang::InstructionData::data(&gpunet::instruction::Initialize { params: frozen_params });
    assert_error(h.send(&[ix], &[&admin]), GpunetError::MintHasFreezeAuthority);

    h.send(&[h.initialize_ix(&params)], &[&admin]).unwrap(); // control: the upgrade authority
}

#[test]
fn the_program_has_no_idl_instructions() {
    let mut h = Harness::new();
    let stranger = h.wallet();
    // Anchor's IdlCreateAccount: the IDL tag, then the instruction (borsh enum 0, data_len u64)
    let mut data = anchor_lang::idl::IDL_IX_TAG_LE.to_vec();
    data.push(0);
    data.extend_from_slice(&10_000u64.to_le_bytes());
    let accounts = vec![AccountMeta::new(stranger.pubkey(), true)];
    let ix = Instruction { program_id: gpunet::ID, accounts, data };
    assert_error(h.send(&[ix], &[&stranger]), AnchorError::IdlInstructionStub);
    // control: the program answers its own instructions
    h.send(&[h.register_provider_ix(&stranger.pubkey())], &[&stranger]).unwrap();
}

/// A wrapper program that forwards its whole instruction to gpunet by CPI.
fn forward_to_gpunet(_: &Pubkey, accounts: &[anchor_lang::prelude::AccountInfo], data: &[u8]) -> ProgramResult {
    let metas = accounts[1..]
        .iter()
        .map(|a| AccountMeta { pubkey: *a.key, is_signer: a.is_signer, is_writable: a.is_writable })
        .collect();
    invoke(&Instruction { program_id: gpunet::ID, accounts: metas, data: data.to_vec() }, accounts)
}

#[test]
fn settle_usage_refuses_to_run_by_cpi() {
    let mut h = Harness::new();
    let (s, node, _, lease) = running_lease(&mut h, 1, 1);
    let wrapper = Pubkey::new_unique();
    gpunet_localnet::add_native_program(&mut h.svm, wrapper, forward_to_gpunet);
    h.advance(60);
    let [ed25519, settle] = h.usage_ixs(&lease, &node, h.full_use_receipt(&lease, &node, 60));
    let mut wrapped = settle.clone();
    wrapped.program_id = wrapper;
    wrapped.accounts.insert(0, AccountMeta::new_readonly(gpunet::ID, false));
    let attester = h.attester.insecure_clone();
    let before = h.balance(&s.tokens);
    assert_error(h.send(&[ed25519.clone(), wrapped], &[&attester]), GpunetError::CalledByCpi);
    assert_eq!(h.balance(&s.tokens), before);
    h.send(&[ed25519, settle], &[&attester]).unwrap(); // control: top level
    assert!(h.balance(&s.tokens) > before);
}
