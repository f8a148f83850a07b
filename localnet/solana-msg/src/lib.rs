//! `msg!` and `sol_log`, as in solana-msg 2.2.1, plus an off-chain log hook.

/// Print a message to the log (the transaction log on chain; off-chain, the hook
/// installed with [`set_log_hook`], else stdout).
#[macro_export]
macro_rules! msg {
    ($msg:expr) => {
        $crate::sol_log($msg)
    };
    ($($arg:tt)*) => ($crate::sol_log(&format!($($arg)*)));
}

#[cfg(target_os = "solana")]
pub mod syscalls {
    /// Syscall definitions used by `solana_msg`.
    pub use solana_define_syscall::definitions::{sol_log_, sol_log_64_, sol_log_compute_units_, sol_log_data};
}

#[cfg(not(target_os = "solana"))]
static LOG_HOOK: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Off-chain only: routes every `msg!`/`sol_log` of this process to `hook` (first call wins).
#[cfg(not(target_os = "solana"))]
pub fn set_log_hook(hook: fn(&str)) {
    let _ = LOG_HOOK.set(hook);
}

/// Print a string to the log.
#[inline]
pub fn sol_log(message: &str) {
    #[cfg(target_os = "solana")]
    unsafe {
        syscalls::sol_log_(message.as_ptr(), message.len() as u64);
    }
    #[cfg(not(target_os = "solana"))]
    match LOG_HOOK.get() {
        Some(hook) => hook(message),
        None => println!("{message}"),
    }
}
