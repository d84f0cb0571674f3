"""The run's layout: phases load no later phase; ``payrun check`` meets run/ at public names."""

from __future__ import annotations

import ast
from pathlib import Path

import payrun
from _run_helpers import fresh_python

_ROOT = Path(payrun.__file__).parent
_LATER_THAN_PREFLIGHT = ("_execute", "_reconcile", "_track")


def test_preflight_loads_no_later_phase() -> None:
    """Importing preflight (with what it uses: new payees, the bank view) loads no later
    phase of the run (it once loaded reconciliation, and through it tracking)."""
    code = (
        "import sys\n"
        "import payrun.run._preflight\n"
        f"later = {list(_LATER_THAN_PREFLIGHT)!r}\n"
        "print(sorted(m for m in later if 'payrun.run.' + m in sys.modules) or 'none')\n"
    )
    assert fresh_python(code).split() == ["none"]


def _imports(source: Path) -> list[tuple[int, str, list[str]]]:
    """Each ``from payrun... import`` of ``source``: line, module, names."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.module or "", [alias.name for alias in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("payrun.")
    ]


def test_readiness_imports_only_public_names_of_other_packages() -> None:
    """``payrun check`` lives in its own package, outside run/, and imports no private module
    or name of another payrun package (the root's shared modules, ``payrun._models`` and the
    like, excepted)."""
    sources = sorted((_ROOT / "readiness").glob("*.py"))
    assert sources, f"no package payrun.readiness in {_ROOT}"
    for source in sources:
        for line, module, names in _imports(source):
            parts = module.split(".")
            if module.startswith("payrun.readiness") or len(parts) == 2:  # noqa: PLR2004
                continue
            private = [part for part in parts[1:] if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            assert not private, f"{source.name}:{line} imports {module} {names}"
