"""A client's commands that need no node: bad input is refused with exit code 2 before anything is
asked or sent (the coordinator named is unreachable, so a request would end in exit code 5)."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.exits import Exit


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "H999", "--count", "2", "--duration", "1h"], "unknown GPU model 'H999'"),
        (["--region", "mars", "--count", "2", "--duration", "1h"], "unknown region 'mars'"),
        (["--count", "2", "--duration", "soon"], "not a duration"),
        (["--count", "2", "--duration", "1h", "--max-price", "0"], "more than zero"),
        (["--count", "3", "--duration", "1h", "--gpus-per-node", "2"], "does not divide --count 3"),
    ],
)
def test_quote_refuses_bad_terms_before_asking(args, message) -> None:
    code, out = _run("quote", *args, "--coordinator", _closed_port())
    assert code == Exit.BAD_INPUT and message in out, out


def test_quote_names_an_unreachable_coordinator() -> None:
    url = _closed_port()
    code, out = _run("quote", "--gpu", "h100", "--count", "2", "--duration", "1h", "--coordinator", url)
    assert code == Exit.UNREACHABLE and f"cannot reach the coordinator at {url}/quote" in out, out
