"""The library surface: every module declares __all__, every name in it exists; lean imports."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import payrun
from _run_helpers import fresh_python


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

    for name in errors.__all__:
        kind = getattr(errors, name)
        assert issubclass(kind, errors.PayrunError)


def test_a_run_on_the_default_transport_loads_no_optional_stack() -> None:
    """aiohttp, httpx, tenacity and rich load only when used (their transport, a retry, a terminal).

    Each costs start-up CPU on every scheduled run (together about 0.4 s, aiohttp alone
    0.2 s); this keeps them out of the default path, which loads pyreqwest (3 ms).
    """
    code = (
        "import sys\n"
        "import payrun.cli._run, payrun.cli._progress, payrun.run._pipeline\n"
        "from payrun.bank import make_http_client\n"
        "from payrun.config import Secret, Settings\n"
        "make_http_client(Settings(base_url='https://bank.example', api_key=Secret('k')))\n"
        "print(sorted({'aiohttp', 'httpx', 'tenacity', 'rich'} & set(sys.modules)))\n"
        "print('pyreqwest.client' in sys.modules)\n"
    )
    printed = fresh_python(code)
    assert printed.split() == ["[]", "True"]
