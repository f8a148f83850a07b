"""The read API's queries behind the explorer's pages, under a few concurrent clients: each client
asks every query in turn, `rounds` times, over its own keep-alive connection; the latency of each
answer (request sent to body read), per query."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx
from solders.pubkey import Pubkey

from gpunet.pda import node_pda

PAGE_ROWS = 50  # a page of a list, as the explorer shows it


def page_queries(lease: Pubkey, provider: Pubkey, node_key: Pubkey, settlements: int) -> dict[str, str]:
    """What the lease, provider, node and settlements pages ask the ledger, by the page that asks."""
    last = max(0, settlements - PAGE_ROWS)
    return {
        "lease: /leases/{lease}": f"/leases/{lease}",
        "lease: /settlements?lease=": f"/settlements?lease={lease}&limit={PAGE_ROWS}",
        "lease: /events?lease=": f"/events?lease={lease}&limit=100",
        "provider: /providers/{p}": f"/providers/{provider}",
        "provider: /settlements?provider=": f"/settlements?provider={provider}&limit={PAGE_ROWS}",
        "provider: /nodes?provider=": f"/nodes?provider={provider}",
        "node: /nodes/{node}": f"/nodes/{node_pda(node_key)}",
        "node: /settlements?node=": f"/settlements?node={node_pda(node_key)}&limit={PAGE_ROWS}",
        "settlements: last page (offset)": f"/settlements?limit={PAGE_ROWS}&offset={last}",
    }


def audit_queries(lease: Pubkey, provider: Pubkey) -> dict[str, str]:
    """The verdicts the lease and provider pages end with: the ledger checked against the chain (they
    read the chain, so they are measured apart, not to hold the ledger's queries up in the figures)."""
    return {
        "lease: /audit/leases/{lease}": f"/audit/leases/{lease}",
        "provider: /audit/providers/{p}": f"/audit/providers/{provider}",
    }


@dataclass
class Latencies:
    seconds: dict[str, list[float]]
    errors: dict[str, str] = field(default_factory=dict)  # query -> the first non-200 answer


async def measure_api(api_url: str, asked: dict[str, str], clients: int, rounds: int) -> Latencies:
    result = Latencies({name: [] for name in asked})  # rows in the order asked

    async def client(k: int) -> None:
        names = list(asked)
        async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
            for r in range(rounds):
                for i in range(len(names)):
                    name = names[(i + k + r) % len(names)]  # the clients ask different queries at once
                    t0 = time.perf_counter()
                    response = await http.get(asked[name])
                    elapsed = time.perf_counter() - t0
                    if response.status_code != 200:
                        result.errors.setdefault(name, f"{response.status_code} {response.text[:120]}")
                        continue
                    result.seconds[name].append(elapsed)

    await asyncio.gather(*(client(k) for k in range(clients)))
    return result
