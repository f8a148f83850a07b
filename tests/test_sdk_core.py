"""SDK core without a chain: PDAs, the usage receipt message and its Ed25519 instruction (against the
vector the Rust tests check too), keypair files, error mapping and event decoding."""

from __future__ import annotations

import base64
import json
import stat
import struct
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.errors import custom_error_code, program_error
from gpunet.events import decode_events, events_of_transaction
from gpunet.idl import PROGRAM_ID, idl_json
from gpunet.keys import KeypairFileError, create_keypair_file, load_keypair
from gpunet.pda import config_pda, lease_pda, lease_vault_pda, node_pda, provider_pda, stake_vault_pda
from gpunet.usage import ED25519_PROGRAM_ID, Receipt, ed25519_instruction

VECTOR = json.loads((Path(__file__).parent / "vectors" / "usage_receipt.json").read_text())


def test_receipt_message_matches_the_shared_vector() -> None:
    receipt = Receipt(VECTOR["epoch"], VECTOR["gpu_seconds"], VECTOR["through"])
    lease, node = Pubkey.from_string(VECTOR["lease"]), Pubkey.from_string(VECTOR["node_key"])
    message = receipt.message(lease, node)
    assert len(message) == 136
    assert message.hex() == VECTOR["message_hex"]
    assert str(PROGRAM_ID) == VECTOR["program_id"]


def test_ed25519_instruction_matches_the_shared_vector() -> None:
    signer = Keypair.from_seed(bytes.fromhex(VECTOR["signer_seed_hex"]))
    assert str(signer.pubkey()) == VECTOR["signer"]
    ix = ed25519_instruction(signer, bytes.fromhex(VECTOR["message_hex"]))
    assert ix.program_id == ED25519_PROGRAM_ID
    assert ix.accounts == []
    assert bytes(ix.data).hex() == VECTOR["ed25519_data_hex"]


@pytest.mark.parametrize(
    "fields",
    [
        {"epoch": -1, "gpu_seconds": 0, "through": 1},
        {"epoch": 2**64, "gpu_seconds": 0, "through": 1},
        {"epoch": 1, "gpu_seconds": 0, "through": 2**63},
        {"epoch": 1, "gpu_seconds": -5, "through": 1},
    ],
)
def test_receipt_rejects_values_the_program_cannot_hold(fields: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Receipt(**fields)


def test_pdas_use_the_program_seeds() -> None:
    wallet = Pubkey.from_string(VECTOR["lease"])
    assert config_pda() == Pubkey.find_program_address([b"config"], PROGRAM_ID)[0]
    provider = provider_pda(wallet)
    assert provider == Pubkey.find_program_address([b"provider", bytes(wallet)], PROGRAM_ID)[0]
    assert stake_vault_pda(provider) == Pubkey.find_program_address([b"stake_vault", bytes(provider)], PROGRAM_ID)[0]
    assert node_pda(wallet) == Pubkey.find_program_address([b"node", bytes(wallet)], PROGRAM_ID)[0]
    lease = lease_pda(wallet, 258)
    assert (
        lease == Pubkey.find_program_address([b"lease", bytes(wallet), bytes([2, 1, 0, 0, 0, 0, 0, 0])], PROGRAM_ID)[0]
    )
    assert lease_vault_pda(lease) == Pubkey.find_program_address([b"lease_vault", bytes(lease)], PROGRAM_ID)[0]
    assert lease_pda(wallet, 1) != lease_pda(wallet, 2)
    with pytest.raises(ValueError, match="u64"):
        lease_pda(wallet, -1)


def test_keypair_files_round_trip_owner_only_and_never_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "node.json"
    created = create_keypair_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_keypair(path) == created
    assert len(json.loads(path.read_text())) == 64
    with pytest.raises(KeypairFileError, match="already exists"):
        create_keypair_file(path)
    assert load_keypair(path) == created


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such keypair file"),
        ("not json", "not a keypair file"),
        ("[1, 2, 3]", "64 numbers"),
        (json.dumps([300] * 64), "64 numbers"),
    ],
)
def test_bad_keypair_files_say_what_is_wrong_without_showing_content(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "id.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KeypairFileError, match=expected) as info:
        load_keypair(path)
    assert str(path) in str(info.value)
    if content is not None:
        assert content not in str(info.value)


def test_program_errors_map_to_names_and_messages() -> None:
    idl = json.loads(idl_json())
    for entry in idl["errors"]:
        err = program_error(entry["code"])
        assert err is not None and (err.name, err.message) == (entry["name"], entry["msg"])
    assert program_error(6000).name == "NotAdmin"
    assert program_error(2006).name == "ConstraintSeeds"  # Anchor's own
    assert program_error(1) is None
    assert custom_error_code({"InstructionError": [1, {"Custom": 6003}]}) == 6003
    assert custom_error_code("Program X failed: custom program error: 0x1770") == 6000
    assert custom_error_code({"InstructionError": [0, "InvalidAccountData"]}) is None
    assert custom_error_code(None) is None


def _event_line(name: str, body: bytes) -> str:
    event = next(e for e in json.loads(idl_json())["events"] if e["name"] == name)
    return "Program data: " + base64.b64encode(bytes(event["discriminator"]) + body).decode()


def test_events_decode_from_gpunet_logs_only() -> None:
    provider = Pubkey.from_string(VECTOR["node_key"])
    staked = _event_line("Staked", bytes(provider) + struct.pack("<QQ", 5, 12))
    other = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
    logs = [
        f"Program {PROGRAM_ID} invoke [1]",
        "Program log: Instruction: Stake",
        f"Program {other} invoke [2]",
        staked,  # logged by another program: not a gpunet event
        f"Program {other} success",
        staked,
        f"Program {PROGRAM_ID} success",
    ]
    events = decode_events(logs)
    assert [e.name for e in events] == ["Staked"]
    assert (events[0].data.provider, events[0].data.amount, events[0].data.staked) == (provider, 5, 12)
    assert events_of_transaction({"meta": {"err": None, "logMessages": logs}})[0].name == "Staked"
    assert events_of_transaction({"meta": {"err": {"InstructionError": [0, "X"]}, "logMessages": logs}}) == []
    assert decode_events([]) == []
