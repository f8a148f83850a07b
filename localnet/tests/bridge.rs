//! Native bridge tests: a tiny plain-Rust program (no Anchor) exercises logs,
//! events, CPI with PDA signatures, sysvars, return data, errors, panics and
//! account writes through `gpunet_localnet::add_native_program`.

use {
    gpunet_localnet::{add_native_program, native_entry, LiteSVM},
    litesvm::types::TransactionResult,
    solana_account::Account,
    solana_instruction::{error::InstructionError, AccountMeta, Instruction},
    solana_keypair::Keypair,
    solana_program::{
        account_info::AccountInfo,
        clock::Clock,
        log::sol_log_data,
        program::{invoke_signed, set_return_data},
        program_error::ProgramError,
        program_stubs,
        sysvar::Sysvar,
    },
    solana_pubkey::Pubkey,
    solana_signer::Signer,
    solana_system_interface::instruction as system_instruction,
    solana_transaction::Transaction,
    solana_transaction_error::TransactionError,
};

const PROGRAM_ID: Pubkey = Pubkey::new_from_array([7; 32]);
const ANCHOR_LIKE_ID: Pubkey = Pubkey::new_from_array([8; 32]);
const SYSTEM_PROGRAM: Pubkey = solana_system_interface::program::ID;
const VAULT_SEED: &[u8] = b"vault";
const DATA_SEED: &[u8] = b"data";

fn pda(seed: &[u8]) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seed], &PROGRAM_ID)
}

fn u64_arg(data: &[u8]) -> Result<u64, ProgramError> {
    data.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).ok_or(ProgramError::InvalidInstructionData)
}

/// The test program; its first instruction byte selects the behaviour.
fn test_program(program_id: &Pubkey, accounts: &[AccountInfo], data: &[u8]) -> Result<(), ProgramError> {
    match data.first() {
        // Logs and an event, as Anchor's emit! does.
        Some(0) => {
            program_stubs::sol_log("hello from native");
            sol_log_data(&[b"event", &[1, 2, 3]]);
            Ok(())
        }
        // Transfer `amount` from the vault PDA (signed for) to accounts[1].
        Some(1) => {
            let amount = u64_arg(data)?;
            let (vault, bump) = Pubkey::find_program_address(&[VAULT_SEED], program_id);
            let before = accounts[0].lamports();
            invoke_signed(
                &system_instruction::transfer(&vault, accounts[1].key, amount),
                &accounts[..3],
                &[&[VAULT_SEED, &[bump]]],
            )?;
            // The callee's changes must be visible to the caller's AccountInfos.
            if accounts[0].lamports() != before - amount {
                return Err(ProgramError::Custom(1000));
            }
            Ok(())
        }
        // Clock sysvar back through return data.
        Some(2) => {
            let clock = Clock::get()?;
            let mut out = clock.slot.to_le_bytes().to_vec();
            out.extend_from_slice(&clock.unix_timestamp.to_le_bytes());
            set_return_data(&out);
            Ok(())
        }
        Some(3) => Err(ProgramError::Custom(42)),
        // Modify an owned account, then panic: nothing may be committed.
        Some(4) => {
            accounts[0].try_borrow_mut_data()?.fill(0xee);
            panic!("boom");
        }
        // Resize an owned account and fill it.
        Some(5) => {
            let len = u64_arg(data)? as usize;
            accounts[0].resize(len)?;
            accounts[0].try_borrow_mut_data()?.fill(0xab);
            Ok(())
        }
        // CPI into the system program creating a PDA owned by this program
        // (owner change + growth seen by the caller), then write into it.
        Some(6) => {
            let space = u64_arg(data)?;
            let (data_pda, bump) = Pubkey::find_program_address(&[DATA_SEED], program_id);
            invoke_signed(
                &system_instruction::create_account(accounts[0].key, &data_pda, 10_000_000, space, program_id),
                &accounts[..3],
                &[&[DATA_SEED, &[bump]]],
            )?;
            let account = &accounts[1];
            if account.owner != program_id || account.data_len() as u64 != space {
                return Err(ProgramError::Custom(1001));
            }
            account.try_borrow_mut_data()?.copy_from_slice(&vec![0x5a; space as usize]);
            Ok(())
        }
        // CPI into itself with the rest of the data (native -> native).
        Some(7) => {
            let inner = Instruction::new_with_bytes(*program_id, &data[1..], vec![]);
            invoke_signed(&inner, accounts, &[])
        }
        _ => Err(ProgramError::InvalidInstructionData),
    }
}

/// An Anchor-shaped entry (`'info` lifetime, its own error type).
struct AnchorLikeError(u32);
impl From<AnchorLikeError> for ProgramError {
    fn from(e: AnchorLikeError) -> Self {
        ProgramError::Custom(e.0)
    }
}
fn anchor_like_entry<'info>(
    _program_id: &Pubkey,
    accounts: &'info [AccountInfo<'info>],
    data: &[u8],
) -> Result<(), AnchorLikeError> {
    if data.first() == Some(&1) {
        return Err(AnchorLikeError(6000 + accounts.len() as u32));
    }
    Ok(())
}

fn setup() -> (LiteSVM, Keypair) {
    let mut svm = LiteSVM::new();
    add_native_program(&mut svm, PROGRAM_ID, test_program);
    let payer = Keypair::new();
    svm.airdrop(&payer.pubkey(), 10_000_000_000).expect("airdrop");
    (svm, payer)
}

fn send(svm: &mut LiteSVM, payer: &Keypair, ix: Instruction) -> TransactionResult {
    svm.expire_blockhash(); // identical transactions would be rejected as duplicates
    let tx = Transaction::new_signed_with_payer(&[ix], Some(&payer.pubkey()), &[payer], svm.latest_blockhash());
    svm.send_transaction(tx)
}

fn ix(data: Vec<u8>, accounts: Vec<AccountMeta>) -> Instruction {
    Instruction::new_with_bytes(PROGRAM_ID, &data, accounts)
}

fn with_u64(op: u8, value: u64) -> Vec<u8> {
    let mut data = vec![op];
    data.extend_from_slice(&value.to_le_bytes());
    data
}

/// "Program X consumed 1000 of 200000 compute units" -> "Program X consumed 1000":
/// the budget depends on LiteSVM's defaults, the units used are ours.
fn without_budget(logs: &[String]) -> Vec<String> {
    logs.iter()
        .map(|line| match line.find(" consumed ").and(line.find(" of ")) {
            Some(of) => line[..of].to_string(),
            None => line.clone(),
        })
        .collect()
}

fn instruction_error(result: TransactionResult) -> (InstructionError, Vec<String>) {
    match result {
        Err(failed) => match failed.err {
            TransactionError::InstructionError(0, err) => (err, failed.meta.logs),
            other => panic!("unexpected transaction error {other:?}"),
        },
        Ok(meta) => panic!("transaction succeeded: {:?}", meta.logs),
    }
}

#[test]
fn logs_and_events_reach_the_transaction_log() {
    let (mut svm, payer) = setup();
    let meta = send(&mut svm, &payer, ix(vec![0], vec![])).expect("tx");
    assert_eq!(
        without_budget(&meta.logs),
        vec![
            format!("Program {PROGRAM_ID} invoke [1]"),
            "Program log: hello from native".to_string(),
            "Program data: ZXZlbnQ= AQID".to_string(),
            format!("Program {PROGRAM_ID} consumed 1000"),
            format!("Program {PROGRAM_ID} success"),
        ],
        "invoke/success must be logged exactly once"
    );
    assert!(meta.compute_units_consumed > 0);
}

#[test]
fn cpi_transfer_signed_by_pda() {
    let (mut svm, payer) = setup();
    let (vault, _) = pda(VAULT_SEED);
    let recipient = Pubkey::new_unique();
    svm.set_account(vault, Account { lamports: 5_000_000, owner: SYSTEM_PROGRAM, ..Account::default() })
        .expect("vault");
    let accounts = vec![
        AccountMeta::new(vault, false),
        AccountMeta::new(recipient, false),
        AccountMeta::new_readonly(SYSTEM_PROGRAM, false),
    ];
    let meta = send(&mut svm, &payer, ix(with_u64(1, 2_000_000), accounts.clone())).expect("tx");
    assert_eq!(svm.get_balance(&vault), Some(3_000_000));
    assert_eq!(svm.get_balance(&recipient), Some(2_000_000));
    assert!(meta.logs.contains(&format!("Program {SYSTEM_PROGRAM} invoke [2]")), "{:?}", meta.logs);

    // The system program's error aborts the caller with that exact error.
    let (err, _) = instruction_error(send(&mut svm, &payer, ix(with_u64(1, 9_000_000), accounts)));
    assert_eq!(err, InstructionError::Custom(1)); // SystemError::ResultWithNegativeLamports
    assert_eq!(svm.get_balance(&vault), Some(3_000_000));
}

#[test]
fn cpi_create_account_changes_owner_and_size_for_the_caller() {
    let (mut svm, payer) = setup();
    let (data_pda, _) = pda(DATA_SEED);
    let accounts = vec![
        AccountMeta::new(payer.pubkey(), true),
        AccountMeta::new(data_pda, false),
        AccountMeta::new_readonly(SYSTEM_PROGRAM, false),
    ];
    send(&mut svm, &payer, ix(with_u64(6, 64), accounts)).expect("tx");
    let account = svm.get_account(&data_pda).expect("created");
    assert_eq!(account.owner, PROGRAM_ID);
    assert_eq!(account.data, vec![0x5a; 64]);
}

#[test]
fn clock_via_sysvar_and_return_data() {
    let (mut svm, payer) = setup();
    svm.warp_to_slot(1234);
    let mut clock = svm.get_sysvar::<Clock>();
    clock.unix_timestamp = 1_700_000_000;
    svm.set_sysvar(&clock);
    let meta = send(&mut svm, &payer, ix(vec![2], vec![])).expect("tx");
    assert_eq!(meta.return_data.program_id, PROGRAM_ID);
    let mut expected = 1234u64.to_le_bytes().to_vec();
    expected.extend_from_slice(&1_700_000_000i64.to_le_bytes());
    assert_eq!(meta.return_data.data, expected);
    let return_line = format!("Program return: {PROGRAM_ID} ");
    assert!(meta.logs.iter().any(|l| l.starts_with(&return_line)), "{:?}", meta.logs);
}

#[test]
fn custom_error_surfaces_as_custom() {
    let (mut svm, payer) = setup();
    let (err, logs) = instruction_error(send(&mut svm, &payer, ix(vec![3], vec![])));
    assert_eq!(err, InstructionError::Custom(42));
    assert_eq!(logs.last(), Some(&format!("Program {PROGRAM_ID} failed: custom program error: 0x2a")));
}

#[test]
fn panic_fails_cleanly_and_changes_nothing() {
    let (mut svm, payer) = setup();
    let target = Pubkey::new_unique();
    svm.set_account(target, Account { lamports: 1_000_000, data: vec![1; 8], owner: PROGRAM_ID, ..Account::default() })
        .expect("target");
    let (err, logs) = instruction_error(send(&mut svm, &payer, ix(vec![4], vec![AccountMeta::new(target, false)])));
    assert_eq!(err, InstructionError::ProgramFailedToComplete);
    assert!(logs.iter().any(|l| l.starts_with("Program log: panicked at") && l.contains("boom")), "{logs:?}");
    assert_eq!(svm.get_account(&target).expect("target").data, vec![1; 8]);
}

#[test]
fn writes_and_resizes_owned_account() {
    let (mut svm, payer) = setup();
    let target = Pubkey::new_unique();
    svm.set_account(
        target,
        Account { lamports: 10_000_000, data: vec![1; 8], owner: PROGRAM_ID, ..Account::default() },
    )
    .expect("target");
    send(&mut svm, &payer, ix(with_u64(5, 100), vec![AccountMeta::new(target, false)])).expect("grow");
    assert_eq!(svm.get_account(&target).expect("target").data, vec![0xab; 100]);
    send(&mut svm, &payer, ix(with_u64(5, 3), vec![AccountMeta::new(target, false)])).expect("shrink");
    assert_eq!(svm.get_account(&target).expect("target").data, vec![0xab; 3]);

    // A read-only account must not be writable through the bridge.
    let (err, _) =
        instruction_error(send(&mut svm, &payer, ix(with_u64(5, 4), vec![AccountMeta::new_readonly(target, false)])));
    assert_eq!(err, InstructionError::ReadonlyDataModified);
}

#[test]
fn native_to_native_cpi_nests_logs_and_errors() {
    let (mut svm, payer) = setup();
    let accounts = vec![AccountMeta::new_readonly(PROGRAM_ID, false)];
    let meta = send(&mut svm, &payer, ix(vec![7, 0], accounts.clone())).expect("tx");
    assert_eq!(
        without_budget(&meta.logs),
        vec![
            format!("Program {PROGRAM_ID} invoke [1]"),
            format!("Program {PROGRAM_ID} invoke [2]"),
            "Program log: hello from native".to_string(),
            "Program data: ZXZlbnQ= AQID".to_string(),
            format!("Program {PROGRAM_ID} consumed 1000"),
            format!("Program {PROGRAM_ID} success"),
            format!("Program {PROGRAM_ID} consumed 2000"),
            format!("Program {PROGRAM_ID} success"),
        ]
    );
    let (err, _) = instruction_error(send(&mut svm, &payer, ix(vec![7, 3], accounts)));
    assert_eq!(err, InstructionError::Custom(42));
}

#[test]
fn native_entry_macro_wraps_anchor_shaped_entries() {
    let (mut svm, payer) = setup();
    add_native_program(&mut svm, ANCHOR_LIKE_ID, native_entry!(anchor_like_entry));
    let ok = Instruction::new_with_bytes(ANCHOR_LIKE_ID, &[0], vec![]);
    send(&mut svm, &payer, ok).expect("ok");
    let fail = Instruction::new_with_bytes(ANCHOR_LIKE_ID, &[1], vec![AccountMeta::new(payer.pubkey(), true)]);
    let (err, _) = instruction_error(send(&mut svm, &payer, fail));
    assert_eq!(err, InstructionError::Custom(6001));
}
