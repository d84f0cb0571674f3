"""The sandbox bank as a raw ASGI application: limits, auth, latency, faults, dispatch.

A request to ``/v0/...`` goes through, in order (while a test holds payments with
``SandboxApp.hold_payments``, a create-payment first waits, as if the network held it on
its way: it is not yet counted in flight, and nothing else waits behind it):

1. the organization limit: with ``ORG_IN_FLIGHT_CAP`` requests already in flight it is
   answered 429 at once (and, with ``extra_429_rate``, a random share is refused the same
   way, as if other clients were busy); a refused request is not counted and changes nothing;
2. authentication: ``Authorization: ServiceAPIKey <secret>`` (or ``GriffinAPIKey``), else 401
   with ``www-authenticate: ServiceSession``; ``GET /v0/ping`` and the signature check
   ``/v0/security/message-signature/verify`` need no key;
3. routing (404, 405), then the per-account limit for submit-payment: with
   ``ACCOUNT_SUBMITS_CAP`` submits of that account in flight it is answered 429;
4. the latency sleep (``latency_ms`` plus up to ``jitter_ms`` either way), inside the
   in-flight window: a slow bank keeps requests in flight;
5. the body (413 above 1 MB); in live mode (signing keys registered) a request needing the
   key whose RFC 9421 signature does not verify is answered 401 (see ``_signatures``);
   then due submissions are settled, and the handler runs;
6. for create-payment and create-submission, ``fault_rate`` of the successes are then
   answered with a 500 or a dropped connection: the work is done, the client cannot know.

In-flight counts go down immediately before the final response is written, with no
``await`` in between, so a client that sends its next request the moment it reads a
response is never counted twice. At that moment the request also counts as answered for
the round-trip chains of ``/__sandbox/stats``: a request arriving later is one link
further down the longest chain than the deepest request answered before it arrived.
``/__sandbox/...`` (see ``_admin``) is outside all of this.

Every answer carries a ``Date`` header, on the bank's clock as its timestamps are
(``clock_offset_s`` sets that clock ahead of the true time, or behind when negative).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from payrun.sandbox import _admin, _routes_accounts, _routes_core, _routes_payments
from payrun.sandbox._http import MAX_BODY, ApiError, Reply, Request, error_body
from payrun.sandbox._payments import settle
from payrun.sandbox._routing import Context, Route, Router
from payrun.sandbox._seeding import register_signature_key
from payrun.sandbox._signatures import SignedMessage
from payrun.sandbox.seed import build_state, load_seed
from payrun.sandbox.state import SandboxState

__all__ = [
    "ACCOUNT_SUBMITS_CAP",
    "FAULT_KINDS",
    "ORG_IN_FLIGHT_CAP",
    "SETTLE_MARGIN_S",
    "AppState",
    "InjectedDropError",
    "SandboxApp",
    "create_app",
]

ORG_IN_FLIGHT_CAP = 50
"""Requests in flight for the organization beyond which the bank answers 429."""
ACCOUNT_SUBMITS_CAP = 3
"""Concurrent submit-payment requests per bank account beyond which the bank answers 429."""
FAULT_KINDS = ("500", "drop")
"""Injected fault kinds: a 500 error body, or the connection dropped mid-response."""
SETTLE_MARGIN_S = 1.0
"""What ``SandboxApp.settle_wait_s`` adds to the longest latency: a busy event loop."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_LOG = logging.getLogger("payrun.sandbox")
_JSON = [(b"content-type", b"application/json")]
# Built once: dumps() builds one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_AUTH_SCHEMES = (b"ServiceAPIKey ", b"GriffinAPIKey ")
_FAULTED_KINDS = frozenset({"create-payment", "submit"})


class InjectedDropError(ConnectionResetError):
    """Raised after a faulted response has started, so the server drops the connection.

    Over uvicorn the client sees the connection close after the status line and headers;
    in-process through ``httpx.ASGITransport`` this exception reaches the caller.
    """


@dataclass(slots=True)
class AppState:
    """``app.state``: where tests find the bank (``app.state.sandbox``)."""

    sandbox: SandboxState


@dataclass(slots=True)
class _Outcome:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]
    drop: bool = False


def _encode(reply: Reply) -> _Outcome:
    if reply.body is None:
        return _Outcome(reply.status, b"", reply.headers)
    body = _ENCODER.encode(reply.body).encode()
    return _Outcome(reply.status, body, [*_JSON, *reply.headers])


def _error(error: ApiError) -> _Outcome:
    return _encode(Reply(error.status, error.body(), error.headers))


async def _send(send: Send, outcome: _Outcome, date: tuple[bytes, bytes]) -> None:
    headers = [*outcome.headers, date, (b"content-length", str(len(outcome.body)).encode())]
    await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
    await send({"type": "http.response.body", "body": outcome.body})


async def _read_body(scope: Scope, receive: Receive) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and (not value.isdigit() or int(value) > MAX_BODY):
            raise ApiError(413, "payload-too-large", f"bodies are limited to {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(413, "payload-too-large", f"bodies are limited to {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class SandboxApp:
    """The ASGI callable; build it with ``create_app``."""

    def __init__(
        self,
        state: SandboxState,
        *,
        latency_ms: float = 0,
        jitter_ms: float = 0,
        fault_rate: float = 0.0,
        extra_429_rate: float = 0.0,
        deliver_after_ms: float = 200,
        fault_kinds: tuple[str, ...] = FAULT_KINDS,
        rng_seed: int | None = None,
    ) -> None:
        self.state = AppState(state)
        self.context = Context(state, deliver_after_s=deliver_after_ms / 1000)
        self.latency_s = latency_ms / 1000
        self.jitter_s = jitter_ms / 1000
        self.fault_rate = fault_rate
        self.extra_429_rate = extra_429_rate
        self.fault_kinds = fault_kinds
        self.rng = random.Random(rng_seed)
        self.router = Router()
        for module in (_routes_core, _routes_accounts, _routes_payments):
            module.register(self.router)
        self.admin = Router()
        _admin.register(self.admin)
        # The second the Date header was last made for, and its value.
        self._date = (-1, b"")
        # Set while create-payment requests may go on (see ``hold_payments``).
        self._payments_open = threading.Event()
        self._payments_open.set()
        self._let_through = 0
        self._hold_longest_s = 0.0
        self.payments_held = 0

    @property
    def sandbox(self) -> SandboxState:
        """The bank's state (also ``app.state.sandbox``)."""
        return self.state.sandbox

    @property
    def settle_wait_s(self) -> float:
        """How long after a request reached it this bank may still carry it out: the
        longest latency sleep (``latency_ms`` + ``jitter_ms``) and ``SETTLE_MARGIN_S``.

        A request does its work right after that sleep, or never: the body is read only
        then, and a client that went away meanwhile (a timeout, a kill) leaves no body, so
        the request is refused. A faulted answer (500, a dropped connection) comes after
        the work. This is the bound payrun's settle wait may use with this bank.
        """
        return self.latency_s + self.jitter_s + SETTLE_MARGIN_S

    @contextlib.contextmanager
    def hold_payments(self, *, after: int = 0, longest_s: float = 20.0) -> Iterator[None]:
        """While the block runs, let ``after`` more create-payment requests through, then
        hold each later one on its way in (at most ``longest_s`` seconds; not yet in flight)
        until the block ends; ``payments_held`` counts those waiting.

        A test control: a run's paying stops at a known point, however slow the machine,
        while the test does something else (another run of the same file).
        """
        self._let_through = after
        self._hold_longest_s = longest_s
        self._payments_open.clear()
        try:
            yield
        finally:
            self._payments_open.set()

    def _creates_payment(self, scope: Scope) -> bool:
        try:
            route, _args = self.router.match(scope["method"], scope["path"])
        except ApiError:
            return False
        return route.kind == "create-payment"

    async def _wait_while_held(self) -> None:
        if self._let_through > 0:
            self._let_through -= 1
            return
        deadline = time.monotonic() + self._hold_longest_s
        self.payments_held += 1
        try:
            # The gate opens from the test's thread: an asyncio.Event cannot be set from there
            while not self._payments_open.is_set() and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        finally:
            self.payments_held -= 1

    @property
    def api_key(self) -> str:
        """The secret to send as ``Authorization: ServiceAPIKey <secret>``."""
        return self.state.sandbox.api_key_secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "http":
            if scope["path"].startswith("/__sandbox/"):
                await self._serve_admin(scope, receive, send)
            else:
                await self._serve_api(scope, receive, send)
        elif scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    def _date_header(self) -> tuple[bytes, bytes]:
        """The ``Date`` header on the bank's clock (made once a second)."""
        second = int(time.time() + self.sandbox.clock_offset.total_seconds())
        if second != self._date[0]:
            text = format_datetime(datetime.fromtimestamp(second, UTC), usegmt=True)
            self._date = (second, text.encode())
        return (b"date", self._date[1])

    def _refuse(self, reason: str) -> _Outcome:
        self.state.sandbox.stats.rate_limited[reason] += 1
        detail = "too many requests in flight; let outstanding requests finish, then retry"
        return _encode(Reply(429, error_body(429, "too-many-requests", detail), []))

    async def _serve_api(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._payments_open.is_set() and self._creates_payment(scope):
            await self._wait_while_held()
        stats = self.state.sandbox.stats
        stats.requests += 1
        depth = stats.arrive()
        if stats.in_flight >= ORG_IN_FLIGHT_CAP:
            stats.answer(depth)
            await _send(send, self._refuse("org_in_flight"), self._date_header())
            return
        if self.extra_429_rate and self.rng.random() < self.extra_429_rate:
            stats.answer(depth)
            await _send(send, self._refuse("injected"), self._date_header())
            return
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        held: list[str] = []
        released = False
        try:
            outcome = await self._process(scope, receive, held, depth)
            # No await between this and writing the response
            self._release(held)
            released = True
            stats.answer(depth)
            if outcome.drop:
                # Promise a body, send none, and fail: the server closes the connection.
                headers = [*outcome.headers, self._date_header(), (b"content-length", b"2")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                raise InjectedDropError
            await _send(send, outcome, self._date_header())
        finally:
            if not released:
                self._release(held)
                stats.answer(depth)

    def _release(self, held: list[str]) -> None:
        stats = self.state.sandbox.stats
        stats.in_flight -= 1
        for account_id in held:
            stats.submits_in_flight[account_id] -= 1

    def _hold_submit(self, route: Route, args: tuple[str, ...], held: list[str]) -> _Outcome | None:
        state = self.state.sandbox
        payment = state.payments.get(args[0]) if route.kind == "submit" else None
        if payment is None:
            return None
        stats = state.stats
        if stats.submits_in_flight[payment.account_id] >= ACCOUNT_SUBMITS_CAP:
            return self._refuse("account_submits")
        held.append(payment.account_id)
        count = stats.submits_in_flight[payment.account_id] = (
            stats.submits_in_flight[payment.account_id] + 1
        )
        url = f"/v0/bank/accounts/{payment.account_id}"
        stats.max_concurrent_submits[url] = max(stats.max_concurrent_submits.get(url, 0), count)
        return None

    def _authorize(self, scope: Scope) -> None:
        secret = self.state.sandbox.api_key_secret.encode()
        for name, value in scope["headers"]:
            if name == b"authorization" and any(
                value == scheme + secret for scheme in _AUTH_SCHEMES
            ):
                return
        headers = [(b"www-authenticate", b"ServiceSession")]
        raise ApiError(401, "unauthorized", "Requires an API key to continue", headers=headers)

    def _route(self, scope: Scope) -> tuple[Route, tuple[str, ...]]:
        route, args = self.router.match(scope["method"], scope["path"])
        if not route.public:
            self._authorize(scope)
        org_id = self.state.sandbox.org_id
        if any(arg.startswith("og.") and arg != org_id for arg in args):
            raise ApiError(404, "not-found", "no such organization")
        return route, args

    async def _process(
        self, scope: Scope, receive: Receive, held: list[str], depth: int
    ) -> _Outcome:
        try:
            route, args = self._route(scope)
            if route.kind == "create-payment":
                self.state.sandbox.stats.payment_arrives(depth)
            refused = self._hold_submit(route, args, held)
            if refused is not None:
                return refused
            if self.latency_s or self.jitter_s:
                jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
                # asyncio's own: anyio's would first ask which event loop runs (sniffio)
                await asyncio.sleep(max(0.0, self.latency_s + jitter))
            body = await _read_body(scope, receive)
            if not route.public:
                self._check_signature(scope, body)
            return self._handle(route, args, scope, body)
        except ApiError as error:
            return _error(error)

    def _check_signature(self, scope: Scope, body: bytes) -> None:
        """In live mode, refuse (401) a request whose signature does not verify."""
        state = self.state.sandbox
        if state.signatures is None:
            return
        raw_path = scope.get("raw_path") or scope["path"].encode()
        message = SignedMessage(
            scope["method"],
            raw_path.decode("latin-1"),
            scope["query_string"].decode("latin-1"),
            scope["headers"],
            body,
        )
        problem = state.signatures.problem(message, state.now().timestamp())
        if problem is not None:
            detail = f"the request's message signature could not be verified: {problem}"
            raise ApiError(401, "unauthorized", detail)

    def _handle(self, route: Route, args: tuple[str, ...], scope: Scope, body: bytes) -> _Outcome:
        request = Request(
            scope["method"], scope["path"], scope["query_string"], scope["headers"], body
        )
        context = self.context
        settle(context.state, context.clock())
        try:
            outcome = _encode(route.handler(context, request, args))
        except ApiError as error:
            return _error(error)
        except Exception:
            # A sandbox bug must still answer, and visibly
            _LOG.exception("sandbox handler failed for %s %s", scope["method"], scope["path"])
            return _encode(Reply(500, error_body(500, "internal-error", "sandbox bug"), []))
        if route.kind in _FAULTED_KINDS and self.fault_rate and self.rng.random() < self.fault_rate:
            return self._fault()
        return outcome

    def _fault(self) -> _Outcome:
        kind = self.rng.choice(self.fault_kinds)
        self.state.sandbox.stats.faults_injected[kind] += 1
        if kind == "drop":
            return _Outcome(200, b"{}", _JSON, drop=True)
        return _encode(Reply(500, error_body(500, "internal-server-error", "injected fault"), []))

    async def _serve_admin(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            route, args = self.admin.match(scope["method"], scope["path"])
            body = await _read_body(scope, receive)
            outcome = self._handle(route, args, scope, body)
        except ApiError as error:
            outcome = _error(error)
        await _send(send, outcome, self._date_header())


def create_app(
    state: SandboxState | None = None,
    *,
    latency_ms: float = 0,
    jitter_ms: float = 0,
    fault_rate: float = 0.0,
    extra_429_rate: float = 0.0,
    deliver_after_ms: float = 200,
    seed: dict[str, Any] | str | Path | None = None,
    api_key: str | None = None,
    fault_kinds: tuple[str, ...] = FAULT_KINDS,
    rng_seed: int | None = None,
    bare_payee_creditors: bool = False,
    clock_offset_s: float = 0.0,
    signature_keys: Mapping[str, str] | None = None,
) -> SandboxApp:
    """Build the sandbox bank; ``seed`` is a seed dict or a JSON file (default seed if None).

    ``signature_keys`` (key id to Ed25519 public key PEM) puts the organization in live
    mode: every request that needs the API key must then carry a valid RFC 9421 signature
    by one of them (a ``SeedError`` for a key that is not an Ed25519 public key).

    ``bare_payee_creditors`` shows payments to payees with a uk-domestic creditor.
    ``clock_offset_s`` sets the bank's clock that many seconds ahead of the true time
    (behind when negative): its timestamps, ``created-at`` filters and ``Date`` headers.
    """
    if state is None:
        seed_data = load_seed(seed) if isinstance(seed, str | Path) else seed
        state = build_state(seed_data, api_key=api_key)
    elif api_key is not None:
        state.api_key_secret = api_key
    state.bare_payee_creditors = bare_payee_creditors
    for key_id, pem in (signature_keys or {}).items():
        register_signature_key(state, key_id, pem, f"the public key for {key_id!r}")
    state.clock_offset = timedelta(seconds=clock_offset_s)
    unknown = set(fault_kinds) - set(FAULT_KINDS)
    if unknown or not fault_kinds:
        message = f"fault_kinds must be drawn from {FAULT_KINDS}"
        raise ValueError(message)
    return SandboxApp(
        state,
        latency_ms=latency_ms,
        jitter_ms=jitter_ms,
        fault_rate=fault_rate,
        extra_429_rate=extra_429_rate,
        deliver_after_ms=deliver_after_ms,
        fault_kinds=fault_kinds,
        rng_seed=rng_seed,
    )
