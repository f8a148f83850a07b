"""/web/rewards: every epoch's reward tree the coordinator built; /web/rewards/{epoch}: one epoch,
its part for each pool, the uptime samples behind it per node, and its root rebuilt from those
inputs here and compared with the root on chain (what `gpunet rewards audit EPOCH` does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from coordinator.db import rewards
from coordinator.web import page
from coordinator.web.explorer.common import CHAIN_ERRORS, BadAddress, chain_client, error_page, parse_offset
from gpunet.accounts import AccountError, fetch, fetch_config
from gpunet.catalog import gpu_model_name
from gpunet.pda import reward_root_pda
from gpunet.reward_epoch import EpochInputs, epoch_tree

if TYPE_CHECKING:
    import asyncpg

    from coordinator.settings import Settings

__all__ = ["reward_epoch_page", "reward_epochs_page"]

PAGE = 50


def reward_epochs_page(pool: asyncpg.Pool, settings: Settings) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        try:
            offset = parse_offset(request)
        except BadAddress as e:
            return error_page(request, settings, 400, "Bad request", str(e))
        async with pool.acquire() as conn:
            rows = await rewards.epochs(conn, PAGE + 1, offset)
        return page(
            request, "rewards.html", settings, epochs=rows[:PAGE], offset=offset, more=len(rows) > PAGE, size=PAGE
        )

    return handler


def reward_epoch_page(pool: asyncpg.Pool, settings: Settings) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        text = request.path_params["epoch"]
        if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
            return error_page(request, settings, 400, "Bad request", f"{text[:30]!r} is not an epoch number")
        async with pool.acquire() as conn:
            row = await rewards.epoch(conn, int(text))
        if row is None:
            return error_page(
                request, settings, 404, "No such epoch", f"no reward tree for epoch {text}: not ended, or never built"
            )
        inputs = EpochInputs.from_json(row["inputs"])
        rebuilt, on_chain, chain_error = None, None, None
        try:
            async with chain_client(settings) as chain:
                tree = epoch_tree(inputs, (await fetch_config(chain)).io_mint)
                rebuilt = tree.root.hex()
                try:
                    on_chain = bytes((await fetch(chain, reward_root_pda(int(text)), "RewardRoot")).root).hex()
                except AccountError:
                    on_chain = None  # not posted yet, vetoed, or expired and closed
        except CHAIN_ERRORS as e:
            chain_error = f"{type(e).__name__}: {e}"
            tree = None
        samples = {n.provider: n for n in inputs.nodes}
        return page(
            request,
            "reward_epoch.html",
            settings,
            epoch=row,
            inputs=inputs,
            leaves=tree.leaves if tree else [],
            nodes=samples,
            rebuilt=rebuilt,
            on_chain=on_chain,
            chain_error=chain_error,
            model_name=gpu_model_name,
        )

    return handler
