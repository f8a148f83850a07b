"""Dispatch: every node of a placed lease gets its share and the lease's current job (again after
its worker reconnects: a worker acknowledges a job it has), and is told when a top-up moves the
lease's end. A job with secrets goes to each node with those the client sealed to it; when the
client gives them later (the API's secrets route), the node gets the job again, now with them; so
with the lease's checkpoint key, which the client seals to each node (the checkpoint-key route)."""

from __future__ import annotations

import asyncio

import asyncpg

from coordinator.checkpoints import CheckpointStore
from coordinator.db import jobs
from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from coordinator.gateway import NodeOffline
from coordinator.jobs import job_over
from coordinator.keys import NodeKey
from coordinator.state import Shared, WorkerLink
from gpunet import logs
from gpunet.logs import get_logger
from gpunet.protocol import JOB_ENDED, ClusterPeer, LeaseEnd
from gpunet.protocol import Dispatch as DispatchMessage

__all__ = ["Dispatch"]

log = get_logger("gpunet.coordinator.dispatch")


class Dispatch:
    def __init__(
        self,
        pool: asyncpg.Pool,
        shared: Shared,
        link: WorkerLink,
        *,
        cluster_port: int,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        self.pool, self.shared, self.link, self.cluster_port = pool, shared, link, cluster_port
        self.checkpoints = checkpoints
        self.dispatched_job: dict[str, int] = {}  # lease -> the job number `shared.dispatched` is about
        self.ends_sent: dict[tuple[str, NodeKey], int] = {}  # (lease, node) -> the lease end it was last told
        self.unreadable: set[tuple[str, str]] = set()  # (lease, stored spec) already said to be unreadable
        self.cluster_sent: dict[str, list[ClusterPeer]] = {}  # lease -> where its nodes were when last told
        self.refusals_read = False  # this term has read the shares refused in earlier ones (`step`)

    def reconnected(self, node_key: NodeKey) -> None:
        """A worker reconnected: it is given its leases' jobs again (it ignores one it still runs)."""
        self.shared.give_again([node_key])

    async def step(self) -> None:
        dispatched = self.shared.dispatched
        async with self.pool.acquire() as conn:
            if not self.refusals_read:
                # A share its node refused in an earlier term (a restart, another replica) is not given
                # to it again, and moves: its refusal is in the faults, this term's memory starts empty.
                for lease, node_key in await ledger.refused_shares(conn):
                    self.shared.failovers.setdefault(lease, set()).add(node_key)
                self.refusals_read = True
            leases: dict[str, list[ledger.ActiveShare]] = {}
            for share in await ledger.active_shares(conn):
                leases.setdefault(share.lease, []).append(share)
            for lease in self.dispatched_job.keys() - leases.keys():  # ended, closed: forget what was sent
                del self.dispatched_job[lease]
                self.cluster_sent.pop(lease, None)
            for key in [k for k in self.ends_sent if k[0] not in leases]:
                del self.ends_sent[key]
            for lease, shares in leases.items():
                if lease in self.shared.ending:
                    continue
                try:
                    job = await jobs.current_job(conn, lease)
                except jobs.UnreadableJob as e:
                    # stored under older rules than this coordinator's (a name reserved since, a Ray
                    # job without its token): its lease waits for the client's next job, said once;
                    # every other lease's dispatch goes on
                    if (lease, e.spec) not in self.unreadable:
                        self.unreadable.add((lease, e.spec))
                        log.warning("job.unreadable", lease=lease, job=e.number, error=str(e))
                    continue
                if job is None:
                    continue
                if self.dispatched_job.get(lease) != job.number:  # the lease's next job: every node gets it
                    dispatched[lease] = set()
                    self.dispatched_job[lease] = job.number
                given = dispatched.setdefault(lease, set())
                await self._tell_lease_end(lease, given, shares[0].ends_at)
                await self._dispatch(conn, lease, shares, job, given)

    @logs.scoped
    async def _dispatch(
        self, conn: Connection, lease: str, shares: list[ledger.ActiveShare], job: jobs.Job, given: set[NodeKey]
    ) -> None:
        logs.bind(lease=lease)
        # a share leaving a draining node is not given its job again (it was cancelled there)
        # (nor a node the scheduler already moved the share away from, before the indexer shows it)
        keys = [s.node_key for s in shares]
        if not all(self.link.online(k) for k in keys):
            return  # a cluster job needs every peer's address; a single one its node
        # how the nodes reach each other (by rank): each one's advertised address and cluster ports;
        # MASTER_PORT is the first of rank 0's (`cluster_port` for an older worker that says none)
        reach = [(self.link.host(k), self.link.cluster_ports(k)) for k in keys] if len(keys) > 1 else []
        peers = [f"{host}:{ports.first if ports else self.cluster_port}" for host, ports in reach]
        cluster = [ClusterPeer(host=host.strip("[]"), ports=ports) for host, ports in reach]
        if job.spec.ray and self.cluster_sent.get(lease, cluster) != cluster:
            # a node of the Ray cluster was replaced: every node hears where the others are now (the
            # head moved: the others' Ray nodes join the new one)
            log.info("ray.cluster_moved", head=peers[0] if peers else None)  # the lease: bound above
            given.clear()
        self.cluster_sent[lease] = cluster
        reserved = self.shared.scheduler.reservations.get(lease)
        # a node whose share is to move (lost, or it refused the share: it lacks the GPUs) is not given
        # it again, after a reconnect either: a refusing node would refuse (and be judged) once per session
        moving = self.shared.failovers.get(lease, set())
        todo = [
            s
            for s in shares
            if s.node_key not in given
            and s.node_key not in moving
            and (lease, s.node_key) not in self.shared.drains
            and (reserved is None or s.node_key in reserved.node_keys)
        ]
        if not todo:
            return
        asks = self.shared.asks_to_give_again  # before reading what the messages carry
        restores = await jobs.checkpoints_of(conn, lease)  # each rank restores its own
        sealed_keys = await jobs.sealed_checkpoint_keys(conn, lease)
        holders = await jobs.rank_holders(conn, lease)  # a node restores its own rank's checkpoint
        stored = set(await asyncio.to_thread(self.checkpoints.ranks, lease)) if self.checkpoints else set()
        sealed = await jobs.sealed_secrets(conn, lease, job.number) if job.spec.secrets else {}
        states = await jobs.job_states(conn, lease, job.number)
        over = job_over(states, keys)
        ends_at = shares[0].ends_at
        for s in todo:
            # a node that ran the job to its end (before its agent restarted) holds the share without
            # running it again; so does one that takes a share over after the end
            ended = over or states.get(s.node_key) in JOB_ENDED
            message = DispatchMessage(
                lease=lease,
                gpus=s.gpus,
                job=job.spec,
                job_number=job.number,
                job_ended=ended,
                ends_at=ends_at,
                rank=s.rank,
                world_size=len(shares),
                peers=peers,
                cluster=cluster,
                restore=restores.get(s.rank, []),
                epoch=s.assigned_by,
                share_epoch=s.epoch,
                checkpoint_key=sealed_keys.get(str(s.node_key)),  # only the key sealed to this node
                checkpoint_stored=s.rank in stored,
                checkpoint_signers=holders.get(s.rank, []),
                secrets=sealed.get(str(s.node_key), {}),  # only ciphertext sealed to this node
            )
            try:
                await self.link.send(s.node_key, message)
            except NodeOffline:
                continue
            if self.shared.asks_to_give_again == asks:  # else the next step sends it again (acknowledged)
                given.add(s.node_key)
            self.ends_sent[(lease, s.node_key)] = ends_at
            log.info(
                "job.dispatched",  # the lease: bound above
                job=job.number,
                ended=ended,
                node=s.node_key,
                rank=s.rank,
                shares=len(shares),
                restore_files=len(message.restore),
            )

    async def _tell_lease_end(self, lease: str, nodes: set[NodeKey], ends_at: int) -> None:
        """A top-up moved the lease's end: the nodes holding its share bill until the new one."""
        for node_key in nodes:
            if self.ends_sent.get((lease, node_key), ends_at) == ends_at:
                continue
            try:
                await self.link.send(node_key, LeaseEnd(lease=lease, ends_at=ends_at))
            except NodeOffline:
                continue  # its next dispatch, after it reconnects, carries the end
            self.ends_sent[(lease, node_key)] = ends_at
            log.info("lease.end_moved", lease=lease, node=node_key, ends_at=ends_at)
