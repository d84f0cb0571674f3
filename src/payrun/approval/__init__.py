"""Approved plans: a second person approves exactly what will be paid.

A plan (``Plan``) is the rows a run would pay, exactly as read, with the pay date and the
policy's digest; its id is the sha256 of its canonical text, and it is data in the
batch's ledger. An approval is an Ed25519 signature over the id by an approver's key
(``_keys``); the policy (``_policy``) says who may approve and how many must; ``_rules``
applies it, ``_store`` keeps plans and the audit trail in a ledger, and ``_flow`` holds the
library calls of ``payrun plan``, ``approve`` and ``run --plan``. A run only verifies a
plan (``payrun.run`` pays ``ApprovedRows``, nothing else).
"""

from __future__ import annotations

from payrun.approval._flow import PlanMade as PlanMade
from payrun.approval._flow import approve_plan as approve_plan
from payrun.approval._flow import approved_run as approved_run
from payrun.approval._flow import approved_stored_batch as approved_stored_batch
from payrun.approval._flow import copy_plan as copy_plan
from payrun.approval._flow import make_plan as make_plan
from payrun.approval._flow import open_plan as open_plan
from payrun.approval._flow import plan_options as plan_options
from payrun.approval._flow import refuse_unplanned as refuse_unplanned
from payrun.approval._flow import reject_plan as reject_plan
from payrun.approval._keys import load_private_key as load_private_key
from payrun.approval._keys import new_private_key_pem as new_private_key_pem
from payrun.approval._keys import public_key_pem as public_key_pem
from payrun.approval._keys import sign_plan as sign_plan
from payrun.approval._keys import signature_verifies as signature_verifies
from payrun.approval._plan import Plan as Plan
from payrun.approval._plan import PlanRow as PlanRow
from payrun.approval._plan import plan_from_document as plan_from_document
from payrun.approval._policy import NO_POLICY as NO_POLICY
from payrun.approval._policy import Approver as Approver
from payrun.approval._policy import Policy as Policy
from payrun.approval._policy import load_policy as load_policy
from payrun.approval._rules import Approval as Approval
from payrun.approval._rules import Rejection as Rejection
from payrun.approval._rules import approvals_needed as approvals_needed
from payrun.approval._rules import check_approvals as check_approvals
from payrun.approval._rules import refuse_approver as refuse_approver
from payrun.approval._rules import refuse_closed as refuse_closed
from payrun.approval._rules import refuse_outside_policy as refuse_outside_policy
from payrun.approval._rules import refuse_rejecter as refuse_rejecter
from payrun.approval._store import approvals_of as approvals_of
from payrun.approval._store import find_plan as find_plan
from payrun.approval._store import record_approval as record_approval
from payrun.approval._store import record_plan as record_plan

__all__ = [
    "NO_POLICY",
    "Approval",
    "Approver",
    "Plan",
    "PlanMade",
    "PlanRow",
    "Policy",
    "Rejection",
    "approvals_needed",
    "approvals_of",
    "approve_plan",
    "approved_run",
    "approved_stored_batch",
    "check_approvals",
    "copy_plan",
    "find_plan",
    "load_policy",
    "load_private_key",
    "make_plan",
    "new_private_key_pem",
    "open_plan",
    "plan_from_document",
    "plan_options",
    "public_key_pem",
    "record_approval",
    "record_plan",
    "refuse_approver",
    "refuse_closed",
    "refuse_outside_policy",
    "refuse_rejecter",
    "refuse_unplanned",
    "reject_plan",
    "sign_plan",
    "signature_verifies",
]
