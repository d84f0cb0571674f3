"""The library surface: every module declares __all__, every name in it exists; lean imports."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import payrun
from _run_helpers import fresh_python, make_rows, write_batch


def _modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.walk_packages(payrun.__path__, "payrun.")]
    return [
        importlib.import_module(name) for name in ["payrun", *names] if name != "payrun.__main__"
    ]


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_module_declares_all(module: ModuleType) -> None:
    """Each module lists its public names in __all__, and each of them exists."""
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module.__name__} has no __all__"
    for name in exported:
        assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name}"


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_public_functions_are_exported_or_private(module: ModuleType) -> None:
    """Functions and classes defined in a module are in __all__ or start with '_'."""
    exported = set(getattr(module, "__all__", ()))
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__ or name.startswith("_"):
            continue
        if callable(value):
            assert name in exported, f"{module.__name__}.{name} is neither in __all__ nor private"


def test_library_api_reexports() -> None:
    """The package root re-exports the pipeline's stages and the error root."""
    for name in ("read_batch", "validate_rows", "run_batch", "Ledger", "PayrunError"):
        assert name in payrun.__all__
    assert payrun.PayrunError.__module__ == "payrun.errors"


def test_only_payrun_error_derives_from_exception() -> None:
    """One exception tree: every payrun error class descends from PayrunError."""
    import payrun.errors as errors

    kinds = [getattr(errors, name) for name in errors.__all__]
    classes = [kind for kind in kinds if isinstance(kind, type)]
    assert len(classes) >= len(kinds) - 1, "errors exports classes and first_payrun_error only"
    for kind in classes:
        assert issubclass(kind, errors.PayrunError)


def test_a_run_loads_aiohttp_only_when_it_makes_its_transport() -> None:
    """aiohttp, httpx, tenacity and rich load only when used (the transport, a retry, a terminal).

    Each costs start-up CPU on every scheduled run (together about 0.4 s, aiohttp alone
    0.2 s): the run's modules and the bank client load none of them, and making the
    transport loads aiohttp and nothing else of them.
    """
    code = (
        "import sys\n"
        "import payrun.cli._run, payrun.cli._progress, payrun.run._pipeline, payrun.bank\n"
        "stacks = {'aiohttp', 'httpx', 'tenacity', 'rich'}\n"
        "print(sorted(stacks & set(sys.modules)))\n"
        "payrun.bank.make_transport()\n"
        "print(sorted(stacks & set(sys.modules)))\n"
    )
    printed = fresh_python(code)
    assert printed.split() == ["[]", "['aiohttp']"]


def test_payrun_validate_loads_no_http_stack(tmp_path: Path) -> None:
    """``payrun validate`` never talks to the bank: it loads neither the bank client nor
    aiohttp, httpx or tenacity."""
    batch = write_batch(tmp_path / "pay.csv", make_rows(1, 3))
    code = (
        "import contextlib, io, sys\n"
        "from payrun.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['validate', {str(batch)!r}])\n"
        "stacks = {'aiohttp', 'yarl', 'httpx', 'tenacity', 'payrun.bank'}\n"
        "print(code, sorted(stacks & set(sys.modules)))\n"
    )
    assert fresh_python(code).split() == ["0", "[]"]


_FLEET_SOURCES = [
    *sorted((Path(payrun.__file__).parent / "fleet").glob("*.py")),
    Path(payrun.__file__).parent / "cli" / "_fleet.py",
]
_LONGEST_FUNCTION = 60


@pytest.mark.parametrize("source", _FLEET_SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_fleet_uses_public_names_and_short_functions(source: Path) -> None:
    """The fleet's modules import no private module or name of another payrun package
    (issue 32: ``payrun.run`` and ``payrun.ledger`` name what it needs; the root's shared
    modules, ``payrun._models`` and the like, are every package's), no ``assert`` (gone
    under ``python -O``), and no function over 60 lines (house style)."""
    import ast

    own = "payrun." + ".".join(source.relative_to(Path(payrun.__file__).parent).parts[:-1])
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("payrun."):
            module = node.module or ""
            parts = module.split(".")
            if module.startswith(own + ".") or len(parts) == 2:  # noqa: PLR2004
                continue  # its own package's modules, and the root's shared ones
            private = [p for p in parts[1:] if p.startswith("_")]
            names = [a.name for a in node.names if a.name.startswith("_")]
            assert not private and not names, f"{source.name}:{node.lineno} imports {module}"
        assert not isinstance(node, ast.Assert), f"{source.name}:{node.lineno}: an assert"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= _LONGEST_FUNCTION, f"{source.name}: {node.name} is {length} lines"
