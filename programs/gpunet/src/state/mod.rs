pub mod config;
pub mod lease;
pub mod node;
pub mod provider;
pub mod seeds;
pub mod usage;

pub use config::*;
pub use lease::*;
pub use node::*;
pub use provider::*;
pub use seeds::*;
pub use usage::*;
