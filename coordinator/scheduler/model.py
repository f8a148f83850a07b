"""The scheduler's view of nodes and lease requests, and what a placement decision returns.

The rules mirror what `assign_lease` accepts on chain (programs/gpunet/src/instructions/
assign_lease.rs): a node qualifies when it is neither jailed nor draining, its provider is collateralised
(staked >= bonded), `Node::meets(terms)` holds and it has the free GPUs; a lease has 1..=MAX_LEASE_NODES
shares, each > 0 GPUs, on distinct nodes, summing to the lease's gpu_count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solders.pubkey import Pubkey

from gpunet.instructions import ANY, LeaseTerms, Share
from gpunet.limits import MAX_GPUS_PER_NODE, MAX_LEASE_GPUS, MAX_LEASE_NODES

__all__ = [
    "MAX_GPUS_PER_NODE",
    "MAX_LEASE_GPUS",
    "MAX_LEASE_NODES",
    "VERIFICATION_STATES",
    "Address",
    "InvalidLeaseRequest",
    "InvalidNodeView",
    "LeaseRequest",
    "NodeBusy",
    "NodeView",
    "NotPlaced",
    "PlacedShare",
    "Placement",
    "SchedulerError",
    "StalePlacement",
    "UnknownLease",
    "UnknownNode",
]

VERIFICATION_STATES = ("verified", "unverified", "failed")
_U8, _U16, _U64, _I64 = 2**8, 2**16, 2**64, 2**63

# Nodes and providers are named by their addresses: `Pubkey`s, the coordinator's one node-key type
# (the type checker holds the coordinator to it). The scheduler itself only hashes, orders and prints
# them, so at run time it also takes short strings: its own tests and benchmark name nodes that way.
if TYPE_CHECKING:
    Address = Pubkey
else:
    Address = Pubkey | str


def _pubkey(address: Address) -> Pubkey:
    return address if isinstance(address, Pubkey) else Pubkey.from_string(address)


class SchedulerError(Exception):
    """Base of every scheduler error; each one leaves the fleet unchanged.

    SchedulerError
     ├── InvalidNodeView      a node's facts the chain could never hold
     ├── InvalidLeaseRequest  terms or a cluster shape the chain would refuse
     ├── StalePlacement       reserve() of a placement the fleet no longer allows
     ├── UnknownNode          no node with that node key in the fleet
     ├── UnknownLease         no reservation for that lease
     └── NodeBusy             removing a node that still holds reserved GPUs
    """


class InvalidNodeView(SchedulerError):
    pass


class InvalidLeaseRequest(SchedulerError):
    pass


class StalePlacement(SchedulerError):
    pass


class UnknownNode(SchedulerError):
    pass


class UnknownLease(SchedulerError):
    pass


class NodeBusy(SchedulerError):
    pass


@dataclass(slots=True)
class NodeView:
    """What the coordinator knows of one registered node: chain facts plus live session state.

    Addresses are `Address`es (one type per fleet). Once handed to a `Scheduler` the view belongs to it: change
    it only through the scheduler, which keeps its indexes in step.
    """

    node: Address  # the node account (PDA)
    node_key: Address  # the worker's signing key: the scheduler's key for the node
    provider_authority: Address  # the provider's wallet (its provider PDA derives from it)
    gpu_model: int  # catalog code, never ANY
    gpu_count: int  # 1..=MAX_GPUS_PER_NODE
    vram_gb: int  # per GPU
    region: int  # catalog code, never ANY
    price_per_gpu_hour: int  # IO base units
    gpus_leased: int = 0
    bonded_stake: int = 0  # stake bonded to this node at registration
    provider_staked: int = 0  # the provider's active stake
    provider_bonded: int = 0  # the provider's stake backing all its nodes
    jailed: bool = False
    draining: bool = False  # its supplier's announced maintenance: no new shares (its own may move away)
    online: bool = False  # a worker session with fresh heartbeats
    healthy: bool = True  # the worker's last NVML health report
    # Its GPUs verified as the cluster requires, and what runs there is what was registered
    # (the coordinator's GPU verification says; False: it gets no new work).
    verified: bool = True
    # What clients are shown of its verification (`VERIFICATION_STATES`): "verified" (a tier recorded on
    # chain that has not run out), "unverified", or "failed" (the coordinator found what runs unfit
    # or failing its checks; `gpunet node verifications` says why).
    verification: str = "unverified"
    simulated: bool = False  # the worker runs simulated GPUs (labelled everywhere)
    latency_ms: float | None = None  # measured coordinator <-> worker round trip; None = not yet
    # GPUs of the registered model and VRAM its worker's live inventory reports (None: no session has
    # reported one yet): a node is never placed on GPUs it registered but does not run.
    live_gpus: int | None = None
    completed_shares: int = 0  # lease shares it ran to the end
    failed_shares: int = 0  # lease shares lost while it held them

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raises InvalidNodeView unless the chain could hold these facts (NodeSpec::is_valid)."""
        for name in ("node", "node_key", "provider_authority"):
            value = getattr(self, name)
            if not isinstance(value, Pubkey) and (not isinstance(value, str) or not value):
                raise InvalidNodeView(f"node {self.node_key!r}: {name} must be a Pubkey or a non-empty string")
        ranges = {
            "gpu_model": (1, _U16),
            "gpu_count": (1, MAX_GPUS_PER_NODE + 1),
            "vram_gb": (1, _U16),
            "region": (1, _U16),
            "price_per_gpu_hour": (1, _U64),
            "gpus_leased": (0, self.gpu_count + 1 if isinstance(self.gpu_count, int) else 1),
            "bonded_stake": (0, _U64),
            "provider_staked": (0, _U64),
            "provider_bonded": (0, _U64),
            "completed_shares": (0, _U64),
            "failed_shares": (0, _U64),
        }
        for name, (low, end) in ranges.items():
            value = getattr(self, name)
            if type(value) is not int or not low <= value < end:
                raise InvalidNodeView(f"node {self.node_key}: {name}={value!r} is not an integer in [{low}, {end - 1}]")
        for name in ("jailed", "draining", "online", "healthy", "simulated", "verified"):
            if type(getattr(self, name)) is not bool:
                raise InvalidNodeView(f"node {self.node_key}: {name} must be a bool")
        if self.verification not in VERIFICATION_STATES:
            raise InvalidNodeView(f"node {self.node_key}: verification={self.verification!r} is not one of "
                                  f"{', '.join(VERIFICATION_STATES)}")  # fmt: skip
        live = self.live_gpus
        if live is not None and (type(live) is not int or not 0 <= live <= MAX_GPUS_PER_NODE):
            raise InvalidNodeView(f"node {self.node_key}: live_gpus={live!r} must be None or 0..{MAX_GPUS_PER_NODE}")
        latency = self.latency_ms
        if latency is not None and (
            isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < float("inf")
        ):
            raise InvalidNodeView(f"node {self.node_key}: latency_ms={latency!r} must be None or a finite number >= 0")

    @property
    def free_gpus(self) -> int:
        """GPUs it can take new work on: registered and running (its live inventory), not leased."""
        running = self.gpu_count if self.live_gpus is None else min(self.gpu_count, self.live_gpus)
        return max(0, running - self.gpus_leased)

    @property
    def unleased_gpus(self) -> int:
        """Registered GPUs no lease holds: what the chain lets a placement it already holds take back."""
        return self.gpu_count - self.gpus_leased

    @property
    def missing_gpus(self) -> int:
        """Registered GPUs its live inventory lacks."""
        return 0 if self.live_gpus is None else max(0, self.gpu_count - self.live_gpus)

    def is_collateralised(self) -> bool:
        """Provider::is_collateralised: a slashed provider's nodes get no new work until it restakes."""
        return self.provider_staked >= self.provider_bonded

    def meets(self, terms: LeaseTerms) -> bool:
        """Node::meets: the hardware and price satisfy the lease's terms."""
        return (
            (terms.gpu_model == ANY or terms.gpu_model == self.gpu_model)
            and self.vram_gb >= terms.min_vram_gb
            and (terms.region == ANY or terms.region == self.region)
            and self.price_per_gpu_hour <= terms.max_price_per_gpu_hour
        )

    def is_schedulable(self, accept_simulated: bool) -> bool:
        """Live and in good standing: may take new work of any lease it meets."""
        return (
            self.online
            and self.healthy
            and not self.jailed
            and not self.draining
            and self.verified
            and self.is_collateralised()
            and (accept_simulated or not self.simulated)
        )


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """A lease to place: its on-chain terms plus how its GPUs may split over nodes.

    `max_nodes` caps the shares (1 = one machine only); `gpus_per_node` asks for equal shares
    of exactly that many GPUs (symmetric ranks for torch.distributed), which also makes a
    lease explicitly multi-node when it is below gpu_count. Without it, the fewest nodes win.
    """

    lease: str  # the lease account address
    terms: LeaseTerms
    max_nodes: int = MAX_LEASE_NODES
    gpus_per_node: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.lease, str) or not self.lease:
            raise InvalidLeaseRequest(f"lease {self.lease!r} must be a non-empty address string")
        t = self.terms
        if not isinstance(t, LeaseTerms):
            raise InvalidLeaseRequest(f"lease {self.lease}: terms must be a gpunet.instructions.LeaseTerms")
        ranges = {
            "gpu_model": (0, _U16),
            "min_vram_gb": (0, _U16),
            "gpu_count": (1, MAX_LEASE_GPUS + 1),  # open_lease refuses others
            "region": (0, _U16),
            "max_price_per_gpu_hour": (1, _U64),
            "duration_seconds": (1, _I64),
        }
        for name, (low, end) in ranges.items():
            value = getattr(t, name)
            if type(value) is not int or not low <= value < end:
                raise InvalidLeaseRequest(
                    f"lease {self.lease}: {name}={value!r} is not an integer in [{low}, {end - 1}]"
                )
        if type(self.max_nodes) is not int or not 1 <= self.max_nodes <= MAX_LEASE_NODES:
            raise InvalidLeaseRequest(
                f"lease {self.lease}: max_nodes={self.max_nodes!r} is not in [1, {MAX_LEASE_NODES}]"
            )
        if self.gpu_count > self.max_nodes * MAX_GPUS_PER_NODE:
            raise InvalidLeaseRequest(
                f"lease {self.lease}: {self.gpu_count} GPUs cannot fit on {self.max_nodes} "
                f"node(s) of at most {MAX_GPUS_PER_NODE} GPUs"
            )
        g = self.gpus_per_node
        if g is not None:
            if type(g) is not int or not 1 <= g <= MAX_GPUS_PER_NODE or self.gpu_count % g:
                raise InvalidLeaseRequest(
                    f"lease {self.lease}: gpus_per_node={g!r} must be in [1, "
                    f"{MAX_GPUS_PER_NODE}] and divide gpu_count={self.gpu_count}"
                )
            if self.gpu_count // g > self.max_nodes:
                raise InvalidLeaseRequest(
                    f"lease {self.lease}: {self.gpu_count // g} shares of {g} GPUs exceed max_nodes={self.max_nodes}"
                )

    @property
    def gpu_count(self) -> int:
        return self.terms.gpu_count


@dataclass(frozen=True, slots=True)
class PlacedShare:
    """One node's part of a placement, with what assign_lease needs to name it."""

    node: Address
    node_key: Address
    provider_authority: Address
    gpus: int
    price_per_gpu_hour: int  # the node's price, which the chain fixes at assignment
    simulated: bool

    @classmethod
    def of(cls, view: NodeView, gpus: int) -> PlacedShare:
        return cls(view.node, view.node_key, view.provider_authority, gpus, view.price_per_gpu_hour, view.simulated)

    def to_sdk(self) -> Share:
        """The share as `gpunet.instructions.assign_lease` / `reassign_lease` take it."""
        return Share(_pubkey(self.node_key), _pubkey(self.provider_authority), self.gpus, self.price_per_gpu_hour)


@dataclass(frozen=True, slots=True)
class Placement:
    """A decision to run `request` on these shares, in assignment order."""

    request: LeaseRequest
    shares: tuple[PlacedShare, ...]

    @property
    def lease(self) -> str:
        return self.request.lease

    @property
    def node_keys(self) -> tuple[Address, ...]:
        return tuple(s.node_key for s in self.shares)

    def sdk_shares(self) -> list[Share]:
        return [s.to_sdk() for s in self.shares]


class NotPlaced:
    """No qualifying placement now; `reason` says why, for the API and the logs.

    Working out the reason walks every node of the requested model, which costs far more
    than the decision: it is done when `reason` is first read (from the fleet as it is
    then), so a waiting lease retried on every fleet change does not pay for it each time.
    """

    __slots__ = ("_explain", "_reason", "request")

    def __init__(self, request: LeaseRequest, reason: str | Callable[[], str]) -> None:
        self.request = request
        self._reason = reason if isinstance(reason, str) else None
        self._explain = None if isinstance(reason, str) else reason

    @property
    def reason(self) -> str:
        if self._reason is None:
            assert self._explain is not None
            self._reason, self._explain = self._explain(), None
        return self._reason

    def __repr__(self) -> str:
        return f"NotPlaced(lease={self.request.lease!r}, reason={self.reason!r})"
