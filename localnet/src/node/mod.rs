//! gpunet-localnet: a single-node Solana JSON-RPC + PubSub server over LiteSVM.

pub mod blockhash;
pub mod chain;
pub mod encoding;
pub mod errors;
pub mod exec;
pub mod genesis;
pub mod ledger;
pub mod methods;
pub mod params;
pub mod pubsub;
pub mod record;
pub mod rpc;
pub mod token;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The Agave version whose RPC surface the node follows.
pub const API_VERSION: &str = "2.3.13";

pub struct Node {
    chain: Mutex<chain::Chain>,
}

impl Node {
    pub fn new(chain: chain::Chain) -> Self {
        Self { chain: Mutex::new(chain) }
    }

    /// The chain state. A panic while it was held does not make the node unusable.
    pub fn chain(&self) -> MutexGuard<'_, chain::Chain> {
        self.chain.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
