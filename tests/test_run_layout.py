"""The run's layout: phases receive the run's state (short parameter lists), and a phase
never imports a later one (the files show the order)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import payrun.run

_RUN = Path(payrun.run.__file__).parent
_MAX_PARAMETERS = 6
# The phases of a run, in order: each may import earlier ones and neutral helpers only
_PHASES = ("_start", "_preflight", "_execute", "_reconcile", "_track")


def _tree(module: str) -> ast.Module:
    return ast.parse((_RUN / f"{module}.py").read_text(encoding="utf-8"))


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller passes (self and cls not counted)."""
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _modules() -> list[object]:
    return [p.stem for p in sorted(_RUN.glob("*.py"))]


@pytest.mark.parametrize("module", _modules())
def test_no_function_of_the_run_takes_more_than_six_parameters(module: str) -> None:
    """Every function in payrun.run takes at most 6 parameters: the run's state is one object."""
    long = [
        f"{node.name} (line {node.lineno}): {_parameters(node)}"
        for node in ast.walk(_tree(module))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _parameters(node) > _MAX_PARAMETERS
    ]
    assert not long, f"{module}: {long}"


def _run_imports(module: str) -> set[str]:
    """The payrun.run modules ``module`` imports (type-only imports included)."""
    found: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("payrun.run._"):
                found.add(node.module.removeprefix("payrun.run."))
            elif node.module == "payrun.run":
                found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("phase", _PHASES)
def test_a_phase_imports_no_later_phase(phase: str) -> None:
    """start -> preflight -> execute -> reconcile -> track: no phase imports a later one."""
    later = set(_PHASES[_PHASES.index(phase) + 1 :])
    assert not _run_imports(phase) & later
