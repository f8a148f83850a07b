//! The gpunet program in a LiteSVM: natively (the default), or as the SBF ELF that
//! `scripts/build-sbf` produces when `GPUNET_PROGRAM_SO` names it. This is the one place
//! that chooses; the Rust tests, the benchmarks and gpunet-localnet all go through it.
use std::path::PathBuf;

use agave_feature_set::{bpf_account_data_direct_mapping, FeatureSet};
use litesvm::LiteSVM;
use solana_account::Account;
use solana_pubkey::Pubkey;
use solana_sdk_ids::bpf_loader_upgradeable;

use crate::{add_native_program, native_entry};

/// Names the SBF build of the program to run instead of the native one.
pub const PROGRAM_SO_ENV: &str = "GPUNET_PROGRAM_SO";
/// Set to 1 for a build made with `scripts/build-sbf --stack-frame-gaps`: the SVM then runs
/// without `bpf_account_data_direct_mapping`, so its stack frames have gaps, as on a cluster
/// where that feature is not active.
pub const STACK_FRAME_GAPS_ENV: &str = "GPUNET_SBF_STACK_FRAME_GAPS";

/// How the gpunet program runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramBuild {
    /// Compiled for the host and registered as a builtin (no compute metering).
    Native,
    /// An SBF ELF, run by the SVM's interpreter with compute metering and SBF's limits.
    Sbf { path: PathBuf, stack_frame_gaps: bool },
}

impl ProgramBuild {
    /// `Sbf` when `GPUNET_PROGRAM_SO` is set and not empty, else `Native`.
    pub fn from_env() -> Self {
        match std::env::var_os(PROGRAM_SO_ENV) {
            Some(path) if !path.is_empty() => Self::Sbf {
                path: PathBuf::from(path),
                stack_frame_gaps: std::env::var_os(STACK_FRAME_GAPS_ENV).is_some_and(|v| v == "1"),
            },
            _ => Self::Native,
        }
    }

    /// A LiteSVM (SPL programs, precompiles, every feature active unless the build needs
    /// stack frame gaps) with the program at `gpunet::ID`.
    pub fn svm(&self) -> Result<LiteSVM, String> {
        let mut svm = LiteSVM::new();
        if let Self::Sbf { stack_frame_gaps: true, .. } = self {
            let mut features = FeatureSet::all_enabled();
            features.deactivate(&bpf_account_data_direct_mapping::id());
            // The builtins and the SPL programs are loaded again, under the new runtime environment.
            svm = svm.with_feature_set(features).with_builtins().with_default_programs();
        }
        self.install(&mut svm)?;
        Ok(svm)
    }

    fn install(&self, svm: &mut LiteSVM) -> Result<(), String> {
        match self {
            Self::Native => add_native_program(svm, gpunet::ID, native_entry!(gpunet::entry)),
            Self::Sbf { path, .. } => {
                let elf = std::fs::read(path).map_err(|e| {
                    format!(
                        "cannot read the SBF program {} ({PROGRAM_SO_ENV}): {e}; build it with scripts/build-sbf",
                        path.display()
                    )
                })?;
                // LiteSVM's add_program turns an ELF the loader refuses into a program that
                // fails every call; check it here so a bad file is reported as such.
                if !elf.starts_with(b"\x7fELF") {
                    return Err(format!("{} ({PROGRAM_SO_ENV}) is not an ELF file", path.display()));
                }
                svm.add_program(gpunet::ID, &elf)
                    .map_err(|e| format!("cannot load the SBF program {}: {e}", path.display()))?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for ProgramBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Native => write!(f, "native"),
            Self::Sbf { path, stack_frame_gaps } => {
                let frames = if *stack_frame_gaps { "stack frames with gaps" } else { "contiguous stack frames" };
                write!(f, "SBF {}, {frames}", path.display())
            }
        }
    }
}

/// The address of the gpunet program's ProgramData account (the upgradeable loader's PDA).
pub fn program_data_address() -> Pubkey {
    Pubkey::find_program_address(&[gpunet::ID.as_ref()], &bpf_loader_upgradeable::ID).0
}

/// Makes `authority` the gpunet program's upgrade authority, as `solana program deploy` makes
/// the deployer: writes the upgradeable loader's ProgramData record (state only, no ELF; the
/// program itself runs as installed above). `initialize` accepts only this key as admin.
pub fn set_upgrade_authority(svm: &mut LiteSVM, authority: &Pubkey) -> Result<(), String> {
    // bincode of UpgradeableLoaderState::ProgramData { slot: 0, upgrade_authority_address: Some(authority) }
    let mut data = Vec::with_capacity(45);
    data.extend_from_slice(&3u32.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    data.push(1);
    data.extend_from_slice(authority.as_ref());
    let account = Account {
        lamports: svm.minimum_balance_for_rent_exemption(data.len()),
        data,
        owner: bpf_loader_upgradeable::ID,
        executable: false,
        rent_epoch: 0,
    };
    svm.set_account(program_data_address(), account).map_err(|e| format!("cannot write the program's ProgramData: {e}"))
}

/// A LiteSVM with the SPL programs, the precompiles and the gpunet program at `gpunet::ID`,
/// built as [`ProgramBuild::from_env`] says.
///
/// # Panics
/// If `GPUNET_PROGRAM_SO` names a file that cannot be loaded.
pub fn gpunet_svm() -> LiteSVM {
    ProgramBuild::from_env().svm().unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_non_elf_program_file_is_refused_with_what_to_do() {
        let mut svm = LiteSVM::new();
        let sbf = |path: PathBuf| ProgramBuild::Sbf { path, stack_frame_gaps: false };
        let err = sbf(PathBuf::from("/nonexistent/gpunet.so")).install(&mut svm).unwrap_err();
        assert!(err.contains("/nonexistent/gpunet.so") && err.contains("scripts/build-sbf"), "{err}");

        let file = std::env::temp_dir().join(format!("gpunet-not-an-elf-{}.so", std::process::id()));
        std::fs::write(&file, b"#!/bin/sh\n").unwrap();
        let err = sbf(file.clone()).install(&mut svm).unwrap_err();
        std::fs::remove_file(&file).unwrap();
        assert!(err.contains("is not an ELF file"), "{err}");
        assert!(svm.get_account(&gpunet::ID).is_none(), "nothing was installed");
    }
}
