"""``python -m payrun``: the same as the ``payrun`` console script."""

from __future__ import annotations

from payrun.cli import main

raise SystemExit(main())
