"""MkDocs hook: the configuration page (docs/configuration.md) gets its tables of settings from the
settings themselves, the coordinator's `Settings` and the worker's `WorkerSettings` (each field's
default and description, the description `gpunet coordinator run --help` prints too), and the
worker's flags from `gpunet worker run`'s options, so the page cannot drift from the code."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import typer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from coordinator.settings import Settings
from worker import cli as worker_cli
from worker.agent import WorkerSettings

PAGE = "configuration.md"
COORDINATOR_MARKER = "<!-- the coordinator's settings are inserted here by docs/_hooks/settings_reference.py -->"
WORKER_MARKER = "<!-- the worker's settings are inserted here by docs/_hooks/settings_reference.py -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    return render_page(markdown)


def render_page(markdown: str) -> str:
    """The page with both tables in place of their markers."""
    for marker in (COORDINATOR_MARKER, WORKER_MARKER):
        if marker not in markdown:
            raise ValueError(f"{PAGE} lost its marker {marker!r}")
    return markdown.replace(COORDINATOR_MARKER, coordinator_table()).replace(WORKER_MARKER, worker_table())


def coordinator_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        rows.append(f"| `{variable(Settings, name)}` | {default(name, info)} | {cell(info.description)} |")
    return "\n".join(rows) + "\n"


def worker_table() -> str:
    flags = worker_flags()
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for name, info in WorkerSettings.model_fields.items():
        flag = flags.get(name, "")
        rows.append(
            f"| `{variable(WorkerSettings, name)}` | {flag} | {default(name, info)} | {cell(info.description)} |"
        )
    return "\n".join(rows) + "\n"


def variable(model: type[BaseSettings], name: str) -> str:
    return f"{model.model_config.get('env_prefix', '')}{name.upper()}"


def worker_flags() -> dict[str, str]:
    """Each worker setting `gpunet worker run` has an option for, and that option (`--gateway`):
    the options it passes to `_settings(...)` by keyword, and those whose help names the setting's
    variable (`--url`, read into rpc_url after the others)."""
    run = typer.main.get_command(worker_cli.app).commands["run"]  # type: ignore[attr-defined]
    options = {p.name: p for p in run.params if p.param_type_name == "option"}
    field_of_option: dict[str, str] = {}
    tree = ast.parse(textwrap.dedent(inspect.getsource(worker_cli.run)))
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_settings":
            for keyword in call.keywords:
                names = [n.id for n in ast.walk(keyword.value) if isinstance(n, ast.Name) and n.id in options]
                if keyword.arg is not None and names:
                    field_of_option[names[0]] = keyword.arg
    for option_name, option in options.items():
        for field in WorkerSettings.model_fields:
            if re.search(rf"\b{variable(WorkerSettings, field)}\b", option.help or ""):
                field_of_option.setdefault(option_name, field)
    flags = {}
    for option_name, field in field_of_option.items():
        option = options[option_name]
        text = ", ".join(f"`{opt}`" for opt in sorted(option.opts, key=len, reverse=True))
        flags[field] = text + (" (repeatable)" if option.multiple else "")
    return flags


def default(name: str, info: FieldInfo) -> str:
    """A field's default as the page shows it: None, "" and [] as unset (the description says what
    that means), numbers as written, a path under the home directory with ~, and sizes, amounts of
    SOL and long durations with a gloss."""
    value = info.get_default(call_default_factory=True) if info.default is PydanticUndefined else info.default
    if value is None or value == "" or value == []:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        home = Path.home()
        return f"`~/{value.relative_to(home)}`" if value.is_relative_to(home) else f"`{value}`"
    if isinstance(value, list):
        return ", ".join(f"`{v}`" for v in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`" + _gloss(name, value)


def _gloss(name: str, value: Any) -> str:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return ""
    if name.endswith("_lamports"):
        return f" ({value / 1e9:g} SOL)"
    if name.endswith("_bytes"):
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if value % size == 0:
                return f" ({value // size} {unit})"
    if name.endswith("_seconds") and value >= 3600:
        if value % 86_400 == 0:
            days = value // 86_400
            return f" ({days} day{'s' if days > 1 else ''})"
        if value % 3600 == 0:
            return f" ({value // 3600} h)"
    return ""


_CODE = re.compile(r"(`[^`]*`)")
_VARIABLE = re.compile(r"\b(GPUNET_[A-Z0-9_]+)\b")


def cell(text: str | None) -> str:
    """A description as a table cell: what Markdown would take for markup (HTML, emphasis, a cell's
    end) escaped outside code spans, and the GPUNET_* variables it names set as code."""
    out = []
    for i, part in enumerate(_CODE.split(text or "")):
        if i % 2:  # a code span: as written, but a pipe would still end the cell
            out.append(part.replace("|", "\\|"))
            continue
        for j, piece in enumerate(_VARIABLE.split(part)):
            if j % 2:
                out.append(f"`{piece}`")
                continue
            piece = piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            out.append(re.sub(r"([\\*_|{}\[\]])", r"\\\1", piece))
    return "".join(out)
