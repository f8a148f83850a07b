//! Test harness: a LiteSVM running gpunet natively with the real SPL Token program and
//! Ed25519 precompile, plus builders for every gpunet instruction and the usual assertions.
#![allow(dead_code, unused_imports)] // each test file uses its own part of the harness

pub mod accounts;
pub mod builders;
pub mod staking;

use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::{Instruction, InstructionError};
use anchor_lang::solana_program::program_pack::Pack;
use anchor_lang::{AccountDeserialize, Discriminator, Event};
use anchor_spl::token::spl_token;
use base64::Engine;
use litesvm::types::{FailedTransactionMetadata, TransactionMetadata};
use litesvm::LiteSVM;
use solana_keypair::Keypair;
use solana_signer::Signer;
use solana_system_interface::instruction as system_instruction;
use solana_transaction::Transaction;
use solana_transaction_error::TransactionError;

use gpunet::state::ConfigParams;

pub use accounts::*;
pub use staking::*;

pub type TxResult = std::result::Result<TransactionMetadata, FailedTransactionMetadata>;

/// Unix time the test chain starts at.
pub const GENESIS_TIME: i64 = 1_750_000_000;
/// One IO in base units (6 decimals).
pub const IO: u64 = 1_000_000;
pub const MIN_STAKE_PER_GPU: u64 = 100 * IO;
pub const FEE_BPS: u16 = 500;
pub const UNBONDING_SECONDS: i64 = 3_600;
pub const USAGE_PERIOD_SECONDS: i64 = 60;
pub const JAIL_SECONDS: i64 = 600;
pub const SLASH_BPS: [u16; 3] = [1_000, 2_000, 5_000];
pub const SLASH_CLIENT_SHARE_BPS: u16 = 5_000;
pub const CLOSE_GRACE_SECONDS: i64 = 120;
pub const SETTLE_WINDOW_SECONDS: i64 = 300;
pub const LEASE_RETENTION_SECONDS: i64 = 86_400;
/// The longest a verification may be recorded for (verification is not required by default).
pub const MAX_VERIFICATION_SECONDS: i64 = 7 * 86_400;

pub struct Harness {
    pub svm: LiteSVM,
    pub admin: Keypair,
    pub attester: Keypair,
    pub mint_authority: Keypair,
    pub mint: Pubkey,
    pub treasury: Pubkey,
}

impl Harness {
    /// A chain with the IO mint, a treasury and an initialised config.
    pub fn new() -> Self {
        let mut h = Self::uninitialised();
        let params = h.default_params();
        h.send(&[h.initialize_ix(&params)], &[&h.admin.insecure_clone()]).expect("initialize");
        let staking = h.configure_staking_ix(h.default_staking_params());
        h.send(&[staking], &[&h.admin.insecure_clone()]).expect("configure_staking");
        h
    }

    /// A chain with the IO mint and a treasury, before `initialize`.
    pub fn uninitialised() -> Self {
        Self::uninitialised_on(gpunet_localnet::gpunet_svm())
    }

    /// `uninitialised` on a given SVM (with the gpunet program in it).
    pub fn uninitialised_on(mut svm: LiteSVM) -> Self {
        let mut clock: Clock = svm.get_sysvar();
        clock.unix_timestamp = GENESIS_TIME;
        clock.slot = 1;
        svm.set_sysvar(&clock);
        let admin = Keypair::new();
        let attester = Keypair::new();
        let mint_authority = Keypair::new();
        for key in [&admin, &attester, &mint_authority] {
            svm.airdrop(&key.pubkey(), 100_000_000_000).expect("airdrop");
        }
        // the admin deployed the program: only its upgrade authority may initialize it
        gpunet_localnet::set_upgrade_authority(&mut svm, &admin.pubkey()).expect("ProgramData");
        let mut h = Self { svm, admin, attester, mint_authority, mint: Pubkey::default(), treasury: Pubkey::default() };
        h.mint = h.create_mint();
        h.treasury = h.token_account(&h.admin.pubkey());
        h
    }

    pub fn default_params(&self) -> ConfigParams {
        ConfigParams {
            treasury: self.treasury,
            protocol_fee_bps: FEE_BPS,
            min_stake_per_gpu: MIN_STAKE_PER_GPU,
            unbonding_seconds: UNBONDING_SECONDS,
            usage_period_seconds: USAGE_PERIOD_SECONDS,
            jail_seconds: JAIL_SECONDS,
            slash_bps: SLASH_BPS,
            slash_client_share_bps: SLASH_CLIENT_SHARE_BPS,
            attesters: vec![self.attester.pubkey()],
            paused: false,
            close_grace_seconds: CLOSE_GRACE_SECONDS,
            settle_window_seconds: SETTLE_WINDOW_SECONDS,
            lease_retention_seconds: LEASE_RETENTION_SECONDS,
            min_verification_tier: 0,
            max_verification_seconds: MAX_VERIFICATION_SECONDS,
        }
    }

    // --- transactions

    /// Sends `ixs` paid by the first signer, with a fresh blockhash so identical retries differ.
    pub fn send(&mut self, ixs: &[Instruction], signers: &[&Keypair]) -> TxResult {
        self.svm.expire_blockhash();
        let tx =
            Transaction::new_signed_with_payer(ixs, Some(&signers[0].pubkey()), signers, self.svm.latest_blockhash());
        self.svm.send_transaction(tx)
    }

    /// A funded wallet.
    pub fn wallet(&mut self) -> Keypair {
        let key = Keypair::new();
        self.svm.airdrop(&key.pubkey(), 10_000_000_000).expect("airdrop");
        key
    }

    // --- time

    pub fn now(&self) -> i64 {
        self.svm.get_sysvar::<Clock>().unix_timestamp
    }

    /// Moves the clock forward, a slot per 400 ms like a validator.
    pub fn advance(&mut self, seconds: i64) {
        let mut clock: Clock = self.svm.get_sysvar();
        clock.unix_timestamp += seconds;
        clock.slot += (seconds as u64 * 5).div_ceil(2);
        self.svm.set_sysvar(&clock);
    }

    // --- tokens

    fn create_mint(&mut self) -> Pubkey {
        let mint = Keypair::new();
        let rent = self.svm.minimum_balance_for_rent_exemption(spl_token::state::Mint::LEN);
        let payer = self.mint_authority.insecure_clone();
        let ixs = [
            system_instruction::create_account(
                &payer.pubkey(),
                &mint.pubkey(),
                rent,
                spl_token::state::Mint::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_mint2(&spl_token::ID, &mint.pubkey(), &payer.pubkey(), None, 6).unwrap(),
        ];
        self.send(&ixs, &[&payer, &mint]).expect("create mint");
        mint.pubkey()
    }

    /// A new IO token account owned by `owner`.
    pub fn token_account(&mut self, owner: &Pubkey) -> Pubkey {
        self.token_account_for_mint(owner, &self.mint.clone())
    }

    pub fn token_account_for_mint(&mut self, owner: &Pubkey, mint: &Pubkey) -> Pubkey {
        let account = Keypair::new();
        let rent = self.svm.minimum_balance_for_rent_exemption(spl_token::state::Account::LEN);
        let payer = self.mint_authority.insecure_clone();
        let ixs = [
            system_instruction::create_account(
                &payer.pubkey(),
                &account.pubkey(),
                rent,
                spl_token::state::Account::LEN as u64,
                &spl_token::ID,
            ),
            spl_token::instruction::initialize_account3(&spl_token::ID, &account.pubkey(), mint, owner).unwrap(),
        ];
        self.send(&ixs, &[&payer, &account]).expect("create token account");
        account.pubkey()
    }

    pub fn mint_to(&mut self, account: &Pubkey, amount: u64) {
        let payer = self.mint_authority.insecure_clone();
        let ix =
            spl_token::instruction::mint_to(&spl_token::ID, &self.mint, account, &payer.pubkey(), &[], amount).unwrap();
        self.send(&[ix], &[&payer]).expect("mint_to");
    }

    pub fn balance(&self, token_account: &Pubkey) -> u64 {
        let account = self.svm.get_account(token_account).expect("token account exists");
        spl_token::state::Account::unpack(&account.data).expect("token account").amount
    }

    pub fn exists(&self, key: &Pubkey) -> bool {
        self.svm.get_account(key).is_some_and(|a| a.lamports > 0)
    }

    // --- program accounts

    pub fn account<T: AccountDeserialize>(&self, key: &Pubkey) -> T {
        let account = self.svm.get_account(key).expect("account exists");
        T::try_deserialize(&mut account.data.as_slice()).expect("deserialize account")
    }
}

/// The events of type `E` a transaction emitted, decoded from its `Program data:` log lines.
pub fn events<E: Event + AnchorDeserialize + Discriminator>(meta: &TransactionMetadata) -> Vec<E> {
    meta.logs
        .iter()
        .filter_map(|line| line.strip_prefix("Program data: "))
        .filter_map(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .filter(|bytes| bytes.starts_with(E::DISCRIMINATOR))
        .map(|bytes| E::try_from_slice(&bytes[E::DISCRIMINATOR.len()..]).expect("decode event"))
        .collect()
}

/// The one event of type `E` a transaction emitted.
pub fn event<E: Event + AnchorDeserialize + Discriminator>(meta: &TransactionMetadata) -> E {
    let mut all = events::<E>(meta);
    assert_eq!(all.len(), 1, "expected exactly one event, logs: {:#?}", meta.logs);
    all.remove(0)
}

/// The instruction error a failed transaction ended with.
pub fn instruction_error(result: TxResult) -> InstructionError {
    match result {
        Ok(meta) => panic!("transaction succeeded, expected failure; logs: {:#?}", meta.logs),
        Err(failed) => match failed.err {
            TransactionError::InstructionError(_, err) => err,
            other => panic!("expected an instruction error, got {other:?}; logs: {:#?}", failed.meta.logs),
        },
    }
}

/// Asserts that the transaction failed with custom program error `code`
/// (a `GpunetError`, or one of Anchor's own `ErrorCode`s).
#[track_caller]
pub fn assert_error(result: TxResult, code: impl Into<u32>) {
    let code = code.into();
    match instruction_error(result) {
        InstructionError::Custom(got) => assert_eq!(got, code, "expected error {code}, got {got}"),
        other => panic!("expected custom error {code}, got {other:?}"),
    }
}
