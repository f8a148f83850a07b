"""The SDK reads every page of a list the coordinator serves (its JSON API pages every list), and
refuses a next page that goes nowhere rather than looping. A fake coordinator at the HTTP boundary."""

from __future__ import annotations

import httpx
import pytest
from solders.keypair import Keypair

from gpunet import audit
from gpunet.jobs import CoordinatorError

SIGNATURE = Keypair().sign_message(b"slash")


def _serving(monkeypatch: pytest.MonkeyPatch, items: list[dict], step: int | None = None) -> list[str]:
    """The coordinator's /slashes/{signature}/evidence, one item a page; the offsets asked, in order."""
    asked: list[str] = []
    real = httpx.AsyncClient

    def answer(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", "0"))
        asked.append(str(offset))
        following = offset + 1 if offset + 1 < len(items) else None
        if step is not None:
            following = step
        page = {"limit": 1, "offset": offset, "next_offset": following, "items": items[offset : offset + 1]}
        return httpx.Response(200, json={"signature": str(SIGNATURE), **page})

    monkeypatch.setattr(audit.httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(answer), **kw))
    return asked


async def test_every_page_of_a_transaction_s_evidence_is_read(monkeypatch) -> None:
    items = [{"node": "a", "evidence": {"n": 1}}, {"node": "b", "evidence": None}, {"node": "c", "evidence": {}}]
    asked = _serving(monkeypatch, items)
    assert await audit._served_evidence("http://coordinator", SIGNATURE) == items
    assert asked == ["0", "1", "2"]


@pytest.mark.parametrize("step", [0, -1])
async def test_a_next_page_that_goes_nowhere_is_refused(monkeypatch, step) -> None:
    _serving(monkeypatch, [{"node": "a"}, {"node": "b"}], step=step)
    with pytest.raises(CoordinatorError, match="goes nowhere"):
        await audit._served_evidence("http://coordinator", SIGNATURE)
