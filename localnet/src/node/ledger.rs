//! `--ledger DIR`: the whole chain state (accounts, transaction history, slot,
//! blockhash window, keys) in one bincode snapshot, written atomically.

use {
    super::{blockhash::BlockhashWindow, chain::Chain, record::TxRecord},
    serde::{Deserialize, Serialize},
    solana_account::{Account, ReadableAccount},
    solana_hash::Hash,
    solana_keypair::Keypair,
    solana_pubkey::Pubkey,
    solana_sdk_ids::{bpf_loader, bpf_loader_deprecated, bpf_loader_upgradeable, loader_v4, native_loader, sysvar},
    std::{
        io::Write,
        path::{Path, PathBuf},
        sync::Arc,
    },
};

const FORMAT_VERSION: u32 = 1;
const FILE: &str = "snapshot.bin";

#[derive(Serialize, Deserialize)]
struct StoredAccount {
    pubkey: [u8; 32],
    lamports: u64,
    data: Vec<u8>,
    owner: [u8; 32],
    executable: bool,
    rent_epoch: u64,
}

#[derive(Serialize, Deserialize)]
struct Snapshot<T> {
    version: u32,
    slot: u64,
    first_slot: u64,
    slot_times: Vec<i64>,
    blockhashes: BlockhashWindow,
    genesis_hash: [u8; 32],
    identity: Vec<u8>,
    faucet: Vec<u8>,
    accounts: Vec<StoredAccount>,
    txs: Vec<T>,
}

/// Accounts that belong to the genesis the node rebuilds on every start.
fn is_runtime_account(acc: &impl ReadableAccount) -> bool {
    let owner = acc.owner();
    acc.executable()
        || [
            sysvar::ID,
            native_loader::ID,
            bpf_loader::ID,
            bpf_loader_deprecated::ID,
            bpf_loader_upgradeable::ID,
            loader_v4::ID,
        ]
        .contains(owner)
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Serializes the chain state (under the caller's lock; cheap clones only).
pub fn encode(chain: &Chain) -> Result<Vec<u8>, String> {
    let accounts = chain
        .svm
        .accounts_db()
        .inner
        .iter()
        .filter(|(_, a)| !is_runtime_account(*a))
        .map(|(k, a)| StoredAccount {
            pubkey: k.to_bytes(),
            lamports: a.lamports(),
            data: a.data().to_vec(),
            owner: a.owner().to_bytes(),
            executable: a.executable(),
            rent_epoch: a.rent_epoch(),
        })
        .collect();
    let snap = Snapshot::<&TxRecord> {
        version: FORMAT_VERSION,
        slot: chain.slot,
        first_slot: chain.first_slot,
        slot_times: chain.slot_times.clone(),
        blockhashes: chain.blockhashes.clone(),
        genesis_hash: chain.genesis_hash.to_bytes(),
        identity: chain.identity.to_bytes().to_vec(),
        faucet: chain.faucet.to_bytes().to_vec(),
        accounts,
        txs: chain.txs.iter().map(|t| t.as_ref()).collect(),
    };
    bincode::serialize(&snap).map_err(|e| e.to_string())
}

/// Writes `bytes` to DIR/snapshot.bin atomically (temporary file, fsync, rename).
pub fn write(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path(dir))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Saves the chain into `dir` now.
pub fn save(chain: &Chain, dir: &Path) -> Result<(), String> {
    let bytes = encode(chain)?;
    write(dir, &bytes).map_err(|e| format!("cannot write ledger {}: {e}", dir.display()))
}

/// Restores the state saved in `dir` into a fresh chain; Ok(false) when there is none.
pub fn restore(chain: &mut Chain, dir: &Path) -> Result<bool, String> {
    let file = path(dir);
    if !file.exists() {
        return Ok(false);
    }
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let snap: Snapshot<TxRecord> =
        bincode::deserialize(&bytes).map_err(|e| format!("{} is not a gpunet-localnet ledger: {e}", file.display()))?;
    if snap.version != FORMAT_VERSION {
        return Err(format!("{}: unsupported ledger format {}", file.display(), snap.version));
    }
    let key = |b: &[u8]| Keypair::try_from(b).map_err(|e| format!("bad key in ledger: {e}"));
    // The fresh chain's own faucet is replaced by the saved one.
    let _ = chain.svm.set_account(solana_signer::Signer::pubkey(&chain.faucet), Account::default());
    chain.identity = key(&snap.identity)?;
    chain.faucet = key(&snap.faucet)?;
    for a in snap.accounts {
        let account = Account {
            lamports: a.lamports,
            data: a.data,
            owner: Pubkey::new_from_array(a.owner),
            executable: a.executable,
            rent_epoch: a.rent_epoch,
        };
        chain
            .svm
            .set_account(Pubkey::new_from_array(a.pubkey), account)
            .map_err(|e| format!("cannot restore account: {e}"))?;
    }
    chain.slot = snap.slot;
    chain.first_slot = snap.first_slot;
    chain.slot_times = snap.slot_times;
    chain.blockhashes = snap.blockhashes;
    chain.blockhashes.reindex();
    chain.genesis_hash = Hash::new_from_array(snap.genesis_hash);
    chain.txs = snap.txs.into_iter().map(Arc::new).collect();
    chain.reindex();
    chain.tick(super::chain::unix_now());
    chain.dirty = false;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use {super::*, crate::node::chain::node_svm, gpunet_localnet::ProgramBuild, solana_signer::Signer};

    #[test]
    fn snapshot_round_trip_keeps_accounts_slot_and_keys() {
        let dir = std::env::temp_dir().join(format!("gpunet-ledger-test-{}", std::process::id()));
        let mut chain = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        chain.tick(1);
        chain.tick(2);
        let who = Pubkey::new_unique();
        chain.airdrop(&who, 42).unwrap();
        save(&chain, &dir).unwrap();

        let mut back = Chain::new(node_svm(&ProgramBuild::Native).unwrap());
        assert!(restore(&mut back, &dir).unwrap());
        assert_eq!(back.slot, 3);
        assert_eq!(back.svm.get_balance(&who), Some(42));
        assert_eq!(back.genesis_hash, chain.genesis_hash);
        assert_eq!(back.identity.pubkey(), chain.identity.pubkey());
        assert_eq!(back.txs.len(), 1);
        let sig = chain.txs[0].tx.signatures[0];
        assert!(back.transaction(&sig).is_some());
        assert_eq!(back.signatures_for_address(&who, None, None, 10).len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
