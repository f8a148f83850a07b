//! The reward tree's leaves, root and proofs match the shared test vector
//! (tests/vectors/reward_tree.json) that the Python SDK is tested against too: the coordinator
//! builds the trees whose roots the program checks claims against.

use std::str::FromStr;

use anchor_lang::prelude::Pubkey;
use gpunet::merkle::{verify, RewardLeaf};

use crate::harness::staking::RewardTree;

fn vector() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/reward_tree.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read the vector")).expect("vector is JSON")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn reward_tree_matches_the_shared_vector() {
    let v = vector();
    assert_eq!(v["program_id"], gpunet::ID.to_string());
    let mint = Pubkey::from_str(v["mint"].as_str().unwrap()).unwrap();
    let entries = v["leaves"].as_array().unwrap();
    let leaves: Vec<RewardLeaf> = entries
        .iter()
        .map(|l| RewardLeaf {
            epoch: l["epoch"].as_i64().unwrap(),
            provider: Pubkey::from_str(l["provider"].as_str().unwrap()).unwrap(),
            supplier_amount: l["supplier_amount"].as_u64().unwrap(),
            delegators_amount: l["delegators_amount"].as_u64().unwrap(),
        })
        .collect();
    let tree = RewardTree::new(leaves.clone(), &mint);
    assert_eq!(hex(&tree.root()), v["root"].as_str().unwrap());
    for (i, (leaf, entry)) in leaves.iter().zip(entries).enumerate() {
        assert_eq!(hex(&leaf.hash(&mint)), entry["hash"].as_str().unwrap());
        let proof = tree.proof(i);
        let expected: Vec<String> =
            entry["proof"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().into()).collect();
        assert_eq!(proof.iter().map(|p| hex(p)).collect::<Vec<_>>(), expected);
        assert!(verify(leaf.hash(&mint), &proof, &tree.root()));
    }
}
