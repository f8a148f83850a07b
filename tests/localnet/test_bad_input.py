"""Bad input gets Agave's JSON-RPC errors and changes nothing."""

from __future__ import annotations

import base64
import json
import urllib.error

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solders.hash import Hash
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from gpunet.testbed import funded_wallet
from tests.conftest import rpc

from .helpers import SOL, confirm, signed


def state(node) -> tuple:
    """What must not change on a rejected request (the slot moves on its own)."""
    txs = node.call("getTransactionCount")["result"]
    return (txs,)


def req(method, params=None, id_=1):
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params if params is not None else []}


def test_protocol_errors(node):
    before = state(node)
    assert rpc(node.url, b"{not json") == {
        "jsonrpc": "2.0",
        "error": {"code": -32700, "message": "Parse error"},
        "id": None,
    }
    assert rpc(node.url, b"[]")["error"]["code"] == -32600
    assert rpc(node.url, b"42")["error"] == {"code": -32600, "message": "Invalid request"}
    assert rpc(node.url, {"id": 1, "method": "getSlot"})["error"]["code"] == -32600  # no "jsonrpc": "2.0"
    assert rpc(node.url, req("noSuchMethod"))["error"] == {"code": -32601, "message": "Method not found"}
    batch = rpc(node.url, [req("getHealth", id_=1), req("noSuchMethod", id_=2), req("getSlot", id_=3)])
    assert [r["id"] for r in batch] == [1, 2, 3]
    assert batch[0]["result"] == "ok" and batch[1]["error"]["code"] == -32601 and isinstance(batch[2]["result"], int)
    assert rpc(node.url, {"jsonrpc": "2.0", "method": "getHealth"}) is None  # a notification gets no answer
    assert state(node) == before


def test_oversized_body_is_refused(node):
    with pytest.raises(urllib.error.HTTPError) as e:
        rpc(node.url, b"[" + b" " * (51 * 1024 * 1024) + b"]", timeout=60)
    assert e.value.code == 413
    e.value.close()
    assert node.call("getHealth")["result"] == "ok"


@pytest.mark.parametrize(
    ("method", "params", "code", "message"),
    [
        ("getBalance", [], -32602, "`params` should have at least 1 argument(s)"),
        ("getBalance", [1], -32602, "Invalid params: invalid type: integer `1`, expected a string."),
        ("getBalance", ["not-a-key"], -32602, "Invalid param: Invalid"),
        ("getBalance", ["abc"], -32602, "Invalid param: WrongSize"),
        ("getAccountInfo", ["11111111111111111111111111111111", {"encoding": "base64+zstd"}], -32602, None),
        ("getAccountInfo", ["11111111111111111111111111111111", {"encoding": "nope"}], -32602, None),
        ("getAccountInfo", ["11111111111111111111111111111111", {"commitment": "nope"}], -32602, None),
        ("getSlot", [{"minContextSlot": 10**12}], -32016, "Minimum context slot has not been reached"),
        ("sendTransaction", ["!!!", {"encoding": "base64"}], -32602, "invalid base64 encoding: InvalidByte(0, 33)"),
        ("sendTransaction", [base64.b64encode(b"\x01garbage").decode(), {"encoding": "base64"}], -32602, None),
        (
            "sendTransaction",
            ["abc", {"encoding": "hex"}],
            -32602,
            "unsupported encoding: hex. Supported encodings: base58, base64",
        ),
        ("getSignatureStatuses", [["x"]], -32602, None),
        (
            "getSignaturesForAddress",
            ["11111111111111111111111111111111", {"limit": 1001}],
            -32602,
            "Invalid limit; max 1000",
        ),
        ("getBlockTime", [10**12], -32004, "Block not available for slot 1000000000000"),
        ("getMultipleAccounts", [["11111111111111111111111111111111"] * 101], -32602, None),
        ("requestAirdrop", ["11111111111111111111111111111111"], -32602, None),
        ("getTransaction", ["1" * 88, {"encoding": "yaml"}], -32602, None),
    ],
)
def test_wrong_params(node, method, params, code, message):
    before = state(node)
    resp = node.call(method, params)
    assert resp["error"]["code"] == code, resp
    if message is not None:
        assert resp["error"]["message"] == message
    assert state(node) == before


async def test_rejected_transactions_change_nothing(node):
    async with AsyncClient(node.url) as client:
        alice = await funded_wallet(client, 2)
        bob = Keypair()
        ix = transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=SOL))
        before = (state(node), (await client.get_balance(alice.pubkey())).value)

        # Unknown / expired blockhash: Agave's preflight error.
        stale = await signed(client, alice, [ix], blockhash=Hash.new_unique())
        resp = node.call("sendTransaction", [base64.b64encode(bytes(stale)).decode(), {"encoding": "base64"}])
        assert resp["error"]["code"] == -32002
        assert resp["error"]["message"] == "Transaction simulation failed: Blockhash not found"
        assert resp["error"]["data"]["err"] == "BlockhashNotFound"
        sim = node.call("simulateTransaction", [base64.b64encode(bytes(stale)).decode(), {"encoding": "base64"}])
        assert sim["result"]["value"]["err"] == "BlockhashNotFound"
        # skipPreflight: accepted and dropped, as a validator drops it.
        resp = node.call(
            "sendTransaction", [base64.b64encode(bytes(stale)).decode(), {"encoding": "base64", "skipPreflight": True}]
        )
        assert resp["result"] == str(stale.signatures[0])
        assert (await client.get_signature_statuses([stale.signatures[0]])).value[0] is None

        # A forged signature.
        forged = await signed(client, alice, [ix])
        raw = bytearray(bytes(forged))
        raw[10] ^= 0xFF
        resp = node.call("sendTransaction", [base64.b64encode(bytes(raw)).decode(), {"encoding": "base64"}])
        assert resp["error"] == {"code": -32003, "message": "Transaction signature verification failure"}

        # Too many lamports: the instruction error and the logs come back in the preflight error.
        greedy = await signed(
            client,
            alice,
            [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=100 * SOL))],
        )
        with pytest.raises(RPCException) as e:
            await client.send_raw_transaction(bytes(greedy))
        resp = node.call("sendTransaction", [base64.b64encode(bytes(greedy)).decode(), {"encoding": "base64"}])
        err = resp["error"]
        assert err["code"] == -32002
        assert err["message"].startswith("Transaction simulation failed: Error processing Instruction 0: ")
        assert err["data"]["err"] == {"InstructionError": [0, {"Custom": 1}]}
        assert any("insufficient lamports" in line for line in err["data"]["logs"])
        assert set(err["data"]) >= {"err", "logs", "accounts", "unitsConsumed", "returnData"}
        assert "Transaction simulation failed" in str(e.value)

        assert (state(node), (await client.get_balance(alice.pubkey())).value) == before

        # Refused by preflight means not processed: once the payer can pay, the same bytes go through.
        await confirm(client, (await client.request_airdrop(alice.pubkey(), 200 * SOL)).value)
        resp = node.call("sendTransaction", [base64.b64encode(bytes(greedy)).decode(), {"encoding": "base64"}])
        assert resp["result"] == str(greedy.signatures[0])
        assert (await client.get_balance(bob.pubkey())).value == 100 * SOL
        before = (state(node), (await client.get_balance(alice.pubkey())).value)

        # Sent once, then refused as already processed.
        ok = await signed(client, alice, [ix])
        enc = base64.b64encode(bytes(ok)).decode()
        assert node.call("sendTransaction", [enc, {"encoding": "base64"}])["result"] == str(ok.signatures[0])
        dup = node.call("sendTransaction", [enc, {"encoding": "base64"}])
        assert dup["error"]["code"] == -32002
        assert dup["error"]["data"]["err"] == "AlreadyProcessed"
        assert (await client.get_balance(bob.pubkey())).value == 101 * SOL

        # A failing transaction sent with skipPreflight is recorded with its error and pays the fee.
        sig = node.call(
            "sendTransaction",
            [
                base64.b64encode(
                    bytes(
                        await signed(
                            client,
                            alice,
                            [
                                transfer(
                                    TransferParams(
                                        from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=10_000 * SOL
                                    )
                                )
                            ],
                        )
                    )
                ).decode(),
                {"encoding": "base64", "skipPreflight": True},
            ],
        )["result"]
        tx = node.call("getTransaction", [sig, {"encoding": "json"}])["result"]
        assert tx["meta"]["err"] == {"InstructionError": [0, {"Custom": 1}]}
        assert tx["meta"]["fee"] == 5000
        assert tx["meta"]["postBalances"][0] == tx["meta"]["preBalances"][0] - 5000
        status = node.call("getSignatureStatuses", [[sig]])["result"]["value"][0]
        assert status["err"] == {"InstructionError": [0, {"Custom": 1}]} and status["confirmationStatus"] == "finalized"


def test_simulate_transaction(node):
    async def go():
        async with AsyncClient(node.url) as client:
            alice = await funded_wallet(client, 2)
            bob = Keypair()
            tx = await signed(
                client,
                alice,
                [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=SOL))],
            )
            enc = base64.b64encode(bytes(tx)).decode()
            before = state(node)
            sim = node.call(
                "simulateTransaction",
                [
                    enc,
                    {
                        "encoding": "base64",
                        "sigVerify": True,
                        "accounts": {"encoding": "base64", "addresses": [str(bob.pubkey())]},
                    },
                ],
            )["result"]
            assert sim["value"]["err"] is None
            assert sim["value"]["accounts"][0]["lamports"] == SOL
            assert state(node) == before
            assert (await client.get_balance(bob.pubkey())).value == 0
            stale = await signed(
                client,
                alice,
                [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=SOL))],
                blockhash=Hash.new_unique(),
            )
            sim = node.call(
                "simulateTransaction",
                [base64.b64encode(bytes(stale)).decode(), {"encoding": "base64", "replaceRecentBlockhash": True}],
            )["result"]["value"]
            assert sim["err"] is None and sim["replacementBlockhash"]["blockhash"]

    import asyncio

    asyncio.run(go())


async def test_pubsub_bad_requests(node):
    import websockets

    async with websockets.connect(node.ws_url) as ws:
        await ws.send("{nope")
        assert json.loads(await ws.recv())["error"] == {"code": -32700, "message": "Parse error"}
        await ws.send(json.dumps(req("fooSubscribe")))
        assert json.loads(await ws.recv())["error"]["code"] == -32601
        await ws.send(json.dumps(req("accountSubscribe", ["not-a-key"])))
        assert json.loads(await ws.recv())["error"] == {
            "code": -32602,
            "message": "Invalid Request: Invalid pubkey provided",
        }
        await ws.send(json.dumps(req("logsSubscribe", [{"mentions": ["11111111111111111111111111111111"] * 2}])))
        assert json.loads(await ws.recv())["error"]["message"] == "Invalid Request: Only 1 address supported"
        await ws.send(json.dumps(req("slotUnsubscribe", [987654])))
        assert json.loads(await ws.recv())["error"] == {"code": -32602, "message": "Invalid subscription id."}
        await ws.send(json.dumps(req("slotSubscribe", id_=7)))
        ack = json.loads(await ws.recv())
        assert ack["id"] == 7 and isinstance(ack["result"], int)
        await ws.send(json.dumps(req("slotUnsubscribe", [ack["result"]], id_=8)))
        while (msg := json.loads(await ws.recv())).get("id") != 8:
            assert msg["method"] == "slotNotification"
        assert msg["result"] is True
    # An oversized frame closes that connection only.
    async with websockets.connect(node.ws_url, max_size=None) as ws:
        with pytest.raises(websockets.ConnectionClosed):
            await ws.send("x" * (2 << 20))
            await ws.recv()
    assert node.call("getHealth")["result"] == "ok"
