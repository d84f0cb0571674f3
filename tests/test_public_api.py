"""The library surface: every module declares __all__, every name in it exists; lean imports."""

from __future__ import annotations

import ast
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

    kinds = [getattr(errors, name) for name in errors.__all__ if not name.startswith("EXIT_")]
    classes = [kind for kind in kinds if isinstance(kind, type)]
    assert len(classes) >= len(kinds) - 1, "errors exports classes and first_payrun_error only"
    for kind in classes:
        assert issubclass(kind, errors.PayrunError)
        assert kind.exit_code in (errors.EXIT_REFUSED, errors.EXIT_RUN_AGAIN)


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


_SOURCE_ROOT = Path(payrun.__file__).parent
_FLEET_SOURCES = [
    *sorted((_SOURCE_ROOT / "fleet").glob("*.py")),
    _SOURCE_ROOT / "cli" / "_fleet.py",
]
_LONGEST_FUNCTION = 60


def _module_name(source: Path) -> str:
    """``payrun.run._start`` for ``src/payrun/run/_start.py`` (a package for ``__init__``)."""
    parts = ["payrun", *source.relative_to(_SOURCE_ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _owner(target: str) -> str | None:
    """The part of payrun (``payrun.bank``, ``payrun.config``) that a private module or name
    belongs to (``payrun.bank._transport._aiohttp``, ``payrun.config._SCHEME``); None for a
    public one, and for the root's shared modules (``payrun._models.utc_now``)."""
    parts = target.split(".")
    return ".".join(parts[:2]) if any(_is_private(part) for part in parts[2:]) else None


def _imported(node: ast.ImportFrom | ast.Import, importer: str, *, package: bool) -> list[str]:
    """Each module or ``module.name`` the import statement names, relative ones resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = node.module or ""
    if node.level:
        base = (importer if package else importer.rsplit(".", 1)[0]).split(".")
        module = ".".join([*base[: len(base) - node.level + 1], *([module] if module else [])])
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _private_imports(source: Path) -> list[str]:
    """Imports in ``source`` of a private module or name that another package owns."""
    importer = _module_name(source)
    package = source.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom | ast.Import):
            continue
        for target in _imported(node, importer, package=package):
            owner = _owner(target) if target.startswith("payrun.") else None
            if owner is not None and importer != owner and not importer.startswith(owner + "."):
                found.append(f"{source.relative_to(_SOURCE_ROOT)}:{node.lineno} imports {target}")
    return found


def test_no_package_imports_another_packages_private_names() -> None:
    """No module imports a private module or name (``_x``) that another payrun package owns:
    ``payrun.run._start`` is ``payrun.run``'s, imported elsewhere only through ``payrun.run``
    (the root's shared modules, ``payrun._models`` and the like, are every package's)."""
    found = [
        line for source in sorted(_SOURCE_ROOT.rglob("*.py")) for line in _private_imports(source)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source", _FLEET_SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_fleet_has_no_assert_and_short_functions(source: Path) -> None:
    """The fleet's modules have no ``assert`` (gone under ``python -O``) and no function
    over 60 lines (house style)."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        assert not isinstance(node, ast.Assert), f"{source.name}:{node.lineno}: an assert"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= _LONGEST_FUNCTION, f"{source.name}: {node.name} is {length} lines"


def test_only_the_entry_point_imports_the_command_line() -> None:
    """Nothing below the command line climbs back up to it: outside ``payrun.cli`` only
    ``payrun.__main__`` imports ``payrun.cli`` (the exit codes live with the errors)."""
    found = []
    for source in sorted(_SOURCE_ROOT.rglob("*.py")):
        importer = _module_name(source)
        if importer in ("payrun.__main__", "payrun.cli") or importer.startswith("payrun.cli."):
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = _imported(node, importer, package=source.name == "__init__.py")
                if any(name == "payrun.cli" or name.startswith("payrun.cli.") for name in names):
                    found.append(f"{source.relative_to(_SOURCE_ROOT)}:{node.lineno}")
    assert not found, "\n".join(found)


def test_only_config_reads_the_environment() -> None:
    """``os.environ`` and ``os.getenv`` are read in ``payrun/config.py`` only (house style:
    one ``Settings`` built at the edge)."""
    reads = {"environ", "environb", "getenv", "getenvb"}
    found = []
    for source in sorted(_SOURCE_ROOT.rglob("*.py")):
        if source == _SOURCE_ROOT / "config.py":
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in reads:
                found.append(f"{source.relative_to(_SOURCE_ROOT)}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                if {alias.name for alias in node.names} & reads:
                    found.append(f"{source.relative_to(_SOURCE_ROOT)}:{node.lineno}")
    assert not found, "\n".join(found)


def _defined_names(source: Path) -> list[str]:
    """The public classes and constants ``source`` defines at its top level."""
    names = []
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        value = getattr(node, "value", None)
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "TypeVar":
            # A type variable is local to its module's signatures
            continue
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    return [name for name in names if not name.startswith("_") and name != "TYPE_CHECKING"]


def test_each_public_class_or_constant_name_is_defined_once() -> None:
    """A public class or constant name means one thing: it is defined in one module only
    (``LIVE_MODE`` once; the bank's ``Answer`` is not the confirmation's). The sandbox is
    left out: it models the bank on its own, so its ``Payment`` is not ``bank.wire``'s."""
    homes: dict[str, list[str]] = {}
    for source in sorted(_SOURCE_ROOT.rglob("*.py")):
        if source.relative_to(_SOURCE_ROOT).parts[0] == "sandbox":
            continue
        for name in _defined_names(source):
            homes.setdefault(name, []).append(str(source.relative_to(_SOURCE_ROOT)))
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert not twice, twice
