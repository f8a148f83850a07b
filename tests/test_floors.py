"""The floors of the house, read from the source (ast, nothing imported): the SDK (`gpunet/` less
the floor on top) imports neither service and has no import cycle; the coordinator and the worker
stand on the SDK only; the command line (`gpunet/cli/`) and the demo (`gpunet/demo/`) stand on
all three; the benchmarks import no test code. An import inside a function counts like one at the
top: a lazy import still points an arrow, and a lazy cycle is still a cycle."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

from gpunet.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
# The floor on top of the SDK and both services: the `gpunet` command and the README's story
# (`scripts/demo`), which runs the coordinator and the workers.
ON_TOP = ("gpunet.cli", "gpunet.demo")
SERVICES = ("coordinator", "worker")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(name: str, path: Path, known: frozenset[str] = frozenset()) -> Iterator[tuple[str, int]]:
    """Every module `name` imports (relative imports resolved), with its line. `from p import x`
    is an import of the module p.x when p.x is in `known`, else of p."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield (f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module), node.lineno


def _sdk() -> dict[str, Path]:
    return {m: p for m, p in _modules("gpunet").items() if not _under(m, ON_TOP)}


def test_the_sdk_imports_neither_service_nor_the_floor_on_top():
    found = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for name, path in _sdk().items()
        for target, line in _imports(name, path)
        if _under(target, SERVICES + ON_TOP)
    ]
    assert not found, "the SDK must not import the coordinator, the worker or the command line:\n" + "\n".join(found)


def test_the_services_stand_on_the_sdk_only():
    """The coordinator and the worker import the SDK, never each other nor the floor on top."""
    found = []
    for service in SERVICES:
        forbidden = tuple(s for s in SERVICES if s != service) + ON_TOP
        for name, path in _modules(service).items():
            found += [
                f"{path.relative_to(REPO)}:{line} imports {t}"
                for t, line in _imports(name, path)
                if _under(t, forbidden)
            ]
    assert not found, "\n".join(found)


def test_the_benchmarks_import_no_test_code():
    """bench/ measures what ships: its set-up comes from the SDK (gpunet.testbed), never from tests/."""
    benches = sorted((REPO / "bench").rglob("*.py"))
    assert benches, "no benchmark found under bench/"
    found = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in benches
        for target, line in _imports(_module_name(path), path)
        if _under(target, ("tests",))
    ]
    assert not found, "\n".join(found)


def test_no_import_cycle_among_gpunet_modules():
    """Over every module under gpunet/, the floor on top included."""
    modules = _modules("gpunet")
    known = frozenset(modules)
    graph = {
        name: sorted({t for t, _ in _imports(name, path, known) if t in modules and t != name})
        for name, path in modules.items()
    }
    cycles = []
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for t in graph[name]:
            if state.get(t) == "open":
                cycles.append(" -> ".join([*path[path.index(t) :], t]))
            elif t not in state:
                visit(t, [*path, t])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles among gpunet's modules:\n" + "\n".join(cycles)


def test_the_walk_sees_the_source():
    """Guards the tests above against walking nothing (a moved folder, a wrong root)."""
    sdk = _sdk()
    assert "gpunet.keys" in sdk and "gpunet.jobs" in sdk
    assert not any(_under(m, ON_TOP) for m in sdk)
    keys = REPO / "gpunet" / "cli" / "keys.py"
    assert any(t == "gpunet.keys" for t, _ in _imports("gpunet.cli.keys", keys, frozenset(_modules("gpunet"))))


def test_each_service_has_its_extra_and_the_set_up_installs_them_all():
    """gpunet/extras.py names the extras a service asks for; pyproject.toml must define them, `all`
    must hold them and every other extra (Ray's too, which no service asks for: a worker refuses Ray
    jobs without it) but the tools that test and document gpunet and `gpu` (CUDA's wheels, of use
    only on a machine with an NVIDIA GPU, where `gpunet worker check` names it), and scripts/setup
    must install `all` (the README's commands run everything)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    [everything] = extras["all"]
    assert everything.startswith("gpunet[") and everything.endswith("]")
    tools = {"all", "test", "docs", "gpu"}
    assert set(everything.removeprefix("gpunet[").removesuffix("]").split(",")) == set(extras) - tools
    assert "-e '.[all,test,docs]'" in (REPO / "scripts" / "setup").read_text()
