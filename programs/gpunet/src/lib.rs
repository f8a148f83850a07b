//! gpunet: GPU suppliers stake IO and register nodes, clients lease them from an escrow,
//! attesters settle the nodes' signed usage receipts out of that escrow and slash faulty suppliers.
#![deny(arithmetic_overflow)]
// Anchor 0.31's generated IDL-account handlers call the deprecated `realloc`, outside our module
// (they are compiled only without the default `no-idl` feature).
#![allow(deprecated)]

use anchor_lang::prelude::*;

pub mod ed25519;
pub mod errors;
pub mod events;
pub mod instructions;
pub mod math;
pub mod merkle;
pub mod state;
pub mod vault;

use instructions::*;
use state::{ConfigParams, FaultKind, LeaseTerms, NodeSpec, Receipt, StakingParams};

declare_id!("DUaGWuMPftjSLiWWJYjqdte7boRZ8vqT77vf372eqHj4");

#[program]
pub mod gpunet {
    use super::*;

    // --- configuration
    pub fn initialize(ctx: Context<Initialize>, params: ConfigParams) -> Result<()> {
        Initialize::handler(ctx, params)
    }

    pub fn update_config(ctx: Context<UpdateConfig>, params: ConfigParams) -> Result<()> {
        UpdateConfig::handler(ctx, params)
    }

    // --- providers and stake
    pub fn register_provider(ctx: Context<RegisterProvider>) -> Result<()> {
        RegisterProvider::handler(ctx)
    }

    pub fn stake(ctx: Context<Stake>, amount: u64) -> Result<()> {
        Stake::handler(ctx, amount)
    }

    pub fn request_unstake(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
        RequestUnstake::handler(ctx, amount)
    }

    pub fn withdraw_unstaked(ctx: Context<WithdrawUnstaked>) -> Result<()> {
        WithdrawUnstaked::handler(ctx)
    }

    // --- nodes
    pub fn register_node(ctx: Context<RegisterNode>, spec: NodeSpec) -> Result<()> {
        RegisterNode::handler(ctx, spec)
    }

    pub fn update_node(
        ctx: Context<UpdateNode>,
        region: u16,
        price_per_gpu_hour: u64,
        inventory_hash: [u8; 32],
    ) -> Result<()> {
        UpdateNode::handler(ctx, region, price_per_gpu_hour, inventory_hash)
    }

    pub fn deregister_node(ctx: Context<DeregisterNode>) -> Result<()> {
        DeregisterNode::handler(ctx)
    }

    pub fn release_node(ctx: Context<ReleaseNode>) -> Result<()> {
        ReleaseNode::handler(ctx)
    }

    pub fn unjail_node(ctx: Context<UnjailNode>) -> Result<()> {
        UnjailNode::handler(ctx)
    }

    pub fn set_node_draining(ctx: Context<SetNodeDraining>, draining: bool) -> Result<()> {
        SetNodeDraining::handler(ctx, draining)
    }

    pub fn record_verification(
        ctx: Context<RecordVerification>,
        tier: u8,
        valid_until: i64,
        evidence_hash: [u8; 32],
        inventory_hash: [u8; 32],
    ) -> Result<()> {
        RecordVerification::handler(ctx, tier, valid_until, evidence_hash, inventory_hash)
    }

    // --- leases
    pub fn open_lease(
        ctx: Context<OpenLease>,
        lease_id: u64,
        terms: LeaseTerms,
        downtime_tolerance_seconds: u32,
    ) -> Result<()> {
        OpenLease::handler(ctx, lease_id, terms, downtime_tolerance_seconds)
    }

    pub fn assign_lease<'info>(
        ctx: Context<'_, '_, 'info, 'info, AssignLease<'info>>,
        gpus: Vec<u8>,
        prices: Vec<u64>,
    ) -> Result<()> {
        AssignLease::handler(ctx, gpus, prices)
    }

    pub fn top_up_lease(ctx: Context<TopUpLease>, extra_seconds: i64) -> Result<()> {
        TopUpLease::handler(ctx, extra_seconds)
    }

    pub fn reassign_lease(ctx: Context<ReassignLease>, expected_price: u64) -> Result<()> {
        ReassignLease::handler(ctx, expected_price)
    }

    pub fn close_lease<'info>(ctx: Context<'_, '_, 'info, 'info, CloseLease<'info>>) -> Result<()> {
        CloseLease::handler(ctx)
    }

    pub fn finalize_lease(ctx: Context<FinalizeLease>) -> Result<()> {
        FinalizeLease::handler(ctx)
    }

    pub fn reclaim_lease(ctx: Context<ReclaimLease>) -> Result<()> {
        ReclaimLease::handler(ctx)
    }

    // --- settlement and slashing
    pub fn settle_usage(
        ctx: Context<SettleUsage>,
        receipt: Receipt,
        accepted_gpu_seconds: u64,
        income_epoch: i64,
    ) -> Result<()> {
        SettleUsage::handler(ctx, receipt, accepted_gpu_seconds, income_epoch)
    }

    pub fn sweep_fees(ctx: Context<SweepFees>) -> Result<()> {
        SweepFees::handler(ctx)
    }

    pub fn slash_provider<'info>(
        ctx: Context<'_, '_, 'info, 'info, SlashProvider<'info>>,
        fault: FaultKind,
        evidence_hash: [u8; 32],
        fault_at: i64,
    ) -> Result<()> {
        SlashProvider::handler(ctx, fault, evidence_hash, fault_at)
    }

    // --- co-staking and rewards
    pub fn configure_staking(ctx: Context<ConfigureStaking>, params: StakingParams) -> Result<()> {
        ConfigureStaking::handler(ctx, params)
    }

    pub fn update_staking(ctx: Context<UpdateStaking>, params: StakingParams) -> Result<()> {
        UpdateStaking::handler(ctx, params)
    }

    pub fn fund_rewards(ctx: Context<FundRewards>, amount: u64) -> Result<()> {
        FundRewards::handler(ctx, amount)
    }

    pub fn open_pool(ctx: Context<OpenPool>, commission_bps: u16) -> Result<()> {
        OpenPool::handler(ctx, commission_bps)
    }

    pub fn set_commission(ctx: Context<SetCommission>, commission_bps: u16) -> Result<()> {
        SetCommission::handler(ctx, commission_bps)
    }

    pub fn delegate(ctx: Context<Delegate>, nonce: u64, amount: u64) -> Result<()> {
        Delegate::handler(ctx, nonce, amount)
    }

    pub fn undelegate(ctx: Context<Undelegate>) -> Result<()> {
        Undelegate::handler(ctx)
    }

    pub fn withdraw_delegation(ctx: Context<WithdrawDelegation>) -> Result<()> {
        WithdrawDelegation::handler(ctx)
    }

    pub fn collect_rewards<'info>(ctx: Context<'_, '_, 'info, 'info, CollectRewards<'info>>) -> Result<()> {
        CollectRewards::handler(ctx)
    }

    pub fn withdraw_pool_rewards(ctx: Context<WithdrawPoolRewards>) -> Result<()> {
        WithdrawPoolRewards::handler(ctx)
    }

    pub fn post_reward_root(
        ctx: Context<PostRewardRoot>,
        epoch: i64,
        root: [u8; 32],
        total: u64,
        leaves: u32,
    ) -> Result<()> {
        PostRewardRoot::handler(ctx, epoch, root, total, leaves)
    }

    pub fn veto_reward_root(ctx: Context<VetoRewardRoot>) -> Result<()> {
        VetoRewardRoot::handler(ctx)
    }

    pub fn claim_reward(
        ctx: Context<ClaimReward>,
        epoch: i64,
        supplier_amount: u64,
        delegators_amount: u64,
        proof: Vec<[u8; 32]>,
    ) -> Result<()> {
        ClaimReward::handler(ctx, epoch, supplier_amount, delegators_amount, proof)
    }

    pub fn skip_reward_epoch(ctx: Context<SkipRewardEpoch>) -> Result<()> {
        SkipRewardEpoch::handler(ctx)
    }

    pub fn expire_reward_root(ctx: Context<ExpireRewardRoot>) -> Result<()> {
        ExpireRewardRoot::handler(ctx)
    }
}
