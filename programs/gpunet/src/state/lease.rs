//! A client's escrowed lease of one or more nodes.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::state::MAX_GPUS_PER_NODE;

/// The most nodes a cluster lease can span.
#[constant]
pub const MAX_LEASE_NODES: u8 = 8;
/// The most GPUs one lease may ask for: its most nodes, each with the most GPUs a node may have.
#[constant]
pub const MAX_LEASE_GPUS: u8 = MAX_LEASE_NODES * MAX_GPUS_PER_NODE;

/// The least downtime tolerance a client may choose: below it a network blip would make the
/// lease's suppliers slashable (it is also the coordinator's default `lost_after`).
#[constant]
pub const MIN_DOWNTIME_TOLERANCE_SECONDS: u32 = 10;
/// The most: a node silent longer than an hour holds the client's job hostage for too long.
#[constant]
pub const MAX_DOWNTIME_TOLERANCE_SECONDS: u32 = 3_600;

/// What a client asks for.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct LeaseTerms {
    /// GPU model code, or `ANY`.
    pub gpu_model: u16,
    /// Minimum memory per GPU in GiB.
    pub min_vram_gb: u16,
    /// Total GPUs across all nodes of the lease.
    pub gpu_count: u8,
    /// Region code, or `ANY`.
    pub region: u16,
    /// Highest price per GPU-hour the client accepts, in IO base units.
    pub max_price_per_gpu_hour: u64,
    /// Seconds of running time the escrow pays for at the maximum price.
    pub duration_seconds: i64,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum LeaseStatus {
    /// Escrow funded, waiting for nodes.
    Open,
    /// Running on its assigned nodes.
    Active,
    /// Closed for use: the nodes are free, billing ended at `billable_until`, the escrow that
    /// usage up to then could still cost stays in the vault until `settle_deadline`.
    Closing,
    /// Finalized: the vault is emptied to the client and closed; kept as a record until reclaimed.
    Closed,
}

/// One node's share of a lease.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct Assignment {
    /// The node account (PDA).
    pub node: Pubkey,
    /// The node's signing key, which must sign its usage receipts.
    pub node_key: Pubkey,
    /// The node's provider account (PDA), paid for its usage.
    pub provider: Pubkey,
    /// GPUs of the node given to this lease.
    pub gpus: u8,
    /// Price per GPU-hour fixed at assignment.
    pub price_per_gpu_hour: u64,
    /// Which assignment of the lease this is (1 for the first, one more for each assignment or
    /// reassignment since): the node's receipts name it, so a receipt of an earlier assignment of
    /// the same node to this lease is never settled into this one.
    pub epoch: u64,
    /// When the node took the share: its receipts count GPU-seconds from here.
    pub assigned_at: i64,
    /// The `through` of the last settled receipt (`assigned_at` before any); the next must be later.
    pub settled_until: i64,
    /// The cumulative GPU-seconds of the last settled receipt (0 before any): the next must be more.
    pub receipt_gpu_seconds: u64,
    /// GPU-seconds paid for so far: the receipts' increments, less what the attester did not
    /// accept (time it saw the node offline). Never more than `receipt_gpu_seconds`.
    pub gpu_seconds: u64,
}

impl Assignment {
    /// The most GPU-seconds a receipt through `through` may count: wall time since the assignment
    /// times the share's GPUs.
    pub fn max_gpu_seconds(&self, through: i64) -> Option<u64> {
        let wall = u64::try_from(through.checked_sub(self.assigned_at)?.max(0)).ok()?;
        wall.checked_mul(u64::from(self.gpus))
    }

    /// The most that may still be paid for this share's usage up to `until`: the cost of the
    /// GPU-seconds a receipt through `until` could still add, counted cumulatively as settlements are.
    pub fn owed_at_most(&self, until: i64) -> Option<u64> {
        let more = self.max_gpu_seconds(until)?.saturating_sub(self.receipt_gpu_seconds);
        crate::math::cumulative_cost(self.price_per_gpu_hour, self.gpu_seconds, more)
    }
}

/// PDA `[SEED_LEASE, client, lease_id]`; escrow in the vault PDA `[SEED_LEASE_VAULT, lease]`.
#[account]
#[derive(InitSpace)]
pub struct Lease {
    /// The client who opened and funds the lease.
    pub client: Pubkey,
    /// Client-chosen id, unique per client.
    pub lease_id: u64,
    /// What the client asked for.
    pub terms: LeaseTerms,
    /// Where the lease is in its life.
    pub status: LeaseStatus,
    /// When the lease was opened (unix seconds).
    pub opened_at: i64,
    /// When it was first assigned (0 before).
    pub started_at: i64,
    /// Total escrow ever deposited (opening + top-ups).
    pub deposited: u64,
    /// Paid to providers.
    pub paid: u64,
    /// Protocol fees taken. They stay in the vault (so a settlement writes no shared account) until
    /// `sweep_fees` or `finalize_lease` moves them to the treasury (`fees_swept`).
    pub fees: u64,
    /// Returned to the client at close.
    pub refunded: u64,
    /// Valid entries in `assignments`.
    pub node_count: u8,
    /// The nodes running the lease.
    pub assignments: [Assignment; MAX_LEASE_NODES as usize],
    /// Canonical bump of this PDA.
    pub bump: u8,
    /// Canonical bump of the vault PDA.
    pub vault_bump: u8,
    /// When `close_lease` ran (0 before).
    pub closed_at: i64,
    /// No usage after this moment is billable: the lease's end, or its close if earlier (0 before the close).
    pub billable_until: i64,
    /// Until when the attester may settle usage of a closing lease.
    pub settle_deadline: i64,
    /// When `finalize_lease` ran (0 before).
    pub finalized_at: i64,
    /// Tokens found in the vault beyond the escrow (sent there from outside), refunded to the client at finalization.
    pub donations: u64,
    /// Slashed stake paid to the client for faults of this lease's nodes.
    pub compensated: u64,
    /// How long the client lets a node of this lease be silent before the attester treats it as
    /// lost (0: the network's default). Chosen at open, within the bounds above; appended last.
    pub downtime_tolerance_seconds: u32,
    /// Assignments made so far (the last one's `epoch`); appended last.
    pub epochs: u64,
    /// Of `fees`, what has been moved to the treasury; the rest is in the vault. Appended last.
    pub fees_swept: u64,
}

impl Lease {
    pub fn assignments(&self) -> &[Assignment] {
        &self.assignments[..usize::from(self.node_count)]
    }

    pub fn assignment_index(&self, node: &Pubkey) -> Option<usize> {
        self.assignments().iter().position(|a| a.node == *node)
    }

    /// Closing or closed: no new work, top-up, assignment or close.
    pub fn is_closed(&self) -> bool {
        matches!(self.status, LeaseStatus::Closing | LeaseStatus::Closed)
    }

    /// The fees still in the vault, not yet moved to the treasury.
    pub fn fees_unswept(&self) -> Result<u64> {
        self.fees.checked_sub(self.fees_swept).ok_or_else(|| error!(GpunetError::ArithmeticOverflow))
    }

    /// The escrow the vault holds for usage: deposits not yet paid, taken as fees or refunded.
    /// (The vault holds `fees_unswept` besides.)
    pub fn escrow_left(&self) -> Result<u64> {
        self.deposited
            .checked_sub(self.paid)
            .and_then(|v| v.checked_sub(self.fees))
            .and_then(|v| v.checked_sub(self.refunded))
            .ok_or_else(|| error!(GpunetError::ArithmeticOverflow))
    }

    /// The placed lease's end, `duration_seconds` after it started: nothing after it is billable,
    /// and after it (plus the close grace) anyone may close the lease. An unplaced (`Open`) lease
    /// has no end yet; callers ask only once it was placed.
    pub fn ends_at(&self) -> Option<i64> {
        self.started_at.checked_add(self.terms.duration_seconds)
    }

    /// The latest moment usage may be billed for right now: the lease's end while it runs,
    /// the close time (or the end, if earlier) once it is closing; `None` when nothing is billable.
    pub fn billing_end(&self) -> Option<i64> {
        match self.status {
            LeaseStatus::Active => self.ends_at(),
            LeaseStatus::Closing => Some(self.billable_until),
            LeaseStatus::Open | LeaseStatus::Closed => None,
        }
    }

    /// Whether every share has been settled up to the billing end (nothing more can be owed).
    pub fn fully_settled(&self) -> bool {
        self.assignments().iter().all(|a| a.settled_until >= self.billable_until)
    }
}
