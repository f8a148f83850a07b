"""Every exception class the SDK defines derives from gpunet.errors.GpunetError, and its docstring lists them."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import gpunet
from gpunet.errors import GpunetError

# Job scripts run when imported (the demo's training job reads its environment and trains);
# they are read, not imported, and must define no class.
SCRIPTS = {"gpunet.demo.train"}


def _sdk_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(gpunet.__path__, "gpunet."):
        if module_info.name in SCRIPTS:
            continue
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{module.__name__.removeprefix('gpunet.')}.{name}"] = obj
    return found


def test_every_sdk_exception_derives_from_the_root() -> None:
    found = _sdk_exceptions()
    # the walk reaches subpackages and the classes that were plain ValueErrors
    assert {"errors.GpunetError", "client.TransactionFailed", "cli.common.BadInput", "amounts.AmountError"} <= set(
        found
    )
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, GpunetError))
    assert outside == [], f"not derived from gpunet.errors.GpunetError: {outside}"


def test_the_former_bases_stay() -> None:
    # callers (and typer's parameter callbacks) catch these as ValueError, a missing extra as ImportError
    found = _sdk_exceptions()
    for name in (
        "amounts.AmountError",
        "catalog.CatalogError",
        "cli.common.BadInput",
        "cluster.ClusterError",
        "protocol.ProtocolError",
    ):
        assert issubclass(found[name], ValueError), name
    assert issubclass(found["extras.ExtraMissing"], ImportError)


def test_the_root_docstring_lists_every_public_exception() -> None:
    public = {name for name in _sdk_exceptions() if not name.rsplit(".", 1)[1].startswith("_")} - {"errors.GpunetError"}
    doc = GpunetError.__doc__ or ""
    missing = sorted(name for name in public if f"`{name}`" not in doc)
    assert missing == [], f"GpunetError's docstring does not list {missing}"


def test_scripts_define_no_class() -> None:
    root = Path(gpunet.__file__).parent
    for module in SCRIPTS:
        path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)], (
            f"{module} defines a class; import it above"
        )
