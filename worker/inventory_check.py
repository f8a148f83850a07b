"""Whether the GPUs a node sees are the ones registered on chain, for `gpunet worker status`: four
answers that need four different actions, never "differs" for GPUs that could not be read at all."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpunet.protocol import Inventory

__all__ = ["inventory_check"]

NO_HASH = bytes(32)


def inventory_check(
    node_key: str,
    current: Inventory | None,
    read_error: str | None,
    chain: dict[str, Any],
    registered_copy: Inventory | None,
) -> dict[str, Any]:
    """{"state": "unread" | "no_hash_registered" | "matches" | "differs", "detail": [lines to act on]}.

    `current` is what this machine sees (None, with `read_error`, when its GPUs could not be read);
    `chain` is the registration as `worker status` reads it; `registered_copy` is the inventory the
    agent saved when it last matched the chain (its fields say what changed since), if any."""
    if current is None:
        fix = (
            ""
            if "--simulate-gpus" in (read_error or "")
            else (
                "; check that `nvidia-smi` lists the GPUs (the NVIDIA driver loaded), or on a machine without GPUs "
                "pass --simulate-gpus MODEL:COUNT:VRAM_GB"
            )
        )
        return {
            "state": "unread",
            "detail": [f"could not read this machine's GPUs, so nothing was compared: {read_error}{fix}"],
        }
    update = f"`gpunet node update {node_key} --inventory-hash {current.hash().hex()}`"
    registered = bytes.fromhex(chain["inventory_hash"])
    if registered == NO_HASH:
        return {
            "state": "no_hash_registered",
            "detail": [
                f"the node was registered without an inventory hash; if these GPUs are the ones you offer: {update}"
            ],
        }
    if registered == current.hash():
        return {"state": "matches", "detail": []}
    detail = [f"this machine's inventory hash {current.hash().hex()}, registered {registered.hex()}"]
    if registered_copy is not None and registered_copy.hash() == registered:
        detail += current.differences(registered_copy)
    else:
        detail += _spec_differences(current, chain)
    detail.append(f"if the machine changed on purpose, register what it has now: {update}")
    return {"state": "differs", "detail": detail}


def _spec_differences(current: Inventory, chain: dict[str, Any]) -> list[str]:
    """What the chain's spec (model, count) says against the GPUs seen, when no copy of the registered
    inventory is here to compare field by field."""
    seen = Counter(g.model or g.name for g in current.gpus)
    registered = f"{chain['gpu_count']}x {chain['gpu_model']}"
    now = ", ".join(f"{n}x {model}" for model, n in sorted(seen.items()))
    if seen != Counter({chain["gpu_model"]: chain["gpu_count"]}):
        return [f"registered {registered}, this machine has {now}"]
    return [
        f"the same GPUs as registered ({registered}) but other details differ (driver, CUDA, UUIDs, PCIe or power "
        "limits; no copy of the registered inventory is here to say which: the agent keeps one once it matches)"
    ]
