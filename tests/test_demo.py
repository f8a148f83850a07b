"""The README's demo story runs to the end against a real gpunet-localnet, and balances."""

from __future__ import annotations

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from gpunet.demo import Story


async def test_the_demo_story_runs_and_every_token_is_accounted_for(node) -> None:
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        story = Story(client)
        assert await story.run() is True
        assert set(story.paid) == {"ada", "bob", "cyd"} and all(v > 0 for v in story.paid.values())
