"""The coordinator's attester transactions: assign a placed lease, move a lost node's share,
slash a provider for a recorded fault, close a lease past its end and finalize it once its last
usage is settled. With a fence (coordinator.leader), each send is first recorded as the leader's
decision under the check that its term still leads: a stale leader is refused before the chain.
Each is safe to retry: a transport failure is retried
with backoff, and before any resend the chain is read to see whether the first attempt landed
(the program would refuse a second assign anyway; reading first turns that into success)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.metrics import Metrics
from coordinator.payers import FeePayers
from gpunet import instructions as ix
from gpunet import staking
from gpunet.accounts import AccountError, chain_clock, fetch, fetch_config
from gpunet.audit import evidence_hash  # the auditors' hash: what goes on chain for a slash
from gpunet.client import InFlight, TransactionExpired
from gpunet.events import decode_events
from gpunet.logs import get_logger
from gpunet.pda import evidence_pda, node_pda, pool_pda, reward_root_pda
from gpunet.rewards import RewardLeaf
from gpunet.tokens import io_account

__all__ = ["Attester", "Intend", "evidence_hash", "require_listed"]

log = get_logger("gpunet.coordinator.attester")

Intend = Callable[[str, str], Awaitable[None]]
"""Records a decision (kind, subject) before it is sent; raises when this process may not decide
(`coordinator.leader.Fence.intend`)."""

TRANSIENT = (SolanaRpcException, httpx.HTTPError, OSError, TransactionExpired)


def require_listed(config: Any, key: Pubkey, keypair_path: object) -> None:
    """Raises AccountError unless `key` is one of the config's attesters. The hint adds it to the
    others (`--add-attester`): replacing the list would cut off a coordinator already running."""
    if key not in list(config.attesters)[: config.attester_count]:
        raise AccountError(
            f"the attester key {key} ({keypair_path}) is not one of the config's attesters; the admin adds it, "
            f"keeping the others, with `gpunet admin update --add-attester {key}`"
        )


class Attester:
    def __init__(
        self,
        client: AsyncClient,
        key: Keypair,
        *,
        payers: FeePayers | None = None,
        attempts: int = 6,
        backoff_s: float = 0.2,
        metrics: Metrics | None = None,
        intend: Intend | None = None,
        sender: InFlight | None = None,
    ) -> None:
        self.client = client
        self.intend = intend
        # The transactions out at once, settlements' included: callers send concurrently, one window.
        self.sender = sender or InFlight(client)
        self.metrics = metrics or Metrics()
        self.key = key
        self.payers = payers or FeePayers(client, key)  # who pays each fee (the attester signs every one)
        self.attempts = attempts
        self.backoff_s = backoff_s

    async def _send(self, instructions: list[Instruction]) -> Signature:
        payer, cosigners = await self.payers.signing()
        return await self.sender.send(payer, instructions, cosigners)

    async def _retry(
        self,
        decision: tuple[str, str],
        send: Callable[[], Awaitable[Signature]],
        landed: Callable[[], Awaitable[bool]],
    ) -> Signature | None:
        """Sends until it lands; None when an earlier attempt turns out to have landed. `decision`
        (kind, subject) is recorded before every send, fenced (see the module's docstring)."""
        for attempt in range(self.attempts):
            try:
                if attempt and await landed():
                    return None
                if self.intend is not None:
                    await self.intend(*decision)
                return await send()
            except TRANSIENT:
                self.metrics.rpc_errors.inc()
                if attempt == self.attempts - 1:
                    raise
                await asyncio.sleep(self.backoff_s * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")

    async def _lease_nodes(self, lease: Pubkey) -> tuple[str, set[Pubkey]]:
        account = await fetch(self.client, lease, "Lease")
        return type(account.status).__name__, {a.node_key for a in list(account.assignments)[: account.node_count]}

    async def assign(self, lease: Pubkey, shares: list[ix.Share]) -> Signature | None:
        """Puts the lease on its nodes, all at once (the program refuses partial placements)."""
        wanted = {s.node_key for s in shares}

        async def landed() -> bool:
            status, nodes = await self._lease_nodes(lease)
            return status == "Active" and nodes == wanted

        return await self._retry(
            ("assign", str(lease)), lambda: self._send([ix.assign_lease(self.key.pubkey(), lease, shares)]), landed
        )

    async def reassign(self, lease: Pubkey, lost_node_key: Pubkey, to: ix.Share) -> Signature | None:
        """Moves the lost node's share of the lease to `to`."""

        async def landed() -> bool:
            _, nodes = await self._lease_nodes(lease)
            return lost_node_key not in nodes and to.node_key in nodes

        return await self._retry(
            ("reassign", f"{lease} {lost_node_key}->{to.node_key}"),
            lambda: self._send([ix.reassign_lease(self.key.pubkey(), lease, lost_node_key, to)]),
            landed,
        )

    async def slash(
        self,
        node_key: Pubkey,
        fault: str,
        evidence: dict[str, Any],
        lease: Pubkey | None = None,
        fault_at: float = 0.0,
    ) -> Signature | None:
        """Slashes the node's provider for `fault`; with `lease`, the client's share goes to its client.
        `fault_at`: when the fault was committed (unix seconds; 0: unknown): a pool's delegators who
        began unbonding after it still pay for a malicious fault, those who left before do not.
        None, sending nothing, when the node is jailed already: one slash per jailing (the program
        refuses a second, and a loop that noticed another fault of the same node must not retry it)."""
        config = await fetch_config(self.client)
        node = await fetch(self.client, node_pda(node_key), "Node")
        if node.jailed:
            log.info("slash.skipped", node=node_key, fault=fault, reason="the node is jailed already")
            return None
        provider = await fetch(self.client, node.provider, "Provider")
        authority = provider.authority
        # The program refuses a fault time ahead of its clock, which may lag this machine's.
        now = await chain_clock(self.client)
        at = min(int(fault_at), now)
        cohorts = None
        if provider.has_pool:
            pool = await fetch(self.client, pool_pda(node.provider), "Pool")
            cohorts = staking.cohorts_reached(pool, config, fault, at, now)
        victim = None
        if lease is not None:
            client = (await fetch(self.client, lease, "Lease")).client
            victim = (lease, io_account(client, config.io_mint))
        digest = evidence_hash(evidence)

        async def landed() -> bool:
            return (await fetch(self.client, node_pda(node_key), "Node")).jailed

        sig = await self._retry(
            ("slash", f"{node_key} {fault}"),
            lambda: self._send(
                [
                    ix.slash_provider(
                        self.key.pubkey(),
                        config.treasury,
                        node_key,
                        authority,
                        fault,
                        digest,
                        victim,
                        fault_at=at,
                        pool_cohorts=cohorts,
                    )
                ],
            ),
            landed,
        )
        self.metrics.slashes.labels(fault).inc()  # sent (or an earlier attempt of it landed)
        landed_sig, event = await self._slash_event(sig, digest)
        # One warning line per slash, naming it in full: money left a supplier's stake.
        log.warning(
            "slash.landed",
            lease=lease,
            node=node_key,
            provider=node.provider,
            wallet=authority,
            fault=fault,
            amount=event.amount if event else None,
            to_treasury=event.to_treasury if event else None,
            to_client=event.to_client if event else None,
            jail_ends_at=event.jail_ends_at if event else None,
            evidence_hash=digest.hex(),
            tx=landed_sig,
        )
        return sig

    async def _slash_event(self, sig: Signature | None, digest: bytes) -> tuple[Signature | None, Any]:
        """The slash's transaction and its ProviderSlashed event (the amount is the program's to
        compute). Without `sig` (an earlier attempt landed, its reply lost) the transaction is the one
        that created the evidence record. (None, None) when the RPC node does not say: the slash
        stands, only its line lacks the figures."""
        try:
            if sig is None:
                found = (await self.client.get_signatures_for_address(evidence_pda(digest), limit=10)).value
                sig = next((f.signature for f in found if f.err is None), None)
            if sig is None:
                return None, None
            tx = (
                await self.client.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)
            ).value
        except TRANSIENT:
            self.metrics.rpc_errors.inc()
            return sig, None
        logs = tx.transaction.meta.log_messages if tx and tx.transaction.meta else None
        event = next((e.data for e in decode_events(logs or []) if e.name == "ProviderSlashed"), None)
        return sig, event

    async def close(self, lease: Pubkey) -> Signature | None:
        """Closes a lease past its end (and grace): its nodes are freed, what their last usage could
        still cost stays in escrow for `finalize`, the rest goes back to its client."""
        config = await fetch_config(self.client)
        account = await fetch(self.client, lease, "Lease")
        nodes = [a.node for a in list(account.assignments)[: account.node_count]]

        async def landed() -> bool:
            return type((await fetch(self.client, lease, "Lease")).status).__name__ in ("Closing", "Closed")

        return await self._retry(
            ("close", str(lease)),
            lambda: self._send(
                [
                    ix.close_lease(
                        self.key.pubkey(), account.client, io_account(account.client, config.io_mint), lease, nodes
                    )
                ],
            ),
            landed,
        )

    async def record_verification(
        self, node_key: Pubkey, tier: int, valid_seconds: float, evidence: dict[str, Any]
    ) -> Signature | None:
        """Records on chain that the node's GPUs passed verification at `tier`, valid for
        `valid_seconds` (at most the config's maximum), with the evidence's hash."""
        config = await fetch_config(self.client)
        node = await fetch(self.client, node_pda(node_key), "Node")
        # a minute short of the maximum: the chain's clock may run a little ahead of this one
        valid_until = int(time.time() + min(valid_seconds, config.max_verification_seconds - 60))
        digest = evidence_hash(evidence)

        async def landed() -> bool:
            return (await fetch(self.client, node_pda(node_key), "Node")).verified_until == valid_until

        return await self._retry(
            ("verification", f"{node_key} tier {tier}"),
            lambda: self._send(
                [
                    ix.record_verification(
                        self.key.pubkey(), node_key, tier, valid_until, digest, bytes(node.spec.inventory_hash)
                    )
                ],
            ),
            landed,
        )

    async def post_reward_root(self, epoch: int, root: bytes, total: int, leaves: int) -> Signature | None:
        """Posts `epoch`'s reward root (gpunet.reward_epoch); None when an earlier attempt landed."""

        async def landed() -> bool:
            return (await self.client.get_account_info(reward_root_pda(epoch))).value is not None

        return await self._retry(
            ("reward_root", str(epoch)),
            lambda: self._send([staking.post_reward_root(self.key.pubkey(), epoch, root, total, leaves)]),
            landed,
        )

    async def claim_reward(self, leaf: RewardLeaf, proof: list[bytes]) -> Signature | None:
        """Cranks a pool's claim of its leaf (anyone may; the attester's payers pay the fee and the
        reward index's rent)."""

        async def landed() -> bool:
            return (await fetch(self.client, pool_pda(leaf.provider), "Pool")).credited_through >= leaf.epoch

        return await self._retry(
            ("reward_claim", f"{leaf.epoch} {leaf.provider}"),
            lambda: self._send([staking.claim_reward(self.key.pubkey(), leaf, proof)]),
            landed,
        )

    async def finalize(self, lease: Pubkey) -> Signature | None:
        """Ends a closing lease whose usage is settled: its fees go to the treasury, the vault's rest to the client."""
        config = await fetch_config(self.client)
        account = await fetch(self.client, lease, "Lease")

        async def landed() -> bool:
            return type((await fetch(self.client, lease, "Lease")).status).__name__ == "Closed"

        return await self._retry(
            ("finalize", str(lease)),
            lambda: self._send(
                [
                    ix.finalize_lease(
                        self.key.pubkey(),
                        config.treasury,
                        account.client,
                        io_account(account.client, config.io_mint),
                        lease,
                    )
                ],
            ),
            landed,
        )
