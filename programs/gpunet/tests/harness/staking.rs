//! Builders for co-staking and rewards, and the reward tree (the Rust twin of the SDK's).
use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::Instruction;
use anchor_lang::system_program;
use anchor_spl::token::spl_token;
use solana_keypair::Keypair;
use solana_signer::Signer;

use gpunet::merkle::{node_hash, RewardLeaf};
use gpunet::state::*;
use gpunet::{accounts as acc, instruction as ix};

use super::builders::{program_ix, program_ix_with};
use super::{Harness, TxResult, IO};
use crate::harness::accounts::*;

pub const EPOCH_SECONDS: i64 = 86_400;
pub const MAX_COMMISSION: u16 = 2_000;
pub const EMISSION: u64 = 1_000 * IO;
pub const ROOT_TIMELOCK_SECONDS: i64 = 3_600;
pub const CLAIM_EPOCHS: u32 = 3;

pub fn staking_pda() -> Pubkey {
    Pubkey::find_program_address(&[SEED_STAKING], &gpunet::ID).0
}

pub fn reward_vault_pda() -> Pubkey {
    Pubkey::find_program_address(&[SEED_REWARD_VAULT], &gpunet::ID).0
}

pub fn pool_pda(provider: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_POOL, provider.as_ref()], &gpunet::ID).0
}

pub fn cohort_pda(provider: &Pubkey, exit_epoch: i64) -> Pubkey {
    Pubkey::find_program_address(&[SEED_COHORT, provider.as_ref(), &exit_epoch.to_le_bytes()], &gpunet::ID).0
}

pub fn delegation_pda(provider: &Pubkey, delegator: &Pubkey, nonce: u64) -> Pubkey {
    Pubkey::find_program_address(
        &[SEED_DELEGATION, provider.as_ref(), delegator.as_ref(), &nonce.to_le_bytes()],
        &gpunet::ID,
    )
    .0
}

pub fn reward_index_pda(provider: &Pubkey, epoch: i64) -> Pubkey {
    Pubkey::find_program_address(&[SEED_REWARD_INDEX, provider.as_ref(), &epoch.to_le_bytes()], &gpunet::ID).0
}

pub fn reward_root_pda(epoch: i64) -> Pubkey {
    Pubkey::find_program_address(&[SEED_REWARD_ROOT, &epoch.to_le_bytes()], &gpunet::ID).0
}

/// A wallet delegating to pools: its IO token account.
pub struct Delegator {
    pub wallet: Keypair,
    pub tokens: Pubkey,
}

/// One open position.
#[derive(Clone, Copy, Debug)]
pub struct Position {
    pub provider: Pubkey,
    pub delegator: Pubkey,
    pub nonce: u64,
    pub delegation: Pubkey,
}

/// A reward tree over leaves; proofs by leaf index.
pub struct RewardTree {
    pub leaves: Vec<RewardLeaf>,
    levels: Vec<Vec<[u8; 32]>>,
}

impl RewardTree {
    pub fn new(leaves: Vec<RewardLeaf>, mint: &Pubkey) -> Self {
        let mut levels = vec![leaves.iter().map(|l| l.hash(mint)).collect::<Vec<_>>()];
        while levels.last().unwrap().len() > 1 {
            let level = levels.last().unwrap();
            let next = level
                .chunks(2)
                .map(|pair| if pair.len() == 2 { node_hash(&pair[0], &pair[1]) } else { pair[0] })
                .collect();
            levels.push(next);
        }
        Self { leaves, levels }
    }

    pub fn root(&self) -> [u8; 32] {
        self.levels.last().unwrap().first().copied().unwrap_or([0; 32])
    }

    pub fn total(&self) -> u64 {
        self.leaves.iter().map(|l| l.supplier_amount + l.delegators_amount).sum()
    }

    pub fn proof(&self, index: usize) -> Vec<[u8; 32]> {
        let mut proof = vec![];
        let mut i = index;
        for level in &self.levels[..self.levels.len() - 1] {
            let sibling = i ^ 1;
            if sibling < level.len() {
                proof.push(level[sibling]);
            }
            i /= 2;
        }
        proof
    }
}

impl Harness {
    pub fn default_staking_params(&self) -> StakingParams {
        StakingParams {
            epoch_seconds: EPOCH_SECONDS,
            max_commission_bps: MAX_COMMISSION,
            slash_cap_bps: 10_000,
            emission_per_epoch: EMISSION,
            root_timelock_seconds: ROOT_TIMELOCK_SECONDS,
            claim_epochs: CLAIM_EPOCHS,
        }
    }

    pub fn configure_staking_ix(&self, params: StakingParams) -> Instruction {
        program_ix(
            acc::ConfigureStaking {
                admin: self.admin.pubkey(),
                config: config_pda(),
                staking: staking_pda(),
                reward_vault: reward_vault_pda(),
                io_mint: self.mint,
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::ConfigureStaking { params },
        )
    }

    pub fn update_staking(&mut self, change: impl FnOnce(&mut StakingParams)) -> TxResult {
        let mut params = self.default_staking_params();
        change(&mut params);
        let admin = self.admin.insecure_clone();
        let ix = program_ix(
            acc::UpdateStaking { admin: admin.pubkey(), config: config_pda(), staking: staking_pda() },
            ix::UpdateStaking { params },
        );
        self.send(&[ix], &[&admin])
    }

    pub fn staking(&self) -> Staking {
        self.account(&staking_pda())
    }

    pub fn epoch(&self) -> i64 {
        self.staking().epoch_at(self.now())
    }

    /// Moves the clock to `offset` seconds into the next epoch.
    pub fn next_epoch(&mut self, offset: i64) {
        let start = self.staking().epoch_start(self.epoch() + 1).unwrap();
        self.advance(start + offset - self.now());
    }

    /// Funds the reward vault from a fresh wallet.
    pub fn fund_rewards(&mut self, amount: u64) -> TxResult {
        let funder = self.wallet();
        let tokens = self.token_account(&funder.pubkey());
        self.mint_to(&tokens, amount);
        let ix = program_ix(
            acc::FundRewards {
                funder: funder.pubkey(),
                config: config_pda(),
                staking: staking_pda(),
                reward_vault: reward_vault_pda(),
                funder_tokens: tokens,
                token_program: spl_token::ID,
            },
            ix::FundRewards { amount },
        );
        self.send(&[ix], &[&funder])
    }

    // --- pools and positions

    pub fn open_pool(&mut self, s: &Supplier, commission_bps: u16) -> TxResult {
        let ix = program_ix(
            acc::OpenPool {
                authority: s.wallet.pubkey(),
                staking: staking_pda(),
                provider: s.provider,
                pool: pool_pda(&s.provider),
                system_program: system_program::ID,
            },
            ix::OpenPool { commission_bps },
        );
        self.send(&[ix], &[&s.wallet])
    }

    pub fn set_commission(&mut self, s: &Supplier, commission_bps: u16) -> TxResult {
        let ix = program_ix(
            acc::SetCommission {
                authority: s.wallet.pubkey(),
                staking: staking_pda(),
                provider: s.provider,
                pool: pool_pda(&s.provider),
            },
            ix::SetCommission { commission_bps },
        );
        self.send(&[ix], &[&s.wallet])
    }

    /// What a provider's stake vault must hold by the books: its own stake, the delegated stake
    /// (active and unbonding), the pool's uncollected rewards and its lease income not yet credited.
    pub fn stake_vault_books(&self, provider: &Pubkey) -> u64 {
        let p: Provider = self.account(provider);
        let rewards = if p.has_pool {
            let pool: Pool = self.account(&pool_pda(provider));
            pool.provider_rewards + pool.delegator_rewards + pool.income_pending
        } else {
            0
        };
        p.own_stake().unwrap() + p.delegated + p.delegated_unbonding + rewards
    }

    pub fn pool(&self, s: &Supplier) -> Pool {
        self.account(&pool_pda(&s.provider))
    }

    pub fn provider(&self, s: &Supplier) -> Provider {
        self.account(&s.provider)
    }

    /// A wallet with `funds` IO.
    pub fn delegator(&mut self, funds: u64) -> Delegator {
        let wallet = self.wallet();
        let tokens = self.token_account(&wallet.pubkey());
        if funds > 0 {
            self.mint_to(&tokens, funds);
        }
        Delegator { wallet, tokens }
    }

    pub fn delegate_ix(&self, d: &Delegator, provider: &Pubkey, nonce: u64, amount: u64) -> Instruction {
        program_ix(
            acc::Delegate {
                delegator: d.wallet.pubkey(),
                config: config_pda(),
                staking: staking_pda(),
                provider: *provider,
                pool: pool_pda(provider),
                stake_vault: stake_vault_pda(provider),
                delegator_tokens: d.tokens,
                delegation: delegation_pda(provider, &d.wallet.pubkey(), nonce),
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::Delegate { nonce, amount },
        )
    }

    /// Opens a position of `amount` (its nonce: the next free one).
    pub fn delegate(
        &mut self,
        d: &Delegator,
        provider: &Pubkey,
        amount: u64,
    ) -> std::result::Result<Position, TxResult> {
        let nonce = (0..).find(|n| !self.exists(&delegation_pda(provider, &d.wallet.pubkey(), *n))).unwrap();
        self.delegate_nonce(d, provider, nonce, amount)
    }

    /// Opens a position of `amount` under `nonce` (a closed position's nonce may be used again).
    pub fn delegate_nonce(
        &mut self,
        d: &Delegator,
        provider: &Pubkey,
        nonce: u64,
        amount: u64,
    ) -> std::result::Result<Position, TxResult> {
        let result = self.send(&[self.delegate_ix(d, provider, nonce, amount)], &[&d.wallet]);
        match result {
            Ok(_) => Ok(Position {
                provider: *provider,
                delegator: d.wallet.pubkey(),
                nonce,
                delegation: delegation_pda(provider, &d.wallet.pubkey(), nonce),
            }),
            Err(failed) => Err(Err(failed)),
        }
    }

    pub fn undelegate(&mut self, d: &Delegator, p: &Position) -> TxResult {
        let ix = program_ix(
            acc::Undelegate {
                delegator: d.wallet.pubkey(),
                config: config_pda(),
                staking: staking_pda(),
                provider: p.provider,
                pool: pool_pda(&p.provider),
                delegation: p.delegation,
                cohort: cohort_pda(&p.provider, self.epoch()),
                system_program: system_program::ID,
            },
            ix::Undelegate {},
        );
        self.send(&[ix], &[&d.wallet])
    }

    pub fn withdraw_delegation(&mut self, d: &Delegator, p: &Position) -> TxResult {
        let exit_epoch = self.account::<Delegation>(&p.delegation).exit_epoch;
        let ix = program_ix(
            acc::WithdrawDelegation {
                delegator: d.wallet.pubkey(),
                config: config_pda(),
                provider: p.provider,
                stake_vault: stake_vault_pda(&p.provider),
                delegation: p.delegation,
                cohort: cohort_pda(&p.provider, exit_epoch),
                delegator_tokens: d.tokens,
                token_program: spl_token::ID,
            },
            ix::WithdrawDelegation {},
        );
        self.send(&[ix], &[&d.wallet])
    }

    /// Collects a position's rewards, cranked by `cranker`, passing the reward indexes it may need.
    pub fn collect_rewards(&mut self, cranker: &Keypair, d: &Delegator, p: &Position) -> TxResult {
        let delegation: Delegation = self.account(&p.delegation);
        let extra = [delegation.reward_epoch, delegation.exit_epoch]
            .iter()
            .map(|e| reward_index_pda(&p.provider, *e))
            .filter(|k| self.exists(k))
            .map(|k| AccountMeta::new_readonly(k, false))
            .collect();
        let ix = program_ix_with(
            acc::CollectRewards {
                config: config_pda(),
                provider: p.provider,
                pool: pool_pda(&p.provider),
                stake_vault: stake_vault_pda(&p.provider),
                delegation: p.delegation,
                delegator: d.wallet.pubkey(),
                delegator_tokens: d.tokens,
                token_program: spl_token::ID,
            },
            ix::CollectRewards {},
            extra,
        );
        self.send(&[ix], &[cranker])
    }

    pub fn withdraw_pool_rewards(&mut self, s: &Supplier) -> TxResult {
        let ix = program_ix(
            acc::WithdrawPoolRewards {
                authority: s.wallet.pubkey(),
                config: config_pda(),
                provider: s.provider,
                pool: pool_pda(&s.provider),
                stake_vault: s.vault,
                authority_tokens: s.tokens,
                token_program: spl_token::ID,
            },
            ix::WithdrawPoolRewards {},
        );
        self.send(&[ix], &[&s.wallet])
    }

    // --- reward roots

    pub fn post_root_ix(&self, poster: &Pubkey, epoch: i64, root: [u8; 32], total: u64, leaves: u32) -> Instruction {
        program_ix(
            acc::PostRewardRoot {
                attester: *poster,
                config: config_pda(),
                staking: staking_pda(),
                reward_root: reward_root_pda(epoch),
                system_program: system_program::ID,
            },
            ix::PostRewardRoot { epoch, root, total, leaves },
        )
    }

    pub fn post_root(&mut self, epoch: i64, tree: &RewardTree) -> TxResult {
        let attester = self.attester.insecure_clone();
        let ix = self.post_root_ix(&attester.pubkey(), epoch, tree.root(), tree.total(), tree.leaves.len() as u32);
        self.send(&[ix], &[&attester])
    }

    pub fn veto_root(&mut self, admin: &Keypair, epoch: i64) -> TxResult {
        let root: RewardRoot = self.account(&reward_root_pda(epoch));
        let ix = program_ix(
            acc::VetoRewardRoot {
                admin: admin.pubkey(),
                config: config_pda(),
                staking: staking_pda(),
                reward_root: reward_root_pda(epoch),
                poster: root.posted_by,
            },
            ix::VetoRewardRoot {},
        );
        self.send(&[ix], &[admin])
    }

    pub fn expire_root(&mut self, cranker: &Keypair, epoch: i64) -> TxResult {
        let root: RewardRoot = self.account(&reward_root_pda(epoch));
        let ix = program_ix(
            acc::ExpireRewardRoot {
                staking: staking_pda(),
                reward_root: reward_root_pda(epoch),
                poster: root.posted_by,
            },
            ix::ExpireRewardRoot {},
        );
        self.send(&[ix], &[cranker])
    }

    pub fn claim_ix(&self, cranker: &Pubkey, epoch: i64, leaf: &RewardLeaf, proof: Vec<[u8; 32]>) -> Instruction {
        let provider = leaf.provider;
        program_ix(
            acc::ClaimReward {
                cranker: *cranker,
                config: config_pda(),
                staking: staking_pda(),
                reward_vault: reward_vault_pda(),
                reward_root: reward_root_pda(epoch),
                provider,
                pool: pool_pda(&provider),
                stake_vault: stake_vault_pda(&provider),
                reward_index: reward_index_pda(&provider, epoch),
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::ClaimReward {
                epoch,
                supplier_amount: leaf.supplier_amount,
                delegators_amount: leaf.delegators_amount,
                proof,
            },
        )
    }

    /// Claims leaf `index` of `tree` (for `epoch`), cranked by a stranger.
    pub fn claim(&mut self, epoch: i64, tree: &RewardTree, index: usize) -> TxResult {
        let cranker = self.wallet();
        let ix = self.claim_ix(&cranker.pubkey(), epoch, &tree.leaves[index], tree.proof(index));
        self.send(&[ix], &[&cranker])
    }

    pub fn skip_epoch(&mut self, provider: &Pubkey) -> TxResult {
        let cranker = self.wallet();
        let pool: Pool = self.account(&pool_pda(provider));
        let ix = program_ix(
            acc::SkipRewardEpoch {
                cranker: cranker.pubkey(),
                staking: staking_pda(),
                provider: *provider,
                pool: pool_pda(provider),
                reward_index: reward_index_pda(provider, pool.credited_through + 1),
                system_program: system_program::ID,
            },
            ix::SkipRewardEpoch {},
        );
        self.send(&[ix], &[&cranker])
    }
}
