"""`gpunet lease watch LEASE [--auto-top-up MAX_IO]`: follows a lease (its state, end, time left and
escrow runway, as `lease show` computes them) and, with --auto-top-up, keeps it running: when the
time it has left falls under --runway, it tops the escrow up through `lease top-up`'s path, never
beyond MAX_IO in all over the watch. Given the job's secrets, it seals them, and the lease's
checkpoint key, to any node the lease moves to, as `lease status --follow` does."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.markup import escape
from solana.rpc.async_api import AsyncClient

from gpunet.accounts import fetch
from gpunet.amounts import escrow_for, format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    DEFAULT_KEYPAIR,
    BadInput,
    CoordinatorOpt,
    JsonOpt,
    KeypairOpt,
    NotEnoughFunds,
    Session,
    UrlOpt,
    duration_arg,
    pubkey_arg,
)
from gpunet.cli.lease import (
    LeaseArg,
    SecretFileOpt,
    SecretOpt,
    lease_summary,
    secrets_arg,
    top_up_escrow,
)
from gpunet.client import TransactionExpired, TransactionFailed
from gpunet.exits import Exit
from gpunet.jobs import CoordinatorError, job_view, seal_missing_checkpoint_key, seal_missing_secrets

__all__ = ["TopUp", "plan_top_up", "time_left", "watch"]

RUNNING = ("Open", "Active")  # a lease in any other state burns nothing more: the watch ends
REFILL = 1.5  # a top-up brings the time left to this many runways: one top-up per half runway, not per check


@dataclass(frozen=True)
class TopUp:
    """What one top-up buys: the seconds it adds, the IO base units they escrow, and whether the cap
    cut it short of what the runway wanted (then no later top-up can follow)."""

    extra_seconds: int
    amount: int
    capped: bool


def plan_top_up(left: int, runway: int, price_per_gpu_hour: int, gpus: int, topped_up: int, cap: int) -> TopUp | None:
    """The top-up a lease with `left` seconds to run needs to keep `runway` (None: it has them):
    enough for REFILL x runway, at its max price (the program's escrow_for, rounded up), within what
    the cap leaves (`cap - topped_up`, base units). Exact integers: the amount never passes the cap."""
    if left >= runway:
        return None
    want = int(runway * REFILL) - left
    burn = price_per_gpu_hour * gpus
    room = max(cap - topped_up, 0)
    # The most seconds whose escrow fits the room: ceil(burn x s / 3600) <= room <=> s <= room x 3600 // burn.
    fits = room * 3600 // burn if burn else want
    extra = min(want, fits)
    return TopUp(extra, escrow_for(price_per_gpu_hour, gpus, extra), extra < want)


def time_left(summary: dict[str, Any]) -> int | None:
    """How long the lease keeps running if nobody acts: to its end, or until its escrow runs dry if
    that comes first. None while it has not started (an open lease's end counts from placement)."""
    if summary["status"] != "Active":
        return None
    spans = [summary["seconds_to_end"], summary["escrow_runway_seconds"]]
    return min((s for s in spans if s is not None), default=None)


def watch(
    lease: LeaseArg,
    auto_top_up: Annotated[
        str | None,
        typer.Option(
            "--auto-top-up",
            metavar="MAX_IO",
            help="Keep the lease running: top its escrow up (signed with your wallet, which must be the lease's "
            "client) whenever its time left falls under --runway, spending at most MAX_IO in all over this watch.",
        ),
    ] = None,
    runway: Annotated[
        str,
        typer.Option(
            "--runway",
            help=f"With --auto-top-up: the least time left to keep, e.g. 30m, 2h; under it, a top-up brings it "
            f"to {REFILL:g} x this.",
        ),
    ] = "1h",
    every: Annotated[str, typer.Option("--every", help="How often to read the lease, e.g. 10s, 1m.")] = "10s",
    secret: SecretOpt = None,
    secret_file: SecretFileOpt = None,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Follow a lease until it stops running: its state, end, time left and escrow runway.

    A line for each change (--json: one JSON object per line, a "lease" sample at
    every read and an "event" for each change). Time left is the time to the
    lease's end, or until its escrow runs dry if that comes first.

    With --auto-top-up MAX_IO, whenever the time left falls under --runway it tops
    the escrow up to 1.5 x the runway, as `gpunet lease top-up` does (signed by
    your wallet, which must be the lease's client), never spending more than
    MAX_IO in all over the watch, in exact base units: at the cap it tops up what
    still fits, says so and tops up no more. A top-up the chain refuses (a lease
    past its end, say) is reported once and not tried again (exit 1 when the lease
    then closes).

    With the job's secrets (--secret, --secret-file) it seals them, and the
    lease's checkpoint key, to every node the lease moves to, as `gpunet lease
    status --follow --secret` does."""

    async def command(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        cap = parse_io(auto_top_up) if auto_top_up is not None else None
        keep, period = duration_arg(runway), duration_arg(every)
        secrets = secrets_arg(secret, secret_file)
        w = _Watch(s, address, cap, keep, coordinator, secrets)
        async with s.client() as client:
            first = await fetch(client, address, "Lease")
            if cap is not None and first.client != s.wallet.pubkey():
                raise BadInput(
                    f"lease {address} belongs to {first.client}: only the lease's client can top it up "
                    "(sign with that wallet, -k, or watch without --auto-top-up)"
                )
            if not s.json_output:  # one status line, rewritten at every read
                w.live = s.err.status("reading the lease…")
                w.live.start()
            try:
                while await w.check(client):
                    await asyncio.sleep(period)
            finally:
                if w.live is not None:
                    w.live.stop()
        if w.failed:
            raise typer.Exit(int(Exit.REFUSED))

    Session(url, keypair, json_output).run(command)


class _Watch:
    """One watch's state between reads: what it saw last, what it topped up, whether it may go on."""

    def __init__(
        self, s: Session, address: Any, cap: int | None, runway: int, coordinator: str, secrets: dict[str, str]
    ) -> None:
        self.s, self.address, self.cap, self.runway = s, address, cap, runway
        self.coordinator, self.secrets = coordinator, secrets
        self.topped_up = 0  # IO base units, over the whole watch
        self.stopped = False  # no more top-ups: the cap is reached, or one was refused
        self.failed = False  # a top-up was refused
        self.checks = 0
        self.last: dict[str, Any] | None = None
        self.coordinator_error: str | None = None
        self.live: Any = None  # the status line (rich), None with --json

    async def check(self, client: Any) -> bool:
        """One read of the lease (and a top-up or a sealing if due); False once it is over."""
        self.checks += 1
        account = await fetch(client, self.address, "Lease")
        summary = await lease_summary(client, self.address, account)
        left = time_left(summary)
        self._sample(summary, left)
        if summary["status"] not in RUNNING:
            self._event(
                "ended",
                f"lease {summary['status'].lower()}: the watch ends"
                + (f" ({format_io(self.topped_up)} topped up)" if self.cap is not None else ""),
                status=summary["status"],
                topped_up=self.topped_up,
                checks=self.checks,
            )
            return False
        if self.cap is not None and not self.stopped and left is not None:
            await self._top_up(client, account, left)
        if self.secrets:
            await self._seal(client)
        if self.live is not None:
            self.live.update(escape(self._line(summary, left)))
        return True

    def _sample(self, summary: dict[str, Any], left: int | None) -> None:
        before, self.last = self.last, summary
        if self.s.json_output:
            sample = {
                "event": "lease",
                "checks": self.checks,
                **{k: summary[k] for k in ("status", "ends_at", "seconds_to_end", "escrow_runway_seconds")},
                "time_left_seconds": left,
                **{k: summary[k] for k in ("escrow_balance", "burn_per_hour", "deposited")},
                "nodes": [str(a["node_key"]) for a in summary["assignments"]],
                "topped_up": self.topped_up,
                "cap": self.cap,
            }
            print(json.dumps(sample), flush=True)
            return
        if before is None:
            self._say(self._line(summary, left) + self._plan())
            return
        if before["status"] != summary["status"]:
            self._say(f"lease {before['status']} -> {summary['status']}")
        nodes = {str(a["node_key"]) for a in summary["assignments"]}
        if before["status"] == summary["status"] == "Active" and nodes != {
            str(a["node_key"]) for a in before["assignments"]
        }:
            self._say(f"the lease moved: its nodes are now {', '.join(sorted(nodes))}")

    def _plan(self) -> str:
        if self.cap is None:
            return ""
        return f"; auto top-up keeps {clock.span(self.runway)} of time left, at most {format_io(self.cap)} in all"

    def _line(self, summary: dict[str, Any], left: int | None) -> str:
        status = summary["status"]
        if status != "Active":
            return f"lease {status}"
        runway = summary["escrow_runway_seconds"]
        text = (
            f"lease Active: ends {clock.until(summary['ends_at'])}, time left {clock.span(left)}, escrow "
            f"{format_io(summary['escrow_balance'])} at {format_io(summary['burn_per_hour'])}/hour "
            f"(runway {clock.span(runway) if runway is not None else '-'})"
        )
        if self.cap is not None:
            text += f", topped up {format_io(self.topped_up)} of {format_io(self.cap)}"
        return text

    async def _top_up(self, client: Any, account: Any, left: int) -> None:
        assert self.cap is not None
        terms = account.terms
        plan = plan_top_up(left, self.runway, terms.max_price_per_gpu_hour, terms.gpu_count, self.topped_up, self.cap)
        if plan is None:
            return
        if plan.extra_seconds > 0:
            if self.live is not None:
                self.live.stop()  # the top-up shows its own spinner: rich runs one at a time
            try:
                sig, amount = await top_up_escrow(self.s, client, self.address, account, plan.extra_seconds)
            except (TransactionFailed, TransactionExpired, NotEnoughFunds) as e:
                self.stopped = self.failed = True
                self._event(
                    "top_up_failed",
                    f"a top-up of {clock.span(plan.extra_seconds)} ({format_io(plan.amount)}) failed: {e}; "
                    "not trying again in this watch",
                    error=str(e),
                    extra_seconds=plan.extra_seconds,
                    amount=plan.amount,
                    signature=str(e.signature) if isinstance(e, TransactionFailed) and e.signature else None,
                )
                return
            finally:
                if self.live is not None:
                    self.live.start()
            self.topped_up += amount
            self._event(
                "top_up",
                f"topped up {format_io(amount)}: {clock.span(plan.extra_seconds)} more "
                f"({format_io(self.topped_up)} of {format_io(self.cap)} so far)",
                extra_seconds=plan.extra_seconds,
                amount=amount,
                topped_up=self.topped_up,
                cap=self.cap,
                signature=str(sig),
            )
            left += plan.extra_seconds
        if plan.capped:
            self.stopped = True
            self._event(
                "cap_reached",
                f"the cap is reached: {format_io(self.topped_up)} of {format_io(self.cap)} topped up; no more "
                f"top-ups, the lease has {clock.span(left)} left"
                + (f" (under the {clock.span(self.runway)} runway)" if left < self.runway else ""),
                topped_up=self.topped_up,
                cap=self.cap,
                time_left_seconds=left,
            )

    async def _seal(self, chain: AsyncClient) -> None:
        """Seals the job's secrets, and the lease's checkpoint key, to any node of the lease that has
        none (a node it moved to)."""
        try:
            view = await job_view(self.coordinator, self.s.wallet, self.address, tail=1)
            sealed = await seal_missing_secrets(
                self.coordinator, chain, self.s.wallet, self.address, self.secrets, view
            )
            keyed = await seal_missing_checkpoint_key(self.coordinator, chain, self.s.wallet, self.address, view)
        except CoordinatorError as e:  # said once per cause; the next read tries again
            if str(e) != self.coordinator_error:
                self.coordinator_error = str(e)
                self._event("secrets_failed", f"cannot seal the secrets now: {e}", error=str(e))
            return
        self.coordinator_error = None
        if sealed:
            self._event("secrets", f"secrets sealed to node(s) {', '.join(sealed)}", sealed_to=sealed)
        if keyed:
            self._event(
                "checkpoint_key", f"the lease's checkpoint key sealed to node(s) {', '.join(keyed)}", sealed_to=keyed
            )

    def _event(self, name: str, text: str, **data: Any) -> None:
        if self.s.json_output:
            print(json.dumps({"event": name, "checks": self.checks, **data}), flush=True)
        else:
            colour = "red" if name.endswith("failed") else "yellow" if name == "cap_reached" else "cyan"
            self._say(text, colour)

    def _say(self, text: str, colour: str = "cyan") -> None:
        when = time.strftime("%H:%M:%S", time.gmtime())
        self.s.out.print(f"[{colour}]{when} {escape(text)}[/]", soft_wrap=True, highlight=False)
