//! One builder per gpunet instruction (the Rust twin of the Python SDK's builders),
//! and story steps that build, send and unwrap them.
use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::Instruction;
use anchor_lang::solana_program::{ed25519_program, sysvar};
use anchor_lang::system_program;
use anchor_lang::{InstructionData, ToAccountMetas};
use anchor_spl::token::spl_token;
use solana_keypair::Keypair;
use solana_signer::Signer;

use gpunet::state::*;
use gpunet::{accounts as acc, instruction as ix};

use super::staking::{cohort_pda, pool_pda, staking_pda};
use super::{Harness, TxResult, IO};
use crate::harness::accounts::*;

pub fn program_ix(accounts: impl ToAccountMetas, data: impl InstructionData) -> Instruction {
    Instruction { program_id: gpunet::ID, accounts: accounts.to_account_metas(None), data: data.data() }
}

/// `program_ix` with extra (remaining) accounts appended.
pub fn program_ix_with(
    accounts: impl ToAccountMetas,
    data: impl InstructionData,
    extra: Vec<AccountMeta>,
) -> Instruction {
    let mut ix = program_ix(accounts, data);
    ix.accounts.extend(extra);
    ix
}

/// An Ed25519 precompile instruction verifying `message` signed by `signer`, with the
/// public key, signature and message all inside its own data.
pub fn ed25519_ix(signer: &Keypair, message: &[u8]) -> Instruction {
    const DATA_START: u16 = 2 + 14;
    let key_offset = DATA_START;
    let sig_offset = key_offset + 32;
    let msg_offset = sig_offset + 64;
    let mut data = vec![1u8, 0];
    for field in [sig_offset, u16::MAX, key_offset, u16::MAX, msg_offset, message.len() as u16, u16::MAX] {
        data.extend_from_slice(&field.to_le_bytes());
    }
    data.extend_from_slice(signer.pubkey().as_ref());
    data.extend_from_slice(signer.sign_message(message).as_ref());
    data.extend_from_slice(message);
    Instruction { program_id: ed25519_program::ID, accounts: vec![], data }
}

impl Harness {
    // --- configuration

    pub fn initialize_ix(&self, params: &ConfigParams) -> Instruction {
        program_ix(
            acc::Initialize {
                admin: self.admin.pubkey(),
                config: config_pda(),
                io_mint: self.mint,
                treasury: params.treasury,
                program_data: gpunet_localnet::program_data_address(),
                system_program: system_program::ID,
            },
            ix::Initialize { params: params.clone() },
        )
    }

    pub fn update_config_ix(&self, admin: &Pubkey, params: &ConfigParams) -> Instruction {
        program_ix(
            acc::UpdateConfig { admin: *admin, config: config_pda(), treasury: params.treasury },
            ix::UpdateConfig { params: params.clone() },
        )
    }

    pub fn update_config(&mut self, change: impl FnOnce(&mut ConfigParams)) -> TxResult {
        let mut params = self.default_params();
        change(&mut params);
        let admin = self.admin.insecure_clone();
        self.send(&[self.update_config_ix(&admin.pubkey(), &params)], &[&admin])
    }

    // --- suppliers

    pub fn register_provider_ix(&self, authority: &Pubkey) -> Instruction {
        let provider = provider_pda(authority);
        program_ix(
            acc::RegisterProvider {
                authority: *authority,
                config: config_pda(),
                provider,
                stake_vault: stake_vault_pda(&provider),
                io_mint: self.mint,
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::RegisterProvider {},
        )
    }

    pub fn stake_ix(&self, s: &Supplier, amount: u64) -> Instruction {
        program_ix(
            acc::Stake {
                authority: s.wallet.pubkey(),
                config: config_pda(),
                provider: s.provider,
                stake_vault: s.vault,
                authority_tokens: s.tokens,
                token_program: spl_token::ID,
            },
            ix::Stake { amount },
        )
    }

    pub fn request_unstake_ix(&self, s: &Supplier, amount: u64) -> Instruction {
        program_ix(
            acc::RequestUnstake { authority: s.wallet.pubkey(), config: config_pda(), provider: s.provider },
            ix::RequestUnstake { amount },
        )
    }

    pub fn withdraw_unstaked_ix(&self, s: &Supplier) -> Instruction {
        program_ix(
            acc::WithdrawUnstaked {
                authority: s.wallet.pubkey(),
                config: config_pda(),
                provider: s.provider,
                stake_vault: s.vault,
                authority_tokens: s.tokens,
                token_program: spl_token::ID,
            },
            ix::WithdrawUnstaked {},
        )
    }

    /// A supplier with 10,000 IO in its wallet, `stake` of it staked.
    pub fn supplier(&mut self, stake: u64) -> Supplier {
        let wallet = self.wallet();
        let tokens = self.token_account(&wallet.pubkey());
        self.mint_to(&tokens, 10_000 * IO);
        let provider = provider_pda(&wallet.pubkey());
        let s = Supplier { tokens, provider, vault: stake_vault_pda(&provider), wallet };
        self.send(&[self.register_provider_ix(&s.wallet.pubkey())], &[&s.wallet]).expect("register_provider");
        if stake > 0 {
            self.send(&[self.stake_ix(&s, stake)], &[&s.wallet]).expect("stake");
        }
        s
    }

    // --- nodes

    pub fn register_node_ix(&self, s: &Supplier, node_key: &Pubkey, spec: NodeSpec) -> Instruction {
        program_ix(
            acc::RegisterNode {
                authority: s.wallet.pubkey(),
                config: config_pda(),
                provider: s.provider,
                node_key: *node_key,
                node: node_pda(node_key),
                system_program: system_program::ID,
            },
            ix::RegisterNode { spec },
        )
    }

    pub fn update_node_ix(&self, s: &Supplier, node: &Pubkey, region: u16, price: u64) -> Instruction {
        self.update_node_inventory_ix(s, node, region, price, [9; 32])
    }

    pub fn update_node_inventory_ix(
        &self,
        s: &Supplier,
        node: &Pubkey,
        region: u16,
        price: u64,
        inventory_hash: [u8; 32],
    ) -> Instruction {
        program_ix(
            acc::UpdateNode { authority: s.wallet.pubkey(), provider: s.provider, node: *node },
            ix::UpdateNode { region, price_per_gpu_hour: price, inventory_hash },
        )
    }

    pub fn deregister_node_ix(&self, s: &Supplier, node: &Pubkey) -> Instruction {
        program_ix(
            acc::DeregisterNode { authority: s.wallet.pubkey(), provider: s.provider, node: *node },
            ix::DeregisterNode {},
        )
    }

    pub fn release_node_ix(&self, s: &Supplier, node: &Pubkey) -> Instruction {
        program_ix(
            acc::ReleaseNode { authority: s.wallet.pubkey(), config: config_pda(), provider: s.provider, node: *node },
            ix::ReleaseNode {},
        )
    }

    pub fn unjail_node_ix(&self, s: &Supplier, node: &Pubkey) -> Instruction {
        program_ix(
            acc::UnjailNode { authority: s.wallet.pubkey(), provider: s.provider, node: *node },
            ix::UnjailNode {},
        )
    }

    pub fn set_node_draining_ix(&self, s: &Supplier, node: &Pubkey, draining: bool) -> Instruction {
        program_ix(
            acc::SetNodeDraining { authority: s.wallet.pubkey(), provider: s.provider, node: *node },
            ix::SetNodeDraining { draining },
        )
    }

    pub fn record_verification_ix(
        &self,
        attester: &Pubkey,
        node: &Pubkey,
        tier: u8,
        valid_until: i64,
        evidence_hash: [u8; 32],
        inventory_hash: [u8; 32],
    ) -> Instruction {
        program_ix(
            acc::RecordVerification { attester: *attester, config: config_pda(), node: *node },
            ix::RecordVerification { tier, valid_until, evidence_hash, inventory_hash },
        )
    }

    /// The attester verifies `node` at `tier` until `valid_until`, for its registered inventory.
    pub fn verify(&mut self, node: &GpuNode, tier: u8, valid_until: i64) -> TxResult {
        let attester = self.attester.insecure_clone();
        let inventory = self.account::<Node>(&node.node).spec.inventory_hash;
        let ix = self.record_verification_ix(&attester.pubkey(), &node.node, tier, valid_until, [tier; 32], inventory);
        self.send(&[ix], &[&attester])
    }

    pub fn node(&mut self, s: &Supplier, spec: NodeSpec) -> GpuNode {
        let key = Keypair::new();
        let ix = self.register_node_ix(s, &key.pubkey(), spec);
        self.send(&[ix], &[&s.wallet, &key]).expect("register_node");
        GpuNode { node: node_pda(&key.pubkey()), key, provider: s.provider, payout_tokens: s.tokens }
    }

    // --- clients and leases

    pub fn client(&mut self, funds: u64) -> Client {
        let wallet = self.wallet();
        let tokens = self.token_account(&wallet.pubkey());
        self.mint_to(&tokens, funds);
        Client { wallet, tokens }
    }

    pub fn open_lease_ix(&self, c: &Client, lease: &LeaseRef, terms: LeaseTerms) -> Instruction {
        self.open_lease_tolerant_ix(c, lease, terms, 0)
    }

    /// `open_lease` with a downtime tolerance (0: the network's default).
    pub fn open_lease_tolerant_ix(
        &self,
        c: &Client,
        lease: &LeaseRef,
        terms: LeaseTerms,
        downtime_tolerance_seconds: u32,
    ) -> Instruction {
        program_ix(
            acc::OpenLease {
                client: c.wallet.pubkey(),
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                client_tokens: c.tokens,
                io_mint: self.mint,
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::OpenLease { lease_id: lease.id, terms, downtime_tolerance_seconds },
        )
    }

    pub fn open_lease(&mut self, c: &Client, id: u64, terms: LeaseTerms) -> LeaseRef {
        let lease = LeaseRef::new(c.wallet.pubkey(), id);
        self.send(&[self.open_lease_ix(c, &lease, terms)], &[&c.wallet]).expect("open_lease");
        lease
    }

    /// The node's price per GPU-hour as the chain has it now (the usual test price when the
    /// account is not a node: attack tests pass forged accounts on purpose).
    pub fn price_of(&self, node: &GpuNode) -> u64 {
        self.svm
            .get_account(&node.node)
            .and_then(|a| <Node as anchor_lang::AccountDeserialize>::try_deserialize(&mut a.data.as_slice()).ok())
            .map_or(h100_spec(1).price_per_gpu_hour, |n| n.spec.price_per_gpu_hour)
    }

    /// Remaining accounts of `assign_lease`: each node (writable) then its provider; each share
    /// at the node's current price.
    pub fn assign_lease_ix(&self, attester: &Pubkey, lease: &LeaseRef, shares: &[(&GpuNode, u8)]) -> Instruction {
        let prices = shares.iter().map(|(n, _)| self.price_of(n)).collect();
        self.assign_lease_at_ix(attester, lease, shares, prices)
    }

    pub fn assign_lease_at_ix(
        &self,
        attester: &Pubkey,
        lease: &LeaseRef,
        shares: &[(&GpuNode, u8)],
        prices: Vec<u64>,
    ) -> Instruction {
        let extra = shares
            .iter()
            .flat_map(|(n, _)| [AccountMeta::new(n.node, false), AccountMeta::new_readonly(n.provider, false)])
            .collect();
        program_ix_with(
            acc::AssignLease { attester: *attester, config: config_pda(), lease: lease.lease },
            ix::AssignLease { gpus: shares.iter().map(|(_, g)| *g).collect(), prices },
            extra,
        )
    }

    pub fn assign(&mut self, lease: &LeaseRef, shares: &[(&GpuNode, u8)]) -> TxResult {
        let attester = self.attester.insecure_clone();
        self.send(&[self.assign_lease_ix(&attester.pubkey(), lease, shares)], &[&attester])
    }

    pub fn top_up_lease_ix(&self, c: &Client, lease: &LeaseRef, extra_seconds: i64) -> Instruction {
        program_ix(
            acc::TopUpLease {
                client: c.wallet.pubkey(),
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                client_tokens: c.tokens,
                token_program: spl_token::ID,
            },
            ix::TopUpLease { extra_seconds },
        )
    }

    pub fn reassign_lease_ix(&self, attester: &Pubkey, lease: &LeaseRef, from: &GpuNode, to: &GpuNode) -> Instruction {
        program_ix(
            acc::ReassignLease {
                attester: *attester,
                config: config_pda(),
                lease: lease.lease,
                from_node: from.node,
                to_node: to.node,
                to_provider: to.provider,
            },
            ix::ReassignLease { expected_price: self.price_of(to) },
        )
    }

    pub fn reassign(&mut self, lease: &LeaseRef, from: &GpuNode, to: &GpuNode) -> TxResult {
        let attester = self.attester.insecure_clone();
        self.send(&[self.reassign_lease_ix(&attester.pubkey(), lease, from, to)], &[&attester])
    }

    /// Remaining accounts of `close_lease`: the lease's nodes, in assignment order.
    pub fn close_lease_ix(&self, closer: &Pubkey, lease: &LeaseRef, client_tokens: &Pubkey) -> Instruction {
        let state: Lease = self.account(&lease.lease);
        let extra = state.assignments().iter().map(|a| AccountMeta::new(a.node, false)).collect();
        program_ix_with(
            acc::CloseLease {
                closer: *closer,
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                client: lease.client,
                client_tokens: *client_tokens,
                token_program: spl_token::ID,
            },
            ix::CloseLease {},
            extra,
        )
    }

    pub fn close(&mut self, closer: &Keypair, lease: &LeaseRef, client_tokens: &Pubkey) -> TxResult {
        let ix = self.close_lease_ix(&closer.pubkey(), lease, client_tokens);
        self.send(&[ix], &[closer])
    }

    pub fn finalize_lease_ix(&self, finalizer: &Pubkey, lease: &LeaseRef, client_tokens: &Pubkey) -> Instruction {
        program_ix(
            acc::FinalizeLease {
                finalizer: *finalizer,
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                client: lease.client,
                client_tokens: *client_tokens,
                treasury: self.treasury,
                token_program: spl_token::ID,
            },
            ix::FinalizeLease {},
        )
    }

    pub fn finalize(&mut self, finalizer: &Keypair, lease: &LeaseRef, client_tokens: &Pubkey) -> TxResult {
        let ix = self.finalize_lease_ix(&finalizer.pubkey(), lease, client_tokens);
        self.send(&[ix], &[finalizer])
    }

    /// Close then finalize in one transaction, by the client (nothing can be owed: no shares, or all settled).
    pub fn close_and_finalize(&mut self, client: &Client, lease: &LeaseRef) -> TxResult {
        let closer = client.wallet.pubkey();
        let ixs = [
            self.close_lease_ix(&closer, lease, &client.tokens),
            self.finalize_lease_ix(&closer, lease, &client.tokens),
        ];
        let wallet = client.wallet.insecure_clone();
        self.send(&ixs, &[&wallet])
    }

    pub fn reclaim_lease_ix(&self, reclaimer: &Pubkey, lease: &LeaseRef) -> Instruction {
        program_ix(
            acc::ReclaimLease { reclaimer: *reclaimer, config: config_pda(), lease: lease.lease, client: lease.client },
            ix::ReclaimLease {},
        )
    }

    pub fn sweep_fees_ix(&self, sweeper: &Pubkey, lease: &LeaseRef) -> Instruction {
        program_ix(
            acc::SweepFees {
                sweeper: *sweeper,
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                treasury: self.treasury,
                token_program: spl_token::ID,
            },
            ix::SweepFees {},
        )
    }

    // --- settlement and slashing

    pub fn settle_usage_ix(
        &self,
        attester: &Pubkey,
        lease: &LeaseRef,
        node: &GpuNode,
        receipt: Receipt,
        accepted_gpu_seconds: u64,
    ) -> Instruction {
        let has_pool = self.exists(&node.provider) && self.account::<Provider>(&node.provider).has_pool;
        let income_epoch = if has_pool { self.epoch() } else { 0 };
        self.settle_usage_into_ix(attester, lease, node, receipt, accepted_gpu_seconds, has_pool, income_epoch)
    }

    /// `settle_usage` with the pool's accounts or not, into `income_epoch`, whatever the provider.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_usage_into_ix(
        &self,
        attester: &Pubkey,
        lease: &LeaseRef,
        node: &GpuNode,
        receipt: Receipt,
        accepted_gpu_seconds: u64,
        with_pool: bool,
        income_epoch: i64,
    ) -> Instruction {
        let pool = with_pool.then(|| pool_pda(&node.provider));
        program_ix(
            acc::SettleUsage {
                attester: *attester,
                config: config_pda(),
                lease: lease.lease,
                lease_vault: lease.vault,
                node: node.node,
                provider: node.provider,
                provider_tokens: node.payout_tokens,
                instructions: sysvar::instructions::ID,
                token_program: spl_token::ID,
                pool,
                staking: pool.map(|_| staking_pda()),
                stake_vault: pool.map(|_| stake_vault_pda(&node.provider)),
            },
            ix::SettleUsage { receipt, accepted_gpu_seconds, income_epoch },
        )
    }

    /// The receipt's increment over the share's last settled receipt (0 if it is not above it):
    /// what an attester that saw the node online throughout accepts.
    pub fn increment(&self, lease: &LeaseRef, node: &GpuNode, receipt: &Receipt) -> u64 {
        let state: Lease = self.account(&lease.lease);
        state
            .assignment_index(&node.node)
            .map_or(0, |i| receipt.gpu_seconds.saturating_sub(state.assignments[i].receipt_gpu_seconds))
    }

    /// The node-signed Ed25519 instruction followed by `settle_usage`, accepting the whole increment.
    pub fn usage_ixs(&self, lease: &LeaseRef, node: &GpuNode, receipt: Receipt) -> [Instruction; 2] {
        let accepted = self.increment(lease, node, &receipt);
        self.usage_ixs_accepting(lease, node, receipt, accepted)
    }

    pub fn usage_ixs_accepting(
        &self,
        lease: &LeaseRef,
        node: &GpuNode,
        receipt: Receipt,
        accepted: u64,
    ) -> [Instruction; 2] {
        let message = receipt.message(&lease.lease, &node.key.pubkey());
        [ed25519_ix(&node.key, &message), self.settle_usage_ix(&self.attester.pubkey(), lease, node, receipt, accepted)]
    }

    pub fn settle(&mut self, lease: &LeaseRef, node: &GpuNode, receipt: Receipt) -> TxResult {
        let attester = self.attester.insecure_clone();
        self.send(&self.usage_ixs(lease, node, receipt), &[&attester])
    }

    /// `node`'s share of `lease` as it is on chain now.
    pub fn share(&self, lease: &LeaseRef, node: &GpuNode) -> Assignment {
        let state: Lease = self.account(&lease.lease);
        state.assignments()[state.assignment_index(&node.node).expect("node in lease")]
    }

    /// The node's next receipt for `lease`: `seconds` more of full use of its GPUs than the last
    /// settled receipt, through now.
    pub fn full_use_receipt(&self, lease: &LeaseRef, node: &GpuNode, seconds: i64) -> Receipt {
        let share = self.share(lease, node);
        Receipt {
            epoch: share.epoch,
            gpu_seconds: share.receipt_gpu_seconds + seconds as u64 * u64::from(share.gpus),
            through: self.now(),
        }
    }

    pub fn slash_ix(
        &self,
        attester: &Pubkey,
        node: &GpuNode,
        fault: FaultKind,
        victim: Option<(&LeaseRef, &Pubkey)>,
    ) -> Instruction {
        self.slash_with_evidence_ix(attester, node, fault, victim, Pubkey::new_unique().to_bytes())
    }

    pub fn slash_with_evidence_ix(
        &self,
        attester: &Pubkey,
        node: &GpuNode,
        fault: FaultKind,
        victim: Option<(&LeaseRef, &Pubkey)>,
        evidence_hash: [u8; 32],
    ) -> Instruction {
        self.slash_at_ix(attester, node, fault, victim, evidence_hash, self.now())
    }

    /// A slash for a fault committed at `fault_at`, passing the provider's pool (when it has one)
    /// and, for a malicious fault, the pool's cohorts that began unbonding after it.
    pub fn slash_at_ix(
        &self,
        attester: &Pubkey,
        node: &GpuNode,
        fault: FaultKind,
        victim: Option<(&LeaseRef, &Pubkey)>,
        evidence_hash: [u8; 32],
        fault_at: i64,
    ) -> Instruction {
        let provider = node.provider;
        let pool = self.exists(&pool_pda(&provider)).then(|| pool_pda(&provider));
        let cohorts = match (pool, fault) {
            (Some(pool), FaultKind::FailedVerification | FaultKind::InvalidUsage) => self
                .account::<Pool>(&pool)
                .cohort_list()
                .iter()
                .filter(|c| c.ends_at > self.now() && c.starts_at > fault_at)
                .map(|c| AccountMeta::new(cohort_pda(&provider, c.exit_epoch), false))
                .collect(),
            _ => vec![],
        };
        program_ix_with(
            acc::SlashProvider {
                attester: *attester,
                config: config_pda(),
                staking: staking_pda(),
                node: node.node,
                provider,
                stake_vault: stake_vault_pda(&provider),
                treasury: self.treasury,
                evidence: evidence_pda(&evidence_hash),
                lease: victim.map(|(l, _)| l.lease),
                client_tokens: victim.map(|(_, t)| *t),
                pool,
                token_program: spl_token::ID,
                system_program: system_program::ID,
            },
            ix::SlashProvider { fault, evidence_hash, fault_at },
            cohorts,
        )
    }

    pub fn slash(&mut self, node: &GpuNode, fault: FaultKind, victim: Option<(&LeaseRef, &Pubkey)>) -> TxResult {
        let attester = self.attester.insecure_clone();
        self.send(&[self.slash_ix(&attester.pubkey(), node, fault, victim)], &[&attester])
    }
}
