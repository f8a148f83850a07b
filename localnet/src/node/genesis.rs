//! `--genesis FILE`: accounts to fund and an optional IO mint, applied to a fresh chain.
//!
//! ```json
//! { "accounts": [ { "pubkey": "<base58>", "lamports": 1000000000 } ],
//!   "ioMint": { "pubkey": "<base58>", "mintAuthority": "<base58>", "decimals": 6,
//!               "freezeAuthority": null } }
//! ```

use {
    super::{chain::Chain, token},
    serde::Deserialize,
    solana_account::Account,
    solana_pubkey::Pubkey,
    std::{path::Path, str::FromStr},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GenesisAccount {
    pubkey: String,
    lamports: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GenesisMint {
    pubkey: String,
    mint_authority: String,
    decimals: u8,
    #[serde(default)]
    freeze_authority: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Genesis {
    #[serde(default)]
    accounts: Vec<GenesisAccount>,
    #[serde(default)]
    io_mint: Option<GenesisMint>,
}

fn key(s: &str) -> Result<Pubkey, String> {
    Pubkey::from_str(s).map_err(|e| format!("invalid pubkey {s:?}: {e}"))
}

/// SPL Token mint account data (82 bytes).
pub fn mint_data(authority: &Pubkey, decimals: u8, freeze: Option<&Pubkey>) -> Vec<u8> {
    let mut data = vec![0u8; token::MINT_LEN];
    data[0..4].copy_from_slice(&[1, 0, 0, 0]);
    data[4..36].copy_from_slice(authority.as_ref());
    data[44] = decimals;
    data[45] = 1;
    if let Some(f) = freeze {
        data[46..50].copy_from_slice(&[1, 0, 0, 0]);
        data[50..82].copy_from_slice(f.as_ref());
    }
    data
}

pub fn apply(chain: &mut Chain, file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let g: Genesis = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    for a in &g.accounts {
        let pubkey = key(&a.pubkey)?;
        let mut acc = chain
            .svm
            .get_account(&pubkey)
            .unwrap_or(Account { owner: solana_sdk_ids::system_program::ID, ..Account::default() });
        acc.lamports = a.lamports;
        chain.svm.set_account(pubkey, acc).map_err(|e| e.to_string())?;
    }
    if let Some(m) = &g.io_mint {
        let freeze = m.freeze_authority.as_deref().map(key).transpose()?;
        let data = mint_data(&key(&m.mint_authority)?, m.decimals, freeze.as_ref());
        let acc = Account {
            lamports: chain.svm.minimum_balance_for_rent_exemption(data.len()),
            data,
            owner: Pubkey::from_str(token::TOKEN_PROGRAM).unwrap(),
            executable: false,
            rent_epoch: u64::MAX,
        };
        chain.svm.set_account(key(&m.pubkey)?, acc).map_err(|e| e.to_string())?;
    }
    Ok(())
}
