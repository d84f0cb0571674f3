"""The review page's routes: request -> the library calls the CLI makes -> a template.

Sessions are Starlette's signed cookies (itsdangerous; HttpOnly, SameSite=Strict, expiring
after ``SESSION_SECONDS``). Every POST carries the session's CSRF token (403 without it).
Approvals are signed in process (``payrun.approval.approve_plan``) with the key the server
holds for the approver; plans and runs are ``payrun plan``/``payrun run --plan`` children
(``_runs``). Errors a user can act on are shown as one line on the page, never a traceback.
"""

from __future__ import annotations

import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from payrun._models import AuditEntry, format_money, utc_now
from payrun.approval import Policy, approve_plan, open_plan, reject_plan
from payrun.errors import PayrunError
from payrun.serve._batches import (
    MAX_UPLOAD_BYTES,
    StoredBatch,
    all_plans,
    find_batch,
    index_plan,
    plan_batch,
    store_upload,
)
from payrun.serve._plans import PlanView, cop_words, held_reasons, plan_view
from payrun.serve._runs import Bank, make_plan_child, start_run
from payrun.serve._users import User, check_password, key_path, load_users

__all__ = ["ROWS_PER_PAGE", "SESSION_SECONDS", "ServeConfig", "create_app"]

SESSION_SECONDS = 8 * 3600
"""A sign-in lasts a working day."""
ROWS_PER_PAGE = 200
"""Plan rows per page (a 10,000-row plan is 50 pages, each fast to show and print)."""
REFRESH_SECONDS = 1
"""How often the page of a run in progress reloads itself (meta refresh: no script)."""
_NOT_YOURS = "You cannot {what} this plan: it needs an approver other than its maker."
_MAX_FIELDS = 20
"""More fields than any form here has."""
_TEMPLATES = Path(__file__).with_name("templates")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """What the server serves: its folder, users file, policy, bank and session key."""

    ledger_dir: Path
    users_file: Path
    policy: Policy
    bank: Bank
    session_key: str


def create_app(config: ServeConfig) -> Starlette:
    """The review page as an ASGI app."""
    templates = Jinja2Templates(directory=str(_TEMPLATES))
    templates.env.filters["money"] = lambda value: f"{value:,.2f}"
    pages = _Pages(config, templates)
    routes = [
        Route("/", pages.home),
        Route("/sign-in", pages.sign_in_form),
        Route("/sign-in", pages.sign_in, methods=["POST"]),
        Route("/sign-out", pages.sign_out, methods=["POST"]),
        Route("/upload", pages.upload_form),
        Route("/upload", pages.upload, methods=["POST"]),
        Route("/batches/{token}", pages.verdict),
        Route("/batches/{token}/plan", pages.request_approval, methods=["POST"]),
        Route("/plans", pages.plans),
        Route("/plans/{plan_id}", pages.plan),
        Route("/plans/{plan_id}/approve", pages.approve, methods=["POST"]),
        Route("/plans/{plan_id}/reject", pages.reject, methods=["POST"]),
        Route("/plans/{plan_id}/pay", pages.pay, methods=["POST"]),
        Route("/plans/{plan_id}/report.xlsx", pages.report),
    ]
    session = Middleware(
        SessionMiddleware,
        secret_key=config.session_key,
        session_cookie="payrun_session",
        max_age=SESSION_SECONDS,
        same_site="strict",
    )
    return Starlette(routes=routes, middleware=[session])


class _Refused(Exception):  # noqa: N818 - a response, not an error payrun raises
    """Answer with ``status`` and one line (raised by the checks, caught by the route)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Pages:
    """The route handlers, sharing the config and templates."""

    def __init__(self, config: ServeConfig, templates: Jinja2Templates) -> None:
        self.config = config
        self.templates = templates

    # -- helpers ---------------------------------------------------------------------

    def _csrf(self, request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    def _render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.update(user=self._user(request), csrf=self._csrf(request))
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def _message(self, request: Request, status: int, message: str) -> Response:
        return self._render(request, "message.html", status, message=message)

    def _user(self, request: Request) -> User | None:
        name = request.session.get("user")
        if not isinstance(name, str):
            return None
        return load_users(self.config.users_file).get(name)

    async def _form(self, request: Request, *, files: int = 0) -> dict[str, Any]:
        """The POSTed fields (a file as (name, bytes)), once the CSRF token was checked (403
        without); the upload's temporary file is closed before this returns."""
        fields: dict[str, Any] = {}
        async with request.form(max_files=files, max_fields=_MAX_FIELDS) as form:
            for name, value in form.items():
                if isinstance(value, str):
                    fields[name] = value
                else:
                    fields[name] = (value.filename or "", await value.read())
        sent = fields.get("csrf")
        expected = request.session.get("csrf")
        if not (isinstance(sent, str) and isinstance(expected, str)) or not hmac.compare_digest(
            sent, expected
        ):
            msg = "This form has expired or did not come from this page: reload it and try again."
            raise _Refused(403, msg)
        return fields

    def _signed_in(self, request: Request) -> User:
        user = self._user(request)
        if user is None:
            raise _Refused(401, "Sign in first.")
        return user

    def _plan(self, plan_id: str) -> StoredBatch:
        stored = plan_batch(self.config.ledger_dir, plan_id)
        if stored is None:
            raise _Refused(404, "There is no such plan here.")
        return stored

    def _view(self, plan_id: str) -> PlanView:
        return plan_view(self._plan(plan_id), plan_id, self.config.policy, utc_now())

    # -- sign-in -----------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        """Plans when signed in, else the sign-in page."""
        target = "/plans" if self._user(request) else "/sign-in"
        return RedirectResponse(target, status_code=303)

    async def sign_in_form(self, request: Request) -> Response:
        """The sign-in page."""
        return self._render(request, "sign_in.html", error=None)

    async def sign_in(self, request: Request) -> Response:
        """Check the name and password; a wrong one says so without saying which."""
        try:
            form = await self._form(request)
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        name = str(form.get("name", ""))
        user = load_users(self.config.users_file).get(name)
        if not check_password(user, str(form.get("password", ""))):
            error = "The name or password is wrong."
            return self._render(request, "sign_in.html", 401, error=error)
        # A new session on sign-in: a session id planted before it is worth nothing
        request.session.clear()
        request.session["user"] = name
        return RedirectResponse("/plans", status_code=303)

    async def sign_out(self, request: Request) -> Response:
        """End the session."""
        try:
            await self._form(request)
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        request.session.clear()
        return RedirectResponse("/sign-in", status_code=303)

    # -- upload and verdict ----------------------------------------------------------------

    async def upload_form(self, request: Request) -> Response:
        """The upload page."""
        if self._user(request) is None:
            return RedirectResponse("/sign-in", status_code=303)
        return self._render(request, "upload.html", error=None)

    async def upload(self, request: Request) -> Response:
        """Keep the file under a new name, check it, and show the verdict."""
        try:
            self._signed_in(request)
            length = request.headers.get("content-length", "")
            if not length.isdigit():
                raise _Refused(411, "The upload must say its length: use the page's form.")
            if int(length) > MAX_UPLOAD_BYTES:
                raise _Refused(
                    413, f"The file is larger than {MAX_UPLOAD_BYTES // 1_048_576} MB: split it."
                )
            form = await self._form(request, files=1)
            upload = form.get("batch")
            if not isinstance(upload, tuple) or not upload[0]:
                raise _Refused(400, "Choose the batch file to check.")
            stored = store_upload(self.config.ledger_dir, *upload)
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        except PayrunError as error:
            return self._render(request, "upload.html", 400, error=str(error))
        return RedirectResponse(f"/batches/{stored.token}", status_code=303)

    async def verdict(self, request: Request) -> Response:
        """The verdict table, counts and total; "Request approval" when payable."""
        if self._user(request) is None:
            return RedirectResponse("/sign-in", status_code=303)
        stored = find_batch(self.config.ledger_dir, request.path_params["token"])
        if stored is None:
            return self._message(request, 404, "There is no such batch here.")
        verdict = stored.verdict()
        payable = verdict["valid"] > 0 and not verdict.get("file_error")
        return self._render(
            request, "verdict.html", stored=stored, verdict=verdict, payable=payable
        )

    async def request_approval(self, request: Request) -> Response:
        """Make the plan, as ``payrun plan`` does, and show it."""
        from starlette.concurrency import run_in_threadpool

        try:
            user = self._signed_in(request)
            await self._form(request)
            stored = find_batch(self.config.ledger_dir, request.path_params["token"])
            if stored is None:
                raise _Refused(404, "There is no such batch here.")
            plan_id = await run_in_threadpool(make_plan_child, stored, user.name, self.config.bank)
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        except PayrunError as error:
            return self._message(request, 409, str(error))
        index_plan(self.config.ledger_dir, plan_id, stored)
        # Read and check it once now, so its page answers at once
        await run_in_threadpool(plan_view, stored, plan_id, self.config.policy, utc_now())
        return RedirectResponse(f"/plans/{plan_id}", status_code=303)

    # -- plans -------------------------------------------------------------------------------

    async def plans(self, request: Request) -> Response:
        """Every plan and its state."""
        if self._user(request) is None:
            return RedirectResponse("/sign-in", status_code=303)
        now = utc_now()
        views = [
            plan_view(stored, plan_id, self.config.policy, now)
            for plan_id, stored in all_plans(self.config.ledger_dir)
        ]
        return self._render(request, "plans.html", views=views)

    async def plan(self, request: Request) -> Response:
        """The plan page: rows, totals, highlights, decisions, and its run."""
        user = self._user(request)
        if user is None:
            return RedirectResponse("/sign-in", status_code=303)
        try:
            view = self._view(request.path_params["plan_id"])
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        page = _page_number(request.query_params.get("page"), len(view.plan.rows))
        start = (page - 1) * ROWS_PER_PAGE
        context: dict[str, Any] = {
            "view": view,
            "plan": view.plan,
            "rows": view.plan.rows[start : start + ROWS_PER_PAGE],
            "page": page,
            "pages": max(1, -(-len(view.plan.rows) // ROWS_PER_PAGE)),
            "new_rows": frozenset(view.plan.new_payee_rows),
            "changed_rows": frozenset(view.plan.changed_detail_rows),
            "held": held_reasons(view.stored, view.plan),
            "cop_checks": [(check, cop_words(check)) for check in view.plan.payee_checks],
            "cop_rows": {
                row: cop_words(check) for check in view.plan.payee_checks for row in check.rows
            },
            "may_approve": _may_approve(user, view),
            "refresh": REFRESH_SECONDS if view.state == "paying" else None,
            "format_money": format_money,
        }
        return self._render(request, "plan.html", **context)

    async def approve(self, request: Request) -> Response:
        """Sign and record the approval with the server-held key of the approver."""
        plan_id = request.path_params["plan_id"]
        try:
            user, form, view = await self._decider(request, plan_id, "approve")
            note = str(form.get("note", "")).strip() or None
            approve_plan(
                view.stored.ledger,
                view.stored.path,
                plan_id,
                name=user.name,
                key_path=key_path(self.config.users_file, user.name),
                note=note,
                policy=self.config.policy,
            )
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        except PayrunError as error:
            return self._message(request, 409, str(error))
        return RedirectResponse(f"/plans/{plan_id}", status_code=303)

    async def reject(self, request: Request) -> Response:
        """Record the rejection (with its note)."""
        plan_id = request.path_params["plan_id"]
        try:
            user, form, view = await self._decider(request, plan_id, "reject")
            note = str(form.get("note", "")).strip()
            if not note:
                raise _Refused(400, "Say why in the Note before rejecting: the maker reads it.")
            reject_plan(
                view.stored.ledger,
                view.stored.path,
                plan_id,
                name=user.name,
                note=note,
                policy=self.config.policy,
                key_path=key_path(self.config.users_file, user.name),
            )
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        except PayrunError as error:
            return self._message(request, 409, str(error))
        return RedirectResponse(f"/plans/{plan_id}", status_code=303)

    async def _decider(
        self, request: Request, plan_id: str, what: str
    ) -> tuple[User, dict[str, Any], PlanView]:
        """The signed-in user who may ``what`` (approve, reject) the plan, the form and the
        plan; a maker or a non-approver is refused (403) and the attempt recorded."""
        user = self._signed_in(request)
        form = await self._form(request)
        view = self._view(plan_id)
        if not _may_approve(user, view):
            self._record_refusal(view, user, what)
            msg = f"You cannot {what} this plan: it needs an approver other than its maker."
            raise _Refused(403, msg)
        return user, form, view

    def _record_refusal(self, view: PlanView, user: User, what: str) -> None:
        """Append a refused approve/reject to the plan's audit trail."""
        from payrun.ledger import open_ledger

        detail = json.dumps({"refused": f"{what} by {user.role} {user.name}", "status": 403})
        entry = AuditEntry(utc_now(), f"{what}-refused", user.name, view.plan_id, detail)
        try:
            with open_ledger(view.stored.ledger) as store:
                store.append_audit(entry)
        except PayrunError as error:
            _log(f"could not record a refused {what} by {user.name}: {error}")

    async def pay(self, request: Request) -> Response:
        """Start (or resume) ``payrun run BATCH --plan ID``."""
        plan_id = request.path_params["plan_id"]
        try:
            self._signed_in(request)
            await self._form(request)
            view = self._view(plan_id)
            if not view.can_pay:
                raise _Refused(409, f"This plan cannot be paid now: it is {view.state}.")
            _still_reads(view)
            start_run(view.stored, plan_id, self.config.bank)
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        except PayrunError as error:
            return self._message(request, 409, str(error))
        return RedirectResponse(f"/plans/{plan_id}", status_code=303)

    async def report(self, request: Request) -> Response:
        """The run's .xlsx report."""
        try:
            self._signed_in(request)
            view = self._view(request.path_params["plan_id"])
        except _Refused as refused:
            return self._message(request, refused.status, refused.message)
        if not view.files.report.exists():
            return self._message(request, 404, "The report is written when the run ends.")
        name = f"payrun-report-{view.plan_id[:12]}.xlsx"
        return FileResponse(view.files.report, filename=name)


def _may_approve(user: User, view: PlanView) -> bool:
    """An approver who is not the plan's maker, while the plan is open."""
    return user.role == "approver" and user.name != view.plan.maker and view.open


def _still_reads(view: PlanView) -> None:
    """Refuse to start a run of a file that no longer reads as its plan (or a closed plan)."""
    from payrun.ledger import open_ledger

    with open_ledger(view.stored.ledger, readonly=True) as store:
        open_plan(store, view.stored.path, view.plan_id, now=utc_now())


def _page_number(text: str | None, rows: int) -> int:
    pages = max(1, -(-rows // ROWS_PER_PAGE))
    try:
        return min(max(1, int(text or "1")), pages)
    except ValueError:
        return 1


def _log(line: str) -> None:
    import sys

    sys.stderr.write(f"payrun serve: {line}\n")
