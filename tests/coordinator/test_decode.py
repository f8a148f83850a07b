"""The indexer's fast event decoder (coordinator.indexer.borsh) against the SDK's (anchorpy):
the same values for every event kind the program emits, and both refuse truncated data."""

from __future__ import annotations

import base64

import pytest
from construct import ConstructError

from coordinator.indexer.borsh import event_decoder
from coordinator.indexer.decode import plain
from gpunet.events import decode_events
from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.testbed import Market

INVOKE, SUCCESS = f"Program {PROGRAM_ID} invoke [1]", f"Program {PROGRAM_ID} success"


async def test_fast_decoder_agrees_with_the_sdk_on_every_event_kind(node, market: Market):
    await market.every_event_kind()
    payloads = []
    for sig in market.signatures:
        tx = node.call("getTransaction", [str(sig), {"encoding": "json", "commitment": "confirmed"}])["result"]
        payloads += [
            line[len("Program data: ") :] for line in tx["meta"]["logMessages"] if line.startswith("Program data: ")
        ]
    kinds = set()
    for payload in payloads:
        (sdk,) = decode_events([INVOKE, f"Program data: {payload}", SUCCESS])
        assert event_decoder().decode(base64.b64decode(payload)) == (sdk.name, plain(sdk.data))
        kinds.add(sdk.name)
        raw = base64.b64decode(payload)
        for cut in sorted({9, len(raw) // 2, len(raw) - 1}):
            short = base64.b64encode(raw[:cut]).decode()
            with pytest.raises(ValueError):
                event_decoder().decode(raw[:cut])
            with pytest.raises(ConstructError):  # a StreamError: the data ends inside the event
                decode_events([INVOKE, f"Program data: {short}", SUCCESS])
    # every event in programs/gpunet/src/events.rs but LeaseReclaimed (it needs the lease retention
    # period to pass; programs/gpunet/tests/review.rs has it)
    assert kinds == {e.name for e in load_idl().events} - {"LeaseReclaimed"}
