//! Property: after any sequence of operations, every token is accounted for.
//!
//! After each step: escrow deposited == paid to providers + fees + refunded + still in
//! lease vaults (from the events, to the base unit); every vault holds exactly what the
//! program's own bookkeeping says (the escrow left and the fees not yet swept), plus what
//! strangers donated to it (refunded to the client, and counted, at finalization); the treasury
//! holds exactly the fees swept and the slashes it took; the total IO supply is unchanged; and a
//! step that fails changes no balance at all. Usage settles by cumulative receipts (some of their
//! increment accepted, some refused), fees are swept at random; leases close, settle in their
//! closing window and finalize.

use std::collections::BTreeMap;

use crate::harness::*;
use anchor_lang::prelude::Pubkey;
use anchor_spl::token::spl_token;
use gpunet::events::{
    FeesSwept, LeaseClosed, LeaseFinalized, LeaseOpened, LeaseToppedUp, ProviderSlashed, UsageSettled,
};
use gpunet::state::{FaultKind, Lease, LeaseStatus, Node, Provider, Receipt};
use proptest::prelude::*;
use solana_signer::Signer;

#[derive(Debug, Clone)]
enum Op {
    Open { client: usize, gpus: u8, minutes: i64 },
    Assign { lease: usize },
    Advance { seconds: i64 },
    Settle { lease: usize, share: usize, seconds: i64, use_pct: u64, accept_pct: u64 },
    Sweep { lease: usize },
    TopUp { lease: usize, minutes: i64 },
    Reassign { lease: usize, share: usize },
    Close { lease: usize, by_client: bool },
    Finalize { lease: usize },
    Donate { lease: usize, amount: u64 },
    Slash { node: usize, kind: u8, with_lease: bool },
    Unstake { supplier: usize, amount: u64 },
    Withdraw { supplier: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2usize, 1..=4u8, 1..=90i64).prop_map(|(client, gpus, minutes)| Op::Open { client, gpus, minutes }),
        4 => (0..6usize).prop_map(|lease| Op::Assign { lease }),
        4 => (1..=90i64).prop_map(|seconds| Op::Advance { seconds }),
        8 => (0..6usize, 0..3usize, 1..=70i64, 0..=110u64, prop_oneof![3 => Just(100u64), 1 => 0..=110u64])
            .prop_map(|(lease, share, seconds, use_pct, accept_pct)| Op::Settle {
                lease,
                share,
                seconds,
                use_pct,
                accept_pct
            }),
        1 => (0..6usize).prop_map(|lease| Op::Sweep { lease }),
        1 => (0..6usize, 1..=60i64).prop_map(|(lease, minutes)| Op::TopUp { lease, minutes }),
        2 => (0..6usize, 0..3usize).prop_map(|(lease, share)| Op::Reassign { lease, share }),
        2 => (0..6usize, any::<bool>()).prop_map(|(lease, by_client)| Op::Close { lease, by_client }),
        2 => (0..6usize).prop_map(|lease| Op::Finalize { lease }),
        1 => (0..6usize, 1..=1_000u64).prop_map(|(lease, amount)| Op::Donate { lease, amount }),
        1 => (0..5usize, 0..3u8, any::<bool>()).prop_map(|(node, kind, with_lease)| Op::Slash { node, kind, with_lease }),
        1 => (0..3usize, 0..=300u64).prop_map(|(supplier, amount)| Op::Unstake { supplier, amount }),
        1 => (0..3usize).prop_map(|supplier| Op::Withdraw { supplier }),
    ]
}

/// What the events say moved, summed over the run.
#[derive(Default, Debug)]
struct Ledger {
    deposited: u64,
    paid: u64,
    fees: u64,
    refunded: u64,
    donations: u64,
    slashed: u64,
    /// Fees moved to the treasury; slashes' treasury share.
    swept: u64,
    slashed_to_treasury: u64,
}

impl Ledger {
    fn record(&mut self, meta: &litesvm::types::TransactionMetadata) {
        for e in events::<LeaseOpened>(meta) {
            self.deposited += e.deposit;
        }
        for e in events::<LeaseToppedUp>(meta) {
            self.deposited += e.amount;
        }
        for e in events::<UsageSettled>(meta) {
            assert_eq!(e.payout + e.fee, e.amount);
            self.paid += e.payout;
            self.fees += e.fee;
        }
        for e in events::<LeaseClosed>(meta) {
            self.refunded += e.refund;
        }
        for e in events::<LeaseFinalized>(meta) {
            self.refunded += e.refund;
            self.donations += e.donations;
            self.swept += e.fees_to_treasury;
        }
        for e in events::<FeesSwept>(meta) {
            self.swept += e.amount;
        }
        for e in events::<ProviderSlashed>(meta) {
            assert_eq!(e.to_client + e.to_treasury, e.amount);
            self.slashed += e.amount;
            self.slashed_to_treasury += e.to_treasury;
        }
    }
}

struct World {
    h: Harness,
    suppliers: Vec<Supplier>,
    nodes: Vec<GpuNode>,
    clients: Vec<Client>,
    leases: Vec<LeaseRef>,
    ledger: Ledger,
    supply: u64,
    /// Donated to each lease vault and not yet paid out by a finalization.
    donated: BTreeMap<Pubkey, u64>,
    donor: Client,
}

impl World {
    fn new() -> Self {
        let mut h = Harness::new();
        let suppliers: Vec<_> = (0..3).map(|_| h.supplier(600 * IO)).collect();
        let mut nodes = Vec::new();
        for (i, s) in suppliers.iter().enumerate() {
            nodes.push(h.node(s, h100_spec(2)));
            if i < 2 {
                nodes.push(h.node(s, h100_spec(1)));
            }
        }
        let clients: Vec<_> = (0..2).map(|_| h.client(5_000 * IO)).collect();
        let donor = h.client(1_000 * IO);
        let supply = 3 * 10_000 * IO + 2 * 5_000 * IO + 1_000 * IO;
        let (leases, ledger, donated) = (Vec::new(), Ledger::default(), BTreeMap::new());
        Self { h, suppliers, nodes, clients, leases, ledger, supply, donated, donor }
    }

    fn lease_state(&self, i: usize) -> Option<(LeaseRef, Lease)> {
        // indices wrap, so most generated steps hit an existing lease
        let lease = *self.leases.get(i % self.leases.len().max(1))?;
        Some((lease, self.h.account(&lease.lease)))
    }

    fn free_nodes(&self, exclude: &[Pubkey]) -> Vec<(usize, u8)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !exclude.contains(&n.node))
            .filter(|(_, n)| self.h.account::<Provider>(&n.provider).is_collateralised())
            .map(|(i, n)| (i, self.h.account::<Node>(&n.node)))
            .filter(|(_, node)| !node.jailed)
            .map(|(i, node)| (i, node.free_gpus()))
            .filter(|(_, free)| *free > 0)
            .collect()
    }

    /// Every IO token account the world knows, with its balance (absent vaults count 0).
    fn balances(&self) -> BTreeMap<Pubkey, u64> {
        let mut accounts = vec![self.h.treasury];
        accounts.extend(self.suppliers.iter().flat_map(|s| [s.tokens, s.vault]));
        accounts.extend(self.clients.iter().map(|c| c.tokens));
        accounts.push(self.donor.tokens);
        accounts.extend(self.leases.iter().map(|l| l.vault));
        accounts.into_iter().map(|a| (a, if self.h.exists(&a) { self.h.balance(&a) } else { 0 })).collect()
    }

    fn apply(&mut self, op: &Op) -> Option<TxResult> {
        Some(match *op {
            Op::Open { client, gpus, minutes } => {
                let c = &self.clients[client];
                let lease = LeaseRef::new(c.wallet.pubkey(), self.leases.len() as u64);
                let mut t = terms(gpus, 1);
                t.duration_seconds = minutes * 60;
                let result = self.h.send(&[self.h.open_lease_ix(c, &lease, t)], &[&c.wallet]);
                if result.is_ok() {
                    self.leases.push(lease);
                }
                result
            }
            Op::Assign { lease } => {
                let (lease, state) = self.lease_state(lease)?;
                let mut want = state.terms.gpu_count;
                let mut shares = Vec::new();
                for (i, free) in self.free_nodes(&[]) {
                    if want == 0 {
                        break;
                    }
                    let take = free.min(want);
                    shares.push((&self.nodes[i], take));
                    want -= take;
                }
                self.h.assign(&lease, &shares)
            }
            Op::Advance { seconds } => {
                self.h.advance(seconds);
                return None;
            }
            Op::Settle { lease, share, seconds, use_pct, accept_pct } => {
                let (lease, state) = self.lease_state(lease)?;
                let a = *state.assignments().get(share % state.assignments().len().max(1))?;
                let node = self.nodes.iter().find(|n| n.node == a.node)?;
                let end = self.h.now();
                let start = (end - seconds).max(a.settled_until);
                let more = (end - start).max(0) as u64 * u64::from(a.gpus) * use_pct / 100;
                let receipt = Receipt { epoch: a.epoch, gpu_seconds: a.receipt_gpu_seconds + more, through: end };
                let ixs = self.h.usage_ixs_accepting(&lease, node, receipt, more * accept_pct / 100);
                let attester = self.h.attester.insecure_clone();
                self.h.send(&ixs, &[&attester])
            }
            Op::Sweep { lease } => {
                let (lease, _) = self.lease_state(lease)?;
                let sweeper = self.donor.wallet.insecure_clone();
                self.h.send(&[self.h.sweep_fees_ix(&sweeper.pubkey(), &lease)], &[&sweeper])
            }
            Op::TopUp { lease, minutes } => {
                let (lease, _) = self.lease_state(lease)?;
                let c = self.clients.iter().find(|c| c.wallet.pubkey() == lease.client)?;
                self.h.send(&[self.h.top_up_lease_ix(c, &lease, minutes * 60)], &[&c.wallet])
            }
            Op::Reassign { lease, share } => {
                let (lease, state) = self.lease_state(lease)?;
                let a = *state.assignments().get(share % state.assignments().len().max(1))?;
                let used: Vec<_> = state.assignments().iter().map(|x| x.node).collect();
                let (to, _) = *self.free_nodes(&used).iter().find(|(_, free)| *free >= a.gpus)?;
                let from = self.nodes.iter().find(|n| n.node == a.node)?;
                self.h.reassign(&lease, from, &self.nodes[to])
            }
            Op::Close { lease, by_client } => {
                let (lease, _) = self.lease_state(lease)?;
                let c = self.clients.iter().find(|c| c.wallet.pubkey() == lease.client)?;
                let closer =
                    if by_client { c.wallet.insecure_clone() } else { self.clients[0].wallet.insecure_clone() };
                let tokens = c.tokens;
                self.h.close(&closer, &lease, &tokens)
            }
            Op::Finalize { lease } => {
                let (lease, _) = self.lease_state(lease)?;
                let c = self.clients.iter().find(|c| c.wallet.pubkey() == lease.client)?;
                let finalizer = self.clients[0].wallet.insecure_clone();
                let tokens = c.tokens;
                let result = self.h.finalize(&finalizer, &lease, &tokens);
                if result.is_ok() {
                    self.donated.remove(&lease.vault);
                }
                result
            }
            Op::Donate { lease, amount } => {
                let (lease, _) = self.lease_state(lease)?;
                let donor = &self.donor;
                let ix = spl_token::instruction::transfer(
                    &spl_token::ID,
                    &donor.tokens,
                    &lease.vault,
                    &donor.wallet.pubkey(),
                    &[],
                    amount,
                )
                .unwrap();
                let result = self.h.send(&[ix], &[&donor.wallet.insecure_clone()]);
                if result.is_ok() {
                    *self.donated.entry(lease.vault).or_default() += amount;
                }
                result
            }
            Op::Slash { node, kind, with_lease } => {
                let n = &self.nodes[node];
                let fault = [FaultKind::MissedHeartbeats, FaultKind::FailedVerification, FaultKind::InvalidUsage]
                    [kind as usize];
                let victim = if with_lease {
                    self.leases.iter().find_map(|l| {
                        let state: Lease = self.h.account(&l.lease);
                        let client = self.clients.iter().find(|c| c.wallet.pubkey() == l.client)?;
                        (matches!(state.status, LeaseStatus::Active | LeaseStatus::Closing)
                            && state.assignment_index(&n.node).is_some())
                        .then_some((*l, client.tokens))
                    })
                } else {
                    None
                };
                self.h.slash(n, fault, victim.as_ref().map(|(l, t)| (l, t)))
            }
            Op::Unstake { supplier, amount } => {
                let s = &self.suppliers[supplier];
                self.h.send(&[self.h.request_unstake_ix(s, amount * IO)], &[&s.wallet])
            }
            Op::Withdraw { supplier } => {
                let s = &self.suppliers[supplier];
                self.h.send(&[self.h.withdraw_unstaked_ix(s)], &[&s.wallet])
            }
        })
    }

    fn check_invariants(&self) {
        let balances = self.balances();
        assert_eq!(balances.values().sum::<u64>(), self.supply, "IO supply changed");

        let mut in_vaults = 0;
        let mut unswept = 0;
        for lease in &self.leases {
            let state: Lease = self.h.account(&lease.lease);
            let left = state.escrow_left().expect("bookkeeping never underflows");
            let fees = state.fees_unswept().expect("never more swept than taken");
            let donated = self.donated.get(&lease.vault).copied().unwrap_or(0);
            assert_eq!(
                balances[&lease.vault],
                left + fees + donated,
                "lease vault == escrow left + fees not swept + donations"
            );
            assert_eq!(state.deposited, state.paid + state.fees + state.refunded + left);
            if state.status == LeaseStatus::Closed {
                assert_eq!((left, fees), (0, 0));
                assert!(!self.h.exists(&lease.vault), "a finalized lease's vault is closed");
            }
            for a in state.assignments() {
                assert!(a.gpu_seconds <= a.receipt_gpu_seconds, "never more paid for than the receipts say");
            }
            in_vaults += left;
            unswept += fees;
        }
        let l = &self.ledger;
        assert_eq!(
            l.deposited,
            l.paid + l.fees + l.refunded + in_vaults,
            "deposits == payouts + fees + refunds + escrow"
        );
        assert_eq!(l.fees, l.swept + unswept, "every fee is swept or still in its lease's vault");
        assert_eq!(
            balances[&self.h.treasury],
            l.swept + l.slashed_to_treasury,
            "the treasury holds swept fees and slashes"
        );
        let donated_total: u64 = self.donated.values().sum();
        assert_eq!(
            1_000 * IO - self.h.balance(&self.donor.tokens),
            donated_total + l.donations,
            "every donation accounted for"
        );

        for s in &self.suppliers {
            assert_eq!(balances[&s.vault], self.h.stake_vault_books(&s.provider), "stake vault == its books");
        }
        let slashed: u64 = self.suppliers.iter().map(|s| self.h.account::<Provider>(&s.provider).slashed).sum();
        assert_eq!(slashed, l.slashed);

        for n in &self.nodes {
            let node: Node = self.h.account(&n.node);
            let leased: u8 = self
                .leases
                .iter()
                .map(|lease| self.h.account::<Lease>(&lease.lease))
                .filter(|state| state.status == LeaseStatus::Active)
                .flat_map(|state| state.assignments().to_vec())
                .filter(|a| a.node == n.node)
                .map(|a| a.gpus)
                .sum();
            assert_eq!(node.gpus_leased, leased, "node's leased GPUs == its active shares");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_token_is_accounted_for(ops in prop::collection::vec(op(), 1..60)) {
        let mut world = World::new();
        for op in &ops {
            let before = world.balances();
            match world.apply(op) {
                Some(Ok(meta)) => world.ledger.record(&meta),
                Some(Err(_)) => prop_assert_eq!(&before, &world.balances(), "failed {:?} moved tokens", op),
                None => {}
            }
            world.check_invariants();
        }
    }
}
