"""The run's layout: phases receive the run's state (short parameter lists), and every
module of payrun.run has its place (the imports show the order).

- The orchestrators (``_checks``, ``_schedule``, ``_pipeline``) call the phases in order: the
  check sequence, the schedule of the paying passes, the whole run. Each may import the
  phases, the helpers, the state and the orchestrators before it.
- The phases, in order (a phase with its parts is one step): start; preflight (with its
  parts); execute; reconcile (with ``_settle``); track. A phase imports no later phase and
  no orchestrator.
- The neutral helpers import no phase and no orchestrator, not even for a type.
- The run's state (``_state``) is imported by all: at run time it imports helpers only;
  it names the phases' products it carries (the ``Preflight``, the ``Confirmer``) in
  type-only imports, which load nothing at run time.
- ``__init__`` names the public names, loaded on first use.

Type-only imports count as imports everywhere but in ``_state``. A module not classified
here fails ``test_every_module_of_the_run_has_its_place`` until it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import payrun.run

_RUN = Path(payrun.run.__file__).parent
_MAX_PARAMETERS = 6
# The orchestrators, in order: each may import the ones before it, and all but orchestrators
_ORCHESTRATORS = ("_checks", "_schedule", "_pipeline")
# The phases of a run, in order, each with its parts: each may import its own step,
# earlier steps, neutral helpers and the state
_PHASES: tuple[frozenset[str], ...] = (
    frozenset({"_start"}),
    frozenset(
        {
            "_preflight",
            "_organization",
            "_bankview",
            "_names",
            "_changed",
            "_payees",
            "_approvals",
            "_confirm",
        }
    ),
    frozenset({"_execute"}),
    frozenset({"_settle", "_reconcile"}),
    frozenset({"_track"}),
)
_NEUTRAL = frozenset(
    {
        "_at_once",
        "_book",
        "_doubt",
        "_gate",
        "_lifecycle",
        "_matching",
        "_outcome",
        "_planned",
        "_refusal",
        "_stop",
        "_submissions",
    }
)
_STATE = "_state"
_FACADE = "__init__"
_PHASE_MODULES = frozenset().union(*_PHASES)


def _tree(module: str) -> ast.Module:
    return ast.parse((_RUN / f"{module}.py").read_text(encoding="utf-8"))


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller passes (self and cls not counted)."""
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _modules() -> list[str]:
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


def _is_type_checking(node: ast.stmt) -> bool:
    """True for ``if TYPE_CHECKING:`` (typing's name, or the package's own flag)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _named(node: ast.AST) -> set[str]:
    """The payrun.run modules an import statement names (a public name: the facade)."""
    found: set[str] = set()
    if isinstance(node, ast.ImportFrom) and node.module is not None:
        if node.module.startswith("payrun.run._"):
            found.add(node.module.removeprefix("payrun.run."))
        elif node.module == "payrun.run":
            found.update(a.name if a.name.startswith("_") else _FACADE for a in node.names)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("payrun.run."):
                found.add(alias.name.removeprefix("payrun.run.").split(".")[0])
    return found


def _run_imports(module: str, *, type_only: bool = True) -> set[str]:
    """The payrun.run modules ``module`` imports (its ``if TYPE_CHECKING:`` imports too
    unless ``type_only`` is False); lazy imports inside functions count."""
    found: set[str] = set()
    tree = _tree(module)
    for statement in tree.body:
        if _is_type_checking(statement) and not type_only:
            continue
        for node in ast.walk(statement):
            found |= _named(node)
    return found - {module}


def _step(module: str) -> int:
    return next(i for i, step in enumerate(_PHASES) if module in step)


def test_every_module_of_the_run_has_its_place() -> None:
    """Every module of payrun.run is an orchestrator, a phase (or part of one), a neutral
    helper, the state or the facade, and only one of them."""
    places = [*_ORCHESTRATORS, *_PHASE_MODULES, *_NEUTRAL, _STATE, _FACADE]
    assert len(places) == len(set(places)), "a module has two places"
    assert sorted(places) == _modules()


@pytest.mark.parametrize("orchestrator", _ORCHESTRATORS)
def test_an_orchestrator_imports_no_later_orchestrator(orchestrator: str) -> None:
    """checks -> schedule -> pipeline: an orchestrator imports only the ones before it."""
    later = set(_ORCHESTRATORS[_ORCHESTRATORS.index(orchestrator) + 1 :])
    assert not _run_imports(orchestrator) & later


@pytest.mark.parametrize("phase", sorted(_PHASE_MODULES))
def test_a_phase_imports_no_later_phase_and_no_orchestrator(phase: str) -> None:
    """start -> preflight -> execute -> reconcile -> track: a phase (or a part of one)
    imports its own step, earlier ones, neutral helpers and the state only."""
    step = _step(phase)
    allowed = set().union(*_PHASES[: step + 1]) | _NEUTRAL | {_STATE}
    assert _run_imports(phase) <= allowed, _run_imports(phase) - allowed


@pytest.mark.parametrize("helper", sorted(_NEUTRAL))
def test_a_neutral_helper_imports_no_phase_and_no_orchestrator(helper: str) -> None:
    """A neutral helper imports other helpers and the state only, not even a phase's type."""
    allowed = _NEUTRAL | {_STATE}
    assert _run_imports(helper) <= allowed, _run_imports(helper) - allowed


def test_the_state_imports_helpers_at_run_time_and_names_phases_only_for_types() -> None:
    """The state loads helpers only; its type-only imports name phases, never an
    orchestrator."""
    assert _run_imports(_STATE, type_only=False) <= _NEUTRAL
    assert _run_imports(_STATE) <= _NEUTRAL | _PHASE_MODULES
