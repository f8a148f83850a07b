//! Config: initialisation, admin-only updates, limits and the pause switch.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::solana_program::instruction::InstructionError;
use gpunet::errors::GpunetError;
use gpunet::events::{ConfigInitialized, ConfigUpdated};
use gpunet::state::{Config, MAX_PROTOCOL_FEE_BPS};
use solana_signer::Signer;
use solana_transaction_error::TransactionError;

#[test]
fn initialize_records_every_parameter_and_emits_an_event() {
    let mut h = Harness::uninitialised();
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    let meta = h.send(&[h.initialize_ix(&params)], &[&admin]).unwrap();

    let config: Config = h.account(&config_pda());
    assert_eq!(config.admin, admin.pubkey());
    assert_eq!(config.io_mint, h.mint);
    assert_eq!(config.treasury, h.treasury);
    assert_eq!(config.protocol_fee_bps, FEE_BPS);
    assert_eq!(config.min_stake_per_gpu, MIN_STAKE_PER_GPU);
    assert_eq!(config.slash_bps, SLASH_BPS);
    assert_eq!(config.attester_count, 1);
    assert!(config.is_attester(&h.attester.pubkey()));
    assert!(!config.paused);
    assert_eq!((config.min_verification_tier, config.max_verification_seconds), (0, MAX_VERIFICATION_SECONDS));

    let ev: ConfigInitialized = event(&meta);
    assert_eq!(ev.io_mint, h.mint);
    assert_eq!(ev.params, params);
}

#[test]
fn initialize_cannot_run_twice() {
    let mut h = Harness::new();
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    // re-initialisation: the config PDA already exists, so `init` fails in the system program
    let err = instruction_error(h.send(&[h.initialize_ix(&params)], &[&admin]));
    assert_ne!(err, anchor_lang::solana_program::instruction::InstructionError::ProgramFailedToComplete);
    let config: Config = h.account(&config_pda());
    assert_eq!(config.admin, admin.pubkey());
}

#[test]
fn fee_above_twenty_percent_and_bad_attester_lists_are_refused() {
    let mut h = Harness::new();
    assert_error(h.update_config(|p| p.protocol_fee_bps = MAX_PROTOCOL_FEE_BPS + 1), GpunetError::FeeTooHigh);
    assert_error(h.update_config(|p| p.attesters.clear()), GpunetError::InvalidAttesters);
    assert_error(
        h.update_config(|p| p.attesters = (0..5).map(|_| anchor_lang::prelude::Pubkey::new_unique()).collect()),
        GpunetError::InvalidAttesters,
    );
    assert_error(h.update_config(|p| p.slash_bps[2] = 10_001), GpunetError::InvalidBasisPoints);
    assert_error(h.update_config(|p| p.usage_period_seconds = 0), GpunetError::InvalidDuration);
    let config: Config = h.account(&config_pda());
    assert_eq!(config.protocol_fee_bps, FEE_BPS, "refused updates change nothing");
    h.update_config(|p| p.protocol_fee_bps = MAX_PROTOCOL_FEE_BPS).unwrap();
}

#[test]
fn only_the_admin_updates_the_config() {
    let mut h = Harness::new();
    let stranger = h.wallet();
    let mut params = h.default_params();
    params.protocol_fee_bps = 0;
    let ix = h.update_config_ix(&stranger.pubkey(), &params);
    assert_error(h.send(&[ix], &[&stranger]), GpunetError::NotAdmin);

    // missing signer: the admin's key without its signature
    let mut ix = h.update_config_ix(&h.admin.pubkey(), &params);
    ix.accounts[0].is_signer = false;
    assert_error(h.send(&[ix], &[&stranger]), AnchorError::AccountNotSigner);

    let meta = h.update_config(|p| p.protocol_fee_bps = 0).unwrap();
    let ev: ConfigUpdated = event(&meta);
    assert_eq!(ev.params.protocol_fee_bps, 0);
    assert_eq!(h.account::<Config>(&config_pda()).protocol_fee_bps, 0);
}

#[test]
fn pause_stops_new_leases_but_not_withdrawals_or_refunds() {
    let mut h = Harness::new();
    let supplier = h.supplier(500 * IO);
    let node = h.node(&supplier, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 2));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.send(&[h.request_unstake_ix(&supplier, 100 * IO)], &[&supplier.wallet]).unwrap();

    h.update_config(|p| p.paused = true).unwrap();
    let second = LeaseRef::new(client.wallet.pubkey(), 2);
    assert_error(h.send(&[h.open_lease_ix(&client, &second, terms(1, 1))], &[&client.wallet]), GpunetError::Paused);
    assert!(!h.exists(&second.lease));

    h.advance(UNBONDING_SECONDS);
    h.send(&[h.withdraw_unstaked_ix(&supplier)], &[&supplier.wallet]).unwrap();
    let receipt = h.full_use_receipt(&lease, &node, 30);
    h.settle(&lease, &node, receipt).unwrap();
    let before = h.balance(&client.tokens);
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    assert!(h.balance(&client.tokens) > before, "refund paid while paused");
}

#[test]
fn treasury_must_hold_the_io_mint() {
    let mut h = Harness::new();
    let other_mint_account = {
        let fake_mint = h.mint; // same mint: fine
        h.token_account_for_mint(&h.admin.pubkey(), &fake_mint)
    };
    h.update_config(|p| p.treasury = other_mint_account).unwrap();
    // the treasury named in the params must be the account passed
    let mut params = h.default_params();
    params.treasury = anchor_lang::prelude::Pubkey::new_unique();
    let admin = h.admin.insecure_clone();
    let mut ix = h.update_config_ix(&admin.pubkey(), &params);
    ix.accounts[2].pubkey = h.treasury;
    assert_error(h.send(&[ix], &[&admin]), GpunetError::WrongTreasury);
}

#[test]
fn program_logs_reach_the_transaction_log_like_on_chain() {
    let mut h = Harness::uninitialised();
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    let meta = h.send(&[h.initialize_ix(&params)], &[&admin]).unwrap();
    assert!(meta.logs.iter().any(|l| l == "Program log: Instruction: Initialize"), "{:#?}", meta.logs);
    assert!(meta.logs.iter().any(|l| l.starts_with("Program data: ")), "events are logged");

    let failed = h.update_config(|p| p.protocol_fee_bps = 9_999).unwrap_err();
    assert!(
        failed.meta.logs.iter().any(|l| l.starts_with("Program log: AnchorError") && l.contains("FeeTooHigh")),
        "{:#?}",
        failed.meta.logs
    );
}

/// `GPUNET_PROGRAM_SO` selects the build every test runs (see gpunet_localnet::ProgramBuild):
/// the native build costs a flat fee per instruction, the SBF build is metered.
#[test]
fn the_program_runs_as_the_selected_build() {
    let mut h = Harness::uninitialised();
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    let meta = h.send(&[h.initialize_ix(&params)], &[&admin]).unwrap();
    let prefix = format!("Program {} consumed ", gpunet::ID);
    let consumed: u64 = meta
        .logs
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no consumption line in {:#?}", meta.logs));
    // Natively: the flat fee plus the System program's CPI (a builtin, 150 CU). On SBF the
    // program's own code is metered: Borsh, PDA checks and the CPI cost over 10,000 CU.
    let flat = gpunet_localnet::NATIVE_PROGRAM_COMPUTE_UNITS;
    match gpunet_localnet::ProgramBuild::from_env() {
        gpunet_localnet::ProgramBuild::Native => assert!(consumed < 2 * flat, "{consumed} CU natively"),
        gpunet_localnet::ProgramBuild::Sbf { .. } => assert!(consumed > 5 * flat, "{consumed} CU on SBF"),
    }
}

/// An SBF build is made for one stack frame layout (scripts/build-sbf); on the other it must stop
/// before doing anything. Natively there are no SBF stack frames, so there is nothing to check;
/// scripts/test runs this file on both SBF builds.
#[test]
fn an_sbf_build_on_the_other_stack_frame_layout_stops_at_once() {
    let gpunet_localnet::ProgramBuild::Sbf { path, stack_frame_gaps } = gpunet_localnet::ProgramBuild::from_env()
    else {
        return;
    };
    let other = gpunet_localnet::ProgramBuild::Sbf { path, stack_frame_gaps: !stack_frame_gaps };
    let mut h = Harness::uninitialised_on(other.svm().expect("the SBF build loads"));
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    let failed = h.send(&[h.initialize_ix(&params)], &[&admin]).expect_err("must not run on the other layout");
    let logs = failed.meta.logs.join("\n");
    if stack_frame_gaps {
        // On contiguous frames the gapped build's guard names the fix.
        assert_eq!(failed.err, TransactionError::InstructionError(0, InstructionError::Custom(9_000)), "{logs}");
        assert!(logs.contains("deploy the build of scripts/build-sbf without --stack-frame-gaps"), "{logs}");
    } else {
        // On gapped frames the contiguous build's first stack argument lands in a gap.
        assert!(logs.contains("Access violation in stack frame"), "{logs}");
    }
    assert!(!h.exists(&config_pda()), "nothing was created");
}
