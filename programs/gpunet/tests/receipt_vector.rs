//! The usage-receipt message and its Ed25519 instruction match the shared test vector
//! (tests/vectors/usage_receipt.json) that the Python SDK is tested against too.

use std::str::FromStr;

use crate::harness::builders::ed25519_ix;
use anchor_lang::prelude::Pubkey;
use gpunet::state::Receipt;
use solana_keypair::Keypair;
use solana_signer::Signer;

fn vector() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/usage_receipt.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read the vector")).expect("vector is JSON")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn receipt_message_matches_the_shared_vector() {
    let v = vector();
    assert_eq!(v["program_id"], gpunet::ID.to_string());
    let receipt = Receipt {
        epoch: v["epoch"].as_u64().unwrap(),
        gpu_seconds: v["gpu_seconds"].as_u64().unwrap(),
        through: v["through"].as_i64().unwrap(),
    };
    let lease = Pubkey::from_str(v["lease"].as_str().unwrap()).unwrap();
    let node = Pubkey::from_str(v["node_key"].as_str().unwrap()).unwrap();
    assert_eq!(hex(&receipt.message(&lease, &node)), v["message_hex"].as_str().unwrap());
}

#[test]
fn ed25519_instruction_matches_the_shared_vector() {
    let v = vector();
    let seed: [u8; 32] = [7; 32];
    assert_eq!(hex(&seed), v["signer_seed_hex"].as_str().unwrap());
    let signer = Keypair::new_from_array(seed);
    assert_eq!(signer.pubkey().to_string(), v["signer"].as_str().unwrap());
    let message: Vec<u8> = (0..v["message_hex"].as_str().unwrap().len() / 2)
        .map(|i| u8::from_str_radix(&v["message_hex"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    // the harness's builder is the one the settlement tests prove on chain
    assert_eq!(hex(&ed25519_ix(&signer, &message).data), v["ed25519_data_hex"].as_str().unwrap());
}
