"""``payrun check``: is this setup ready to pay? Reads only, before any run (``_checklist``).

It makes a run's first reads (the organization, through ``payrun.run.find_organization``,
and a source account's state) without paying anything, so it is not a phase of the run.
"""

from __future__ import annotations

from payrun.readiness._checklist import Check as Check
from payrun.readiness._checklist import Readiness as Readiness
from payrun.readiness._checklist import Signing as Signing
from payrun.readiness._checklist import check_readiness as check_readiness

__all__ = ["Check", "Readiness", "Signing", "check_readiness"]
