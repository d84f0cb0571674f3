"""``python -m payrun`` for the tests that run payrun in a process of its own and kill it.

The same entry point with one change. A run started right after another was killed gives
the bank ``SETTLE_AFTER_CRASH_SECONDS`` (60 s) from that run's last intents to finish what
it may have sent, before it looks. The test banks answer within about 40 ms, so these runs
give them 1 s: a kill -9 trial's rerun still waits, and still finds what the bank made.
"""

from __future__ import annotations

import payrun.late_answers
from payrun.cli import main

payrun.late_answers.SETTLE_AFTER_CRASH_SECONDS = 1.0

raise SystemExit(main())
