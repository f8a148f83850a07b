"""The wallet app: the client's page (/web/app), the supplier's (/web/app/supplier) and the token
holder's (/web/app/stake: co-staking), and the JSON endpoints their TypeScript module (web/src) calls
under /web/api/.

Transactions are built here with the SDK's builders and returned unsigned; the page decodes each one
with @solana/kit and gpunet's IDL (bundled into wallet.js, so under its published hash; also served at
/web/api/idl for other tools) and checks it against its own form before the wallet is asked
(web/src/check.ts), so a coordinator that slips in an instruction or a writable
account is refused in the page. Signed transactions come back to /web/api/submit, which relays them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey
from solders.signature import Signature
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from coordinator.web.app.actions import FormError, build
from coordinator.web.app.relay import BadTransaction, confirm, decode_signed, relay, unsigned
from coordinator.web.app.state import lease_state, stake_state, wallet_state
from gpunet import catalog
from gpunet.accounts import AccountError
from gpunet.amounts import u64_json
from gpunet.client import TransactionFailed
from gpunet.idl import idl_json
from gpunet.json_input import NotJson, parse_json
from gpunet.limits import ANY
from gpunet.protocol import JobSpec, job_message
from gpunet.tokens import IO_DECIMALS

if TYPE_CHECKING:
    import asyncpg

    from coordinator.settings import Settings

__all__ = ["app_routes"]

MAX_BODY = 64 * 1024
LIVE_POLL_SECONDS = 1.0
LIVE_STREAM_SECONDS = 120.0


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _refused(e: TransactionFailed) -> JSONResponse:
    """A program's refusal, named from the SDK's error table, with the program's own log lines."""
    found = e.program_error
    reason = str(found) if found else next((line for line in e.logs if "Error" in line), str(e.err))
    return _error(
        422,
        f"the program refused it: {reason}. Nothing changed.",
        program_error={"code": found.code, "name": found.name, "message": found.message} if found else None,
        logs=e.logs[-12:],
    )


async def _form(request: Request) -> Any:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise FormError(f"the body is over {MAX_BODY} bytes")
    try:
        return parse_json(body)
    except NotJson as e:
        raise FormError(f"the body is not JSON: {e}") from None


def _address(raw: str, what: str) -> Pubkey:
    try:
        return Pubkey.from_string(raw)
    except ValueError:
        raise FormError(f"{what}: not a base58 address") from None


def wallet_chain(rpc_url: str) -> str:
    """The Wallet Standard chain the wallet signs for (solana:mainnet, devnet, testnet or localnet)."""
    for cluster in ("devnet", "testnet"):
        if cluster in rpc_url:
            return f"solana:{cluster}"
    host = urlsplit(rpc_url).hostname or ""
    return "solana:localnet" if host in ("127.0.0.1", "localhost", "::1") else "solana:mainnet"


def app_routes(pool: asyncpg.Pool, settings: Settings) -> list[BaseRoute]:
    from coordinator.web import page  # the site's layout (imported late: coordinator.web imports this)

    def with_chain(handler: Callable[[Request, AsyncClient], Awaitable[Response]]) -> Callable[..., Any]:
        async def answer(request: Request) -> Response:
            try:
                async with AsyncClient(settings.rpc_url, commitment=Confirmed) as chain:
                    return await handler(request, chain)
            except (FormError, AccountError, BadTransaction) as e:
                return _error(400, str(e))
            except TransactionFailed as e:
                return _refused(e)

        return answer

    facts: dict[str, Any] = {
        "chain": wallet_chain(settings.rpc_url),
        "io_decimals": IO_DECIMALS,
        "models": catalog.GPU_MODELS,
        "regions": catalog.REGIONS,
        "any": ANY,
    }

    async def client_page(request: Request) -> Response:
        return page(request, "app_client.html", settings, **facts)

    async def supplier_page(request: Request) -> Response:
        return page(request, "app_supplier.html", settings, **facts)

    async def stake_page(request: Request) -> Response:
        return page(request, "app_stake.html", settings, **facts)

    async def idl(request: Request) -> Response:
        return JSONResponse(json.loads(idl_json()))

    async def transaction(request: Request, chain: AsyncClient) -> Response:
        action = request.path_params["action"]
        wallet, built = await build(chain, action, await _form(request))
        tx = await unsigned(chain, wallet, built.instructions)
        return JSONResponse(
            {
                "action": action,
                "program": str(settings.program),
                "fee_payer": str(wallet),
                "transaction": tx.base64(),
                "fee_lamports": u64_json(tx.fee_lamports),
                **built.summary,
            }
        )

    async def submit(request: Request, chain: AsyncClient) -> Response:
        form = await _form(request)
        if not isinstance(form, dict):
            raise FormError('the body must be {"transaction": base64} or {"signature": base58}')
        if "signature" in form:  # a wallet that sent it itself (solana:signAndSendTransaction only)
            try:
                signature = await confirm(chain, Signature.from_string(str(form["signature"])))
            except ValueError:
                raise FormError("signature: not a base58 transaction signature") from None
        else:
            signature = await relay(chain, decode_signed(form.get("transaction"), settings.program))
        return JSONResponse({"signature": str(signature), "confirmed": True})

    async def wallet(request: Request, chain: AsyncClient) -> Response:
        return JSONResponse(await wallet_state(chain, pool, _address(request.path_params["wallet"], "wallet")))

    async def stake(request: Request, chain: AsyncClient) -> Response:
        return JSONResponse(await stake_state(chain, _address(request.path_params["wallet"], "wallet")))

    async def lease(request: Request, chain: AsyncClient) -> Response:
        return JSONResponse(await lease_state(chain, pool, _address(request.path_params["lease"], "lease")))

    async def lease_events(request: Request) -> Response:
        """The lease's state, sent (server-sent events) whenever it changes: placement, settlements,
        escrow and time left arrive live."""
        try:
            address = _address(request.path_params["lease"], "lease")
        except FormError as e:
            return _error(400, str(e))

        async def stream() -> AsyncIterator[str]:
            last = None
            async with AsyncClient(settings.rpc_url, commitment=Confirmed) as chain:
                # A stream ends after a while (EventSource reconnects by itself), so that no page held
                # open keeps a stopping coordinator waiting.
                deadline = asyncio.get_running_loop().time() + LIVE_STREAM_SECONDS
                while not await request.is_disconnected() and asyncio.get_running_loop().time() < deadline:
                    try:
                        state = json.dumps(await lease_state(chain, pool, address))
                    except AccountError as e:
                        state = json.dumps({"error": str(e)})
                    if state != last:
                        yield f"data: {state}\n\n"
                        last = state
                    await asyncio.sleep(LIVE_POLL_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def job(request: Request) -> Response:
        """The exact bytes the wallet signs to give a lease its job (gpunet.protocol.job_message) and the
        job as the coordinator will store it; the page checks both against its form before signing."""
        try:
            form = await _form(request)
            if not isinstance(form, dict):
                raise FormError("the body must be a JSON object")
            lease_key = _address(str(form.get("lease", "")), "lease")
            spec = JobSpec.model_validate(form.get("job"))
            per_node, number = form.get("gpus_per_node"), form.get("job_number", 1)
            if per_node is not None and type(per_node) is not int:
                raise FormError("gpus_per_node: null or an integer")
            if type(number) is not int or number < 1:
                raise FormError("job_number: an integer from 1")
        except FormError as e:
            return _error(400, str(e))
        except ValidationError as e:
            first = e.errors()[0]
            return _error(400, f"job.{'.'.join(map(str, first['loc']))}: {first['msg']}")
        message = job_message(lease_key, spec, per_node, number)
        job = spec.model_dump(mode="json")
        if not job["expose"]:
            del job["expose"]  # as job_message signs it, and as the page (which exposes no port) checks it
        return JSONResponse(
            {
                "message_hex": message.hex(),
                "job": job,
                "gpus_per_node": per_node,
                "job_number": number,
            }
        )

    return [
        Route("/web/app", client_page),
        Route("/web/app/supplier", supplier_page),
        Route("/web/app/stake", stake_page),
        Route("/web/api/idl", idl),
        Route("/web/api/tx/{action}", with_chain(transaction), methods=["POST"]),
        Route("/web/api/submit", with_chain(submit), methods=["POST"]),
        Route("/web/api/wallet/{wallet}", with_chain(wallet)),
        Route("/web/api/stake/{wallet}", with_chain(stake)),
        Route("/web/api/leases/{lease}", with_chain(lease)),
        Route("/web/api/leases/{lease}/events", lease_events),
        Route("/web/api/job", job, methods=["POST"]),
    ]
