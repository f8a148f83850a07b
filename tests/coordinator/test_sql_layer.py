"""All of the coordinator's SQL lives behind one layer, `coordinator/db/` (one module per table
group), so a schema change touches one place: no other coordinator module runs a statement or
spells one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DB = ROOT / "coordinator" / "db"
RUNS_SQL = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "copy_records_to_table", "copy_to_table"}
SPELLS_SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.S)


def _sql_in(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS_SQL:
            found.append(f"{name}:{node.lineno} runs .{node.func.attr}()")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPELLS_SQL.search(node.value):
            found.append(f"{name}:{node.lineno} spells SQL")
    return found


def test_only_the_database_layer_runs_or_spells_sql() -> None:
    modules = [p for p in (ROOT / "coordinator").rglob("*.py") if DB not in p.parents]
    assert len(modules) > 20, "the walk found the coordinator's modules"
    assert [f for p in modules for f in _sql_in(p.read_text(), str(p.relative_to(ROOT)))] == []


def test_the_check_sees_a_statement_and_leaves_other_code_alone() -> None:
    stray = 'async def f(conn):\n    return await conn.fetch("SELECT node_key FROM nodes")\n'
    assert _sql_in(stray, "stray.py") == ["stray.py:2 runs .fetch()", "stray.py:2 spells SQL"]
    honest = 'async def f(rpc):\n    log.info("select a node from the fleet")\n    return await rpc.call("getSlot")\n'
    assert _sql_in(honest, "honest.py") == []
