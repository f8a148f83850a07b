//! The gpunet program, registered natively in a LiteSVM.
use litesvm::LiteSVM;

use crate::{add_native_program, native_entry};

/// A LiteSVM with the SPL programs, the precompiles and the gpunet program at `gpunet::ID`.
pub fn gpunet_svm() -> LiteSVM {
    let mut svm = LiteSVM::new();
    add_native_program(&mut svm, gpunet::ID, native_entry!(gpunet::entry));
    svm
}
