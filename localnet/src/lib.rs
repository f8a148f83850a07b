//! Native bridge: runs Solana programs compiled for the host (plain
//! `solana-program` entrypoints or Anchor 0.31 `entry` functions) inside
//! LiteSVM, as if they were deployed SBF programs.
//!
//! The tests, the benches and gpunet-localnet run the program natively by default
//! (fast to build, debuggable; `GPUNET_PROGRAM_SO` selects the SBF build instead,
//! see gpunet_program.rs). Natively, each program is registered as a LiteSVM
//! *builtin* ([`add_native_program`]). All of them share one builtin function
//! ([`NativeProgram`]) that, like `solana-program-test`'s
//! `invoke_builtin_function`, serializes the instruction's accounts with the
//! SBF ABI, runs the entry on them and writes the results back.
//!
//! Off-chain, the program's "syscalls" (`sol_log`, `sol_log_data`,
//! `sol_invoke_signed`, sysvar getters, return data, ...) go through
//! `solana_sysvar::program_stubs`. This crate installs its own
//! [`SyscallStubs`] that route them to the `InvokeContext` of the instruction
//! currently running on this thread, so logs, Anchor events (`emit!` ->
//! "Program data: ..."), CPIs and return data behave like on chain.
//!
//! Known differences from SBF execution (state them to users):
//! - `msg!` (solana-msg 2.2) is a bare `println!` on non-Solana targets; the
//!   workspace patches in our stand-in (localnet/solana-msg) whose log hook this
//!   bridge installs, so `msg!` text reaches the transaction log as on chain.
//! - No compute-unit metering of program code (each native instruction costs a
//!   flat [`NATIVE_PROGRAM_COMPUTE_UNITS`]), no stack or heap limits.
//! - `sol_get_processed_sibling_instruction` and `sol_get_epoch_stake` are not
//!   implemented (the default stubs answer `None` / 0).
//! - The program registry is process-wide: one entry per program id, shared by
//!   every `LiteSVM` instance in the process (the last registration wins).

use {
    solana_account_info::AccountInfo,
    solana_instruction::{error::InstructionError, error::UNSUPPORTED_SYSVAR, Instruction},
    solana_log_collector::ic_msg,
    solana_program_error::{ProgramError, ProgramResult},
    solana_program_runtime::{
        invoke_context::InvokeContext, serialization::serialize_parameters, solana_sbpf::vm::ContextObject, stable_log,
        sysvar_cache::SysvarCache,
    },
    solana_pubkey::Pubkey,
    solana_stable_layout::stable_instruction::StableInstruction,
    solana_sysvar::program_stubs::{set_syscall_stubs, SyscallStubs},
    solana_timings::ExecuteTimings,
    solana_transaction_context::BorrowedAccount,
    std::{
        cell::{Cell, RefCell},
        collections::HashMap,
        panic::AssertUnwindSafe,
        sync::{Arc, LazyLock, Once, PoisonError, RwLock},
    },
};

mod gpunet_program;
pub use gpunet_program::{
    gpunet_svm, program_data_address, set_upgrade_authority, ProgramBuild, PROGRAM_SO_ENV, STACK_FRAME_GAPS_ENV,
};
pub use litesvm::LiteSVM;

/// Plain solana-program style entrypoint: `fn(&Pubkey, &[AccountInfo], &[u8]) -> ProgramResult`.
pub type NativeEntry = solana_program_entrypoint::ProcessInstruction;

/// Flat cost charged per native instruction. The runtime rejects a builtin
/// that succeeds without consuming any unit, and real programs are not free.
pub const NATIVE_PROGRAM_COMPUTE_UNITS: u64 = 1_000;

/// Same limit as `solana_cpi::MAX_RETURN_DATA` (enforced by the real syscall).
const MAX_RETURN_DATA: usize = 1024;
/// `sol_get_sysvar` result codes, as the runtime's syscall returns them.
const SUCCESS: u64 = solana_program_entrypoint::SUCCESS;
const OFFSET_LENGTH_EXCEEDS_SYSVAR: u64 = 1;
const SYSVAR_NOT_FOUND: u64 = 2;

/// Program id -> native entry. Process-wide because the builtin function is a
/// plain `fn` pointer with no room for per-program state.
static PROGRAMS: LazyLock<RwLock<HashMap<Pubkey, NativeEntry>>> = LazyLock::new(|| RwLock::new(HashMap::new()));

thread_local! {
    /// The InvokeContext of the native instruction running on this thread (null
    /// when none). The stubs are plain trait methods with no context argument,
    /// so this is the only way for them to reach the runtime.
    static INVOKE_CONTEXT: Cell<*mut InvokeContext<'static>> = const { Cell::new(std::ptr::null_mut()) };
    /// An error that, on chain, would have aborted the running program at once
    /// (a failed CPI, oversized return data). Natively the stub can only return
    /// a `ProgramError` to the program, which may map it imprecisely or even
    /// swallow it; the builtin fails the instruction with this error instead.
    static PENDING_ABORT: RefCell<Option<InstructionError>> = const { RefCell::new(None) };
    /// Message of the last panic inside a native program, recorded by our panic hook.
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Registers `entry` as the native program at `program_id` in `svm` (via
/// `svm.add_builtin`), and installs the syscall stubs (once per process).
///
/// Anchor's `entry<'info>(&Pubkey, &'info [AccountInfo<'info>], &[u8]) -> Result<()>`
/// does not fit [`NativeEntry`]; wrap it with [`native_entry!`]:
/// `add_native_program(&mut svm, gpunet::ID, native_entry!(gpunet::entry))`.
///
/// # Panics
/// If `program_id` is a sysvar id (LiteSVM refuses the program account).
pub fn add_native_program(svm: &mut LiteSVM, program_id: Pubkey, entry: NativeEntry) {
    install_stubs();
    PROGRAMS.write().unwrap_or_else(PoisonError::into_inner).insert(program_id, entry);
    svm.add_builtin(program_id, NativeProgram::vm);
    // LiteSVM 0.7.1's add_builtin makes the program account owned by the BPF
    // loader, so the runtime would hand the instruction to the BPF loader,
    // which rejects a builtin cache entry (UnsupportedProgramId). Builtins
    // must be owned by the native loader, as in a real bank.
    let account = solana_account::Account {
        lamports: 1,
        data: vec![0],
        owner: solana_sdk_ids::native_loader::id(),
        executable: true,
        rent_epoch: 0,
    };
    if let Err(err) = svm.set_account(program_id, account) {
        // Only possible for a sysvar id, which cannot be a program id either.
        panic!("cannot register a native program at {program_id}: {err}");
    }
}

/// Wraps an Anchor-style `entry` function (`fn<'info>(&Pubkey, &'info
/// [AccountInfo<'info>], &[u8]) -> Result<(), E>` with `E: Into<ProgramError>`)
/// into a [`NativeEntry`]. Only `$crate` paths are used, so the caller needs
/// no extra dependency: `native_entry!(gpunet::entry)`.
#[macro_export]
macro_rules! native_entry {
    ($entry:path) => {{
        fn __native_entry<'a>(
            program_id: &$crate::__private::Pubkey,
            accounts: &[$crate::__private::AccountInfo<'a>],
            data: &[u8],
        ) -> $crate::__private::ProgramResult {
            // SAFETY: see `shorten_account_lifetimes`.
            let accounts = unsafe { $crate::__private::shorten_account_lifetimes(accounts) };
            $entry(program_id, accounts, data).map_err(::core::convert::Into::into)
        }
        __native_entry as $crate::NativeEntry
    }};
}

#[doc(hidden)]
pub mod __private {
    pub use {solana_account_info::AccountInfo, solana_program_error::ProgramResult, solana_pubkey::Pubkey};

    /// Turns `&'s [AccountInfo<'a>]` into `&'s [AccountInfo<'s>]`, the shape
    /// Anchor's `entry<'info>` wants. `AccountInfo` is invariant in its
    /// lifetime, so the compiler cannot shorten it, and copying into a leaked
    /// buffer would leak memory on every instruction of a long-running node.
    ///
    /// # Safety
    /// Sound as long as the program stores no reference shorter than `'a` into
    /// the account's `RefCell`s (Anchor only reassigns them from raw parts of
    /// the same serialized buffer, in `AccountInfo::resize`).
    pub unsafe fn shorten_account_lifetimes<'s, 'a: 's>(accounts: &'s [AccountInfo<'a>]) -> &'s [AccountInfo<'s>] {
        std::mem::transmute::<&'s [AccountInfo<'a>], &'s [AccountInfo<'s>]>(accounts)
    }
}

solana_program_runtime::declare_process_instruction!(NativeProgram, NATIVE_PROGRAM_COMPUTE_UNITS, |invoke_context| {
    run_native_program(invoke_context)
});

/// Sets the thread's current InvokeContext and restores the previous one on
/// drop: a CPI into another native program re-enters the builtin on the same
/// thread, and the caller must find its own context again afterwards.
struct ContextGuard(*mut InvokeContext<'static>);

impl ContextGuard {
    fn enter(invoke_context: &mut InvokeContext) -> Self {
        let ptr = std::ptr::from_mut(invoke_context).cast::<InvokeContext<'static>>();
        Self(INVOKE_CONTEXT.with(|current| current.replace(ptr)))
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        INVOKE_CONTEXT.with(|current| current.set(self.0));
    }
}

/// Runs `f` on the current thread's InvokeContext; `None` outside a native program.
fn with_invoke_context<R>(f: impl FnOnce(&mut InvokeContext<'static>) -> R) -> Option<R> {
    let ptr = INVOKE_CONTEXT.with(Cell::get);
    // SAFETY: the pointer is non-null only while `run_native_program` is on
    // this thread's stack, holding the `&mut InvokeContext` it came from and not
    // using it while the entry (which calls the stubs) runs.
    unsafe { ptr.as_mut() }.map(f)
}

/// The body of the shared builtin: look the program up, serialize, run, write back.
/// "Program <id> invoke [n]" / "success" / "failed" are logged by the runtime's
/// `process_executable_chain` around every builtin, so they are not logged here;
/// "consumed" and "Program return:" are (the BPF loader logs those for SBF).
fn run_native_program(invoke_context: &mut InvokeContext) -> Result<(), InstructionError> {
    let transaction_context = &*invoke_context.transaction_context;
    let instruction_context = transaction_context.get_current_instruction_context()?;
    let program_id = *instruction_context.get_last_program_key(transaction_context)?;
    let entry = PROGRAMS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&program_id)
        .copied()
        .ok_or(InstructionError::UnsupportedProgramId)?;

    // Serialize exactly like the BPF loader (copying account data: there is
    // no VM memory to map), then parse it back into AccountInfos pointing
    // into `parameters`, which outlives the call and the write-back.
    let mask_rent_epoch = invoke_context.get_feature_set().mask_out_rent_epoch_in_vm_serialization;
    let (mut parameters, _regions, _metadata) =
        serialize_parameters(transaction_context, instruction_context, true, mask_rent_epoch)?;
    // SAFETY: `parameters` holds a buffer in the SBF input layout.
    let (program_id_ref, account_infos, data) =
        unsafe { solana_program_entrypoint::deserialize(parameters.as_slice_mut().as_mut_ptr()) };

    // The flat units were charged before we were called: add them back to
    // report what the program used, like the BPF loader does.
    let units_before = invoke_context.get_remaining().saturating_add(NATIVE_PROGRAM_COMPUTE_UNITS);
    let result = {
        let _guard = ContextGuard::enter(invoke_context);
        PENDING_ABORT.with(|abort| abort.borrow_mut().take());
        PANIC_MESSAGE.with(|message| message.borrow_mut().take());
        std::panic::catch_unwind(AssertUnwindSafe(|| entry(program_id_ref, &account_infos, data)))
    };
    let pending_abort = PENDING_ABORT.with(|abort| abort.borrow_mut().take());
    let logger = invoke_context.get_log_collector();
    let outcome = match result {
        Err(payload) => {
            let message = PANIC_MESSAGE
                .with(|message| message.borrow_mut().take())
                .unwrap_or_else(|| panic_payload_message(payload.as_ref()));
            stable_log::program_log(&logger, &message);
            Err(InstructionError::ProgramFailedToComplete)
        }
        Ok(program_result) => match pending_abort {
            // On chain the program would have been aborted where this happened,
            // whatever it then did with the error the stub returned.
            Some(err) => Err(err),
            // ProgramError -> u64 -> InstructionError keeps Custom(n) as Custom(n).
            None => program_result.map_err(|err| InstructionError::from(u64::from(err))),
        },
    };
    // The lines the BPF loader adds after every SBF program, success or not
    // ("invoke", "success" and "failed" come from the runtime itself).
    let remaining = invoke_context.get_remaining();
    ic_msg!(
        invoke_context,
        "Program {} consumed {} of {} compute units",
        program_id,
        units_before.saturating_sub(remaining),
        units_before
    );
    let (_, return_data) = invoke_context.transaction_context.get_return_data();
    if !return_data.is_empty() {
        stable_log::program_return(&logger, &program_id, return_data);
    }
    outcome?;

    // Write back. The instruction context is fetched again: CPIs pushed and
    // popped frames meanwhile. Duplicated accounts are written once.
    let transaction_context = &*invoke_context.transaction_context;
    let instruction_context = transaction_context.get_current_instruction_context()?;
    for index in 0..instruction_context.get_number_of_instruction_accounts() {
        if instruction_context.is_instruction_account_duplicate(index)?.is_some() {
            continue;
        }
        let mut account = instruction_context.try_borrow_instruction_account(transaction_context, index)?;
        if let Some(info) = account_infos.iter().find(|info| info.key == account.get_key()) {
            store_account_info(&mut account, info)?;
        }
    }
    Ok(())
}

/// Copies an AccountInfo's lamports, data (with resize) and owner into the
/// transaction's account. Only fields that changed are written, so an illegal
/// change (debiting a foreign account, writing a read-only one, ...) fails with
/// the runtime's own error while untouched read-only accounts pass.
fn store_account_info(account: &mut BorrowedAccount, info: &AccountInfo) -> Result<(), InstructionError> {
    if account.get_lamports() != info.lamports() {
        account.set_lamports(info.lamports())?;
    }
    let data = info.try_borrow_data().map_err(|_| InstructionError::AccountBorrowFailed)?;
    if account.get_data() != &data[..] {
        // set_data_from_slice checks resizing but not ownership/writability.
        account.can_data_be_changed()?;
        account.set_data_from_slice(&data)?;
    }
    // Owner last: a program may fill in data before giving the account away.
    if account.get_owner() != info.owner {
        account.set_owner(info.owner.as_ref())?;
    }
    Ok(())
}

fn panic_payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    format!("panicked: {text}")
}

fn install_stubs() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        set_syscall_stubs(Box::new(BridgeStubs));
        // `msg!` bypasses the stubs off-chain; our solana-msg stand-in calls this instead.
        solana_msg::set_log_hook(|message| BridgeStubs.sol_log(message));
        // Record the panic message with its location ("panicked at src/x.rs:1:2:\n...")
        // for the transaction log, like the SBF panic handler does; the previous
        // hook still prints to stderr.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_program = INVOKE_CONTEXT.try_with(|c| !c.get().is_null()).unwrap_or(false);
            if in_program {
                let _ = PANIC_MESSAGE.try_with(|m| *m.borrow_mut() = Some(info.to_string()));
            }
            previous(info);
        }));
    });
}

/// Remembers an error that must fail the current native program (see `PENDING_ABORT`).
fn abort_with(err: InstructionError) {
    PENDING_ABORT.with(|abort| *abort.borrow_mut() = Some(err));
}

fn current_program_id(invoke_context: &InvokeContext) -> Result<Pubkey, InstructionError> {
    let transaction_context = &*invoke_context.transaction_context;
    let instruction_context = transaction_context.get_current_instruction_context()?;
    Ok(*instruction_context.get_last_program_key(transaction_context)?)
}

/// Writes a sysvar from the cache into the program's variable.
fn copy_sysvar<T: Clone>(var_addr: *mut u8, get: impl FnOnce(&SysvarCache) -> Result<Arc<T>, InstructionError>) -> u64 {
    with_invoke_context(|ic| match get(ic.get_sysvar_cache()) {
        Ok(value) => {
            // SAFETY: `Sysvar::get` passes a pointer to its own `T` (aligned,
            // initialised with a plain-data default, so nothing to drop).
            unsafe { std::ptr::write(var_addr.cast::<T>(), T::clone(&value)) };
            SUCCESS
        }
        Err(_) => UNSUPPORTED_SYSVAR,
    })
    .unwrap_or(UNSUPPORTED_SYSVAR)
}

/// A cross-program invocation through the runtime, as `sol_invoke_signed` does on chain.
fn invoke_signed(
    invoke_context: &mut InvokeContext,
    instruction: &Instruction,
    account_infos: &[AccountInfo],
    signers_seeds: &[&[&[u8]]],
) -> Result<(), InstructionError> {
    let instruction = StableInstruction::from(instruction.clone());
    // PDA signatures are derived from the *calling* program's id.
    let caller = current_program_id(invoke_context)?;
    let signers = signers_seeds
        .iter()
        .map(|seeds| Pubkey::create_program_address(seeds, &caller).map_err(|_| InstructionError::InvalidSeeds))
        .collect::<Result<Vec<_>, _>>()?;
    let (instruction_accounts, program_indices) = invoke_context.prepare_instruction(&instruction, &signers)?;

    // Caller -> runtime: the callee must see what the caller changed so far.
    let mut copy_back = Vec::new();
    {
        let transaction_context = &*invoke_context.transaction_context;
        let instruction_context = transaction_context.get_current_instruction_context()?;
        for instruction_account in &instruction_accounts {
            let key = transaction_context.get_key_of_account_at_index(instruction_account.index_in_transaction)?;
            let info = account_infos.iter().find(|info| info.key == key).ok_or_else(|| {
                ic_msg!(invoke_context, "Instruction references an unknown account {}", key);
                InstructionError::MissingAccount
            })?;
            let mut account = instruction_context
                .try_borrow_instruction_account(transaction_context, instruction_account.index_in_caller)?;
            store_account_info(&mut account, info)?;
            if instruction_account.is_writable {
                copy_back.push((instruction_account.index_in_caller, info));
            }
        }
    }

    let mut compute_units_consumed = 0;
    invoke_context.process_instruction(
        &instruction.data,
        &instruction_accounts,
        &program_indices,
        &mut compute_units_consumed,
        &mut ExecuteTimings::default(),
    )?;

    // Runtime -> caller: lamports, owner, data (resized within the caller's
    // realloc allowance, like on chain).
    let transaction_context = &*invoke_context.transaction_context;
    let instruction_context = transaction_context.get_current_instruction_context()?;
    for (index_in_caller, info) in copy_back {
        let account = instruction_context.try_borrow_instruction_account(transaction_context, index_in_caller)?;
        **info.try_borrow_mut_lamports().map_err(|_| InstructionError::AccountBorrowFailed)? = account.get_lamports();
        if info.owner != account.get_owner() {
            info.assign(account.get_owner());
        }
        let new_data = account.get_data();
        if info.data_len() != new_data.len() {
            info.resize(new_data.len()).map_err(|_| InstructionError::InvalidRealloc)?;
        }
        info.try_borrow_mut_data().map_err(|_| InstructionError::AccountBorrowFailed)?.copy_from_slice(new_data);
    }
    Ok(())
}

/// The syscall stubs: each one forwards to the current InvokeContext.
/// Outside a native program they behave like the default stubs.
struct BridgeStubs;

impl SyscallStubs for BridgeStubs {
    fn sol_log(&self, message: &str) {
        if with_invoke_context(|ic| stable_log::program_log(&ic.get_log_collector(), message)).is_none() {
            println!("{message}");
        }
    }

    fn sol_log_data(&self, fields: &[&[u8]]) {
        // "Program data: <base64> <base64> ...": how Anchor events reach the log.
        if with_invoke_context(|ic| stable_log::program_data(&ic.get_log_collector(), fields)).is_none() {
            println!("data: {fields:?}");
        }
    }

    fn sol_log_compute_units(&self) {
        with_invoke_context(|ic| {
            ic_msg!(ic, "Program consumption: {} units remaining", ic.get_remaining());
        });
    }

    fn sol_remaining_compute_units(&self) -> u64 {
        with_invoke_context(|ic| ic.get_remaining()).unwrap_or(0)
    }

    fn sol_invoke_signed(
        &self,
        instruction: &Instruction,
        account_infos: &[AccountInfo],
        signers_seeds: &[&[&[u8]]],
    ) -> ProgramResult {
        let Some(result) = with_invoke_context(|ic| invoke_signed(ic, instruction, account_infos, signers_seeds))
        else {
            println!("sol_invoke_signed called outside a native program");
            return Err(ProgramError::InvalidArgument);
        };
        result.map_err(|err| {
            // The program gets the closest ProgramError; the instruction fails
            // with the callee's exact error (see PENDING_ABORT).
            let program_error = ProgramError::try_from(err.clone()).unwrap_or(ProgramError::InvalidArgument);
            abort_with(err);
            program_error
        })
    }

    fn sol_get_sysvar(&self, sysvar_id_addr: *const u8, var_addr: *mut u8, offset: u64, length: u64) -> u64 {
        // SAFETY: `solana_sysvar::get_sysvar` passes a Pubkey and a buffer of at least `length` bytes.
        let sysvar_id = unsafe { &*sysvar_id_addr.cast::<Pubkey>() };
        with_invoke_context(|ic| {
            let Some(buffer) = ic.get_sysvar_cache().sysvar_id_to_buffer(sysvar_id).as_ref() else {
                return SYSVAR_NOT_FOUND;
            };
            let range = usize::try_from(offset).ok().and_then(|start| {
                let end = start.checked_add(usize::try_from(length).ok()?)?;
                buffer.get(start..end)
            });
            let Some(bytes) = range else {
                return OFFSET_LENGTH_EXCEEDS_SYSVAR;
            };
            // SAFETY: see above.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), var_addr, bytes.len()) };
            SUCCESS
        })
        .unwrap_or(UNSUPPORTED_SYSVAR)
    }

    fn sol_get_clock_sysvar(&self, var_addr: *mut u8) -> u64 {
        copy_sysvar(var_addr, SysvarCache::get_clock)
    }

    fn sol_get_epoch_schedule_sysvar(&self, var_addr: *mut u8) -> u64 {
        copy_sysvar(var_addr, SysvarCache::get_epoch_schedule)
    }

    fn sol_get_rent_sysvar(&self, var_addr: *mut u8) -> u64 {
        copy_sysvar(var_addr, SysvarCache::get_rent)
    }

    fn sol_get_epoch_rewards_sysvar(&self, var_addr: *mut u8) -> u64 {
        copy_sysvar(var_addr, SysvarCache::get_epoch_rewards)
    }

    fn sol_get_last_restart_slot(&self, var_addr: *mut u8) -> u64 {
        copy_sysvar(var_addr, SysvarCache::get_last_restart_slot)
    }

    fn sol_get_return_data(&self) -> Option<(Pubkey, Vec<u8>)> {
        with_invoke_context(|ic| {
            let (program_id, data) = ic.transaction_context.get_return_data();
            // Like the syscall: empty return data reads as "none".
            (!data.is_empty()).then(|| (*program_id, data.to_vec()))
        })
        .flatten()
    }

    fn sol_set_return_data(&self, data: &[u8]) {
        with_invoke_context(|ic| {
            if data.len() > MAX_RETURN_DATA {
                ic_msg!(ic, "Return data too large ({} > {})", data.len(), MAX_RETURN_DATA);
                return abort_with(InstructionError::ProgramFailedToComplete);
            }
            let result = current_program_id(ic)
                .and_then(|program_id| ic.transaction_context.set_return_data(program_id, data.to_vec()));
            if let Err(err) = result {
                abort_with(err);
            }
        });
    }

    fn sol_get_stack_height(&self) -> u64 {
        with_invoke_context(|ic| ic.get_stack_height() as u64).unwrap_or(0)
    }
}
