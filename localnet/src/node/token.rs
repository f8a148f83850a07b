//! SPL Token (and Token-2022 base layout) account parsing: jsonParsed, token balances.

use {
    serde::{Deserialize, Serialize},
    serde_json::{json, Value},
    solana_pubkey::Pubkey,
    std::{str::FromStr, sync::LazyLock},
};

pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
pub const TOKEN_2022_PROGRAM: &str = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";
pub const ACCOUNT_LEN: usize = 165;
pub const MINT_LEN: usize = 82;

static TOKEN_PROGRAM_IDS: LazyLock<[Pubkey; 2]> =
    LazyLock::new(|| [Pubkey::from_str(TOKEN_PROGRAM).unwrap(), Pubkey::from_str(TOKEN_2022_PROGRAM).unwrap()]);

pub fn is_token_program(owner: &Pubkey) -> bool {
    TOKEN_PROGRAM_IDS.contains(owner)
}

pub fn program_name(owner: &Pubkey) -> &'static str {
    if *owner == TOKEN_PROGRAM_IDS[1] {
        "spl-token-2022"
    } else {
        "spl-token"
    }
}

fn pubkey_at(data: &[u8], at: usize) -> Pubkey {
    Pubkey::new_from_array(data[at..at + 32].try_into().unwrap())
}
fn u64_at(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().unwrap())
}
/// A `COption<Pubkey>` (4-byte tag + 32 bytes).
fn opt_pubkey_at(data: &[u8], at: usize) -> Option<Pubkey> {
    (data[at..at + 4] == [1, 0, 0, 0]).then(|| pubkey_at(data, at + 4))
}
/// A `COption<u64>` (4-byte tag + 8 bytes).
fn opt_u64_at(data: &[u8], at: usize) -> Option<u64> {
    (data[at..at + 4] == [1, 0, 0, 0]).then(|| u64_at(data, at + 4))
}

#[derive(Clone, Debug, PartialEq)]
pub struct Mint {
    pub mint_authority: Option<Pubkey>,
    pub supply: u64,
    pub decimals: u8,
    pub is_initialized: bool,
    pub freeze_authority: Option<Pubkey>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TokenAccount {
    pub mint: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub delegate: Option<Pubkey>,
    pub state: u8,
    pub is_native: Option<u64>,
    pub delegated_amount: u64,
    pub close_authority: Option<Pubkey>,
}

/// Token-2022 puts an account-type byte after the 165-byte base layout (1 mint, 2 account).
fn account_type(data: &[u8]) -> Option<u8> {
    data.get(ACCOUNT_LEN).copied()
}

pub fn parse_mint(owner: &Pubkey, data: &[u8]) -> Option<Mint> {
    if !is_token_program(owner) {
        return None;
    }
    let ok = data.len() == MINT_LEN || (data.len() > ACCOUNT_LEN && account_type(data) == Some(1));
    if !ok || data[45] == 0 {
        return None;
    }
    Some(Mint {
        mint_authority: opt_pubkey_at(data, 0),
        supply: u64_at(data, 36),
        decimals: data[44],
        is_initialized: data[45] != 0,
        freeze_authority: opt_pubkey_at(data, 46),
    })
}

pub fn parse_token_account(owner: &Pubkey, data: &[u8]) -> Option<TokenAccount> {
    if !is_token_program(owner) {
        return None;
    }
    let ok = data.len() == ACCOUNT_LEN || (data.len() > ACCOUNT_LEN && account_type(data) == Some(2));
    if !ok || data[108] == 0 {
        return None;
    }
    Some(TokenAccount {
        mint: pubkey_at(data, 0),
        owner: pubkey_at(data, 32),
        amount: u64_at(data, 64),
        delegate: opt_pubkey_at(data, 72),
        state: data[108],
        is_native: opt_u64_at(data, 109),
        delegated_amount: u64_at(data, 121),
        close_authority: opt_pubkey_at(data, 129),
    })
}

/// Agave's `real_number_string_trimmed`.
pub fn ui_amount_string(amount: u64, decimals: u8) -> String {
    let d = decimals as usize;
    if d == 0 {
        return amount.to_string();
    }
    let mut s = format!("{:01$}", amount, d + 1);
    s.insert(s.len() - d, '.');
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `UiTokenAmount` as Agave serializes it.
pub fn ui_token_amount(amount: u64, decimals: u8) -> Value {
    json!({
        "amount": amount.to_string(),
        "decimals": decimals,
        "uiAmount": amount as f64 / 10f64.powi(decimals as i32),
        "uiAmountString": ui_amount_string(amount, decimals),
    })
}

/// The `parsed` object of a jsonParsed SPL Token account, or None when the
/// account is not a token mint/account (or its mint is unknown).
pub fn json_parsed(owner: &Pubkey, data: &[u8], mint_decimals: impl Fn(&Pubkey) -> Option<u8>) -> Option<Value> {
    if let Some(m) = parse_mint(owner, data) {
        return Some(json!({
            "type": "mint",
            "info": {
                "mintAuthority": m.mint_authority.map(|p| p.to_string()),
                "supply": m.supply.to_string(),
                "decimals": m.decimals,
                "isInitialized": m.is_initialized,
                "freezeAuthority": m.freeze_authority.map(|p| p.to_string()),
            }
        }));
    }
    let a = parse_token_account(owner, data)?;
    let decimals = mint_decimals(&a.mint)?;
    let mut info = json!({
        "isNative": a.is_native.is_some(),
        "mint": a.mint.to_string(),
        "owner": a.owner.to_string(),
        "state": if a.state == 2 { "frozen" } else { "initialized" },
        "tokenAmount": ui_token_amount(a.amount, decimals),
    });
    if let Some(d) = a.delegate {
        info["delegate"] = json!(d.to_string());
        info["delegatedAmount"] = ui_token_amount(a.delegated_amount, decimals);
    }
    if let Some(r) = a.is_native {
        info["rentExemptReserve"] = ui_token_amount(r, decimals);
    }
    if let Some(c) = a.close_authority {
        info["closeAuthority"] = json!(c.to_string());
    }
    Some(json!({ "type": "account", "info": info }))
}

/// One entry of a transaction's pre/post token balances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBalance {
    pub account_index: u8,
    pub mint: String,
    pub owner: String,
    pub program_id: String,
    pub amount: u64,
    pub decimals: u8,
}

impl TokenBalance {
    pub fn to_json(&self) -> Value {
        json!({
            "accountIndex": self.account_index,
            "mint": self.mint,
            "owner": self.owner,
            "programId": self.program_id,
            "uiTokenAmount": ui_token_amount(self.amount, self.decimals),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ui_amounts_match_agave() {
        assert_eq!(ui_amount_string(1_500_000, 6), "1.5");
        assert_eq!(ui_amount_string(1_000_000, 6), "1");
        assert_eq!(ui_amount_string(1, 6), "0.000001");
        assert_eq!(ui_amount_string(0, 6), "0");
        assert_eq!(ui_amount_string(42, 0), "42");
    }

    #[test]
    fn parses_a_mint() {
        let owner = Pubkey::from_str(TOKEN_PROGRAM).unwrap();
        let auth = Pubkey::new_unique();
        let mut data = vec![0u8; MINT_LEN];
        data[0] = 1;
        data[4..36].copy_from_slice(auth.as_ref());
        data[36..44].copy_from_slice(&5u64.to_le_bytes());
        data[44] = 6;
        data[45] = 1;
        let m = parse_mint(&owner, &data).unwrap();
        assert_eq!((m.mint_authority, m.supply, m.decimals, m.freeze_authority), (Some(auth), 5, 6, None));
        assert!(parse_token_account(&owner, &data).is_none());
        assert!(parse_mint(&Pubkey::new_unique(), &data).is_none());
    }
}
