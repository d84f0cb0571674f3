"""``BankClient``: the bank's ``/v0`` REST API as typed async methods.

Input: a ``Transport`` (``make_transport``; tests bring in-process ones), the ``Settings``
(base URL, API key), an ``AdaptiveLimiter`` shared by every request of the organization, a
``RetryPolicy``, and optionally an ``on_attempt`` hook.
Output: ``payrun.bank.wire`` values; failures only as ``payrun.errors.BankError`` subclasses.

Each request is built once as it goes on the wire (``PreparedRequest``: method, absolute
URL, headers with the ``Authorization``, the JSON body as bytes); before every attempt,
retries included, ``on_attempt`` sees it and returns what is sent; with a signing key in
the ``Settings``, ``payrun.bank.signing.RequestSigner`` then signs what is sent.

Every attempt holds one limiter slot exactly while it is on the wire (never while
backing off). Reads (GET and the read-only searches) are retried on 429, connection
errors, timeouts and 5xx. Writes (create payment, submit, create payee, CoP) are
retried only on 429 and when the request provably never left (the transport's
``NotSent``); any other failure of a write (``MaybeSent``, a 5xx) raises
``OutcomeUnknownError`` at once, for the caller to reconcile.

Every request goes to the base URL's origin only (``BankOrigin``): a URL from an answer or
the ledger that points elsewhere is a ``BankError`` and nothing is sent there, and an answer
whose parsed value holds such a link is unreadable (an unknown outcome to a write). Answers
over ``MAX_ANSWER_BYTES``, answers that are not a JSON object, and list answers without
their named array are bank errors too; a base URL that redirects is a ``ConfigError``.
So are answers about another resource than the one asked for (an account read, an account
search, a payees, payments or restrictions list; a payee create's or a Confirmation of
Payee's is an unknown outcome), and a list that
does not end (``_Paging``: its own ``meta.page.total``, repeated pages, ``MAX_LIST_PAGES``).
Every error's text is masked for the API key and any other ``secrets`` given.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from functools import partial
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlencode

from payrun._models import format_money
from payrun.bank._masking import Secrets
from payrun.bank._origin import BankOrigin
from payrun.bank._refusals import (
    answer_object,
    decode_answer,
    error_from_response,
    unreadable_answer,
)
from payrun.bank._transport import (
    MAX_ANSWER_BYTES,
    AnswerTooLargeError,
    AttemptHook,
    MaybeSent,
    NotSent,
    PreparedRequest,
    Transport,
)
from payrun.bank.clock import BankClock
from payrun.bank.limiter import AdaptiveLimiter
from payrun.bank.retry import DEFAULT_RETRY, RetryPolicy
from payrun.bank.wire import (
    BankAccount,
    CopResult,
    Event,
    Organization,
    Payee,
    Payment,
    Restriction,
    Submission,
    format_timestamp,
    parse_account,
    parse_cop_result,
    parse_event,
    parse_organization,
    parse_payee,
    parse_payment,
    parse_restriction,
    parse_submission,
    payee_parser,
    payment_parser,
)
from payrun.config import Settings, redact_url
from payrun.errors import (
    AuthError,
    BankError,
    BankRejectedError,
    BankUnavailableError,
    ConfigError,
    OutcomeUnknownError,
    RateLimitedError,
)

__all__ = ["MAX_LIST_PAGES", "PAGE_SIZE", "BankClient"]

PAGE_SIZE = 200
"""The largest page the bank serves."""

MAX_LIST_PAGES = 20_000
"""The most pages payrun reads of one list: 4,000,000 items at ``PAGE_SIZE`` a page, more
than the payees, payments or submission events of the largest batch (1,000,000 rows). A
list still going on after that is a bank error, never read for ever."""

T = TypeVar("T")
Json = dict[str, Any]

_HTTP_NOT_FOUND = 404
_HTTP_TOO_MANY = 429
_HTTP_REDIRECT = 300
_HTTP_CLIENT_ERROR = 400
_HTTP_SERVER_ERROR = 500
_HTTP_UNAUTHORIZED = 401
_INDEX = "/v0/index"
_VERIFY_SIGNATURE = "/v0/security/message-signature/verify"
# Characters a URL may carry as they are: anything else (non-ASCII, quotes, braces) is
# percent-encoded once, so the URL built is the URL sent
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
# A URL of only those and the characters ``quote`` never encodes is sent as it is: one
# match instead of ``quote``'s pass over every character (most URLs, on every request)
_URL_AS_IS = re.compile(r"[A-Za-z0-9_.\-~!#$%&'()*+,/:;=?@\[\]]*")
# Built once: ``json.dumps`` with separators makes an encoder on every call
_JSON_BODY = json.JSONEncoder(separators=(",", ":"))


def _retry_read(exc: BaseException) -> bool:
    return isinstance(exc, RateLimitedError | BankUnavailableError | OutcomeUnknownError)


def _retry_write(exc: BaseException) -> bool:
    return isinstance(exc, RateLimitedError | BankUnavailableError)


class BankClient:
    """Typed access to the bank; use as ``async with BankClient(transport, settings) as bank:``.

    The client owns ``transport`` and closes it in ``aclose()``. ``clock`` is the bank's
    clock, measured from the ``Date`` header of every answer. ``secrets`` are masked in
    every error besides the API key. ``on_attempt`` is called with each request before
    every attempt, retries included, and what it returns is sent (signed afresh when the
    settings carry a signing key).
    """

    __slots__ = (
        "_base_url",
        "_headers",
        "_json_headers",
        "_limiter",
        "_on_attempt",
        "_origin",
        "_retry",
        "_secrets",
        "_signing",
        "_transport",
        "clock",
    )

    def __init__(
        self,
        transport: Transport,
        settings: Settings,
        *,
        limiter: AdaptiveLimiter | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        secrets: Iterable[str] = (),
        on_attempt: AttemptHook | None = None,
    ) -> None:
        self._transport = transport
        self._base_url = settings.base_url
        self._limiter = limiter if limiter is not None else AdaptiveLimiter(50)
        self._retry = retry
        self.clock = BankClock()
        self._signing = settings.signing is not None
        self._on_attempt = self._signed(on_attempt, settings)
        self._origin = BankOrigin(settings.base_url)
        api_key = settings.api_key.reveal()
        self._secrets = Secrets([api_key, *secrets])
        self._headers: Mapping[str, str] = {
            "Authorization": f"{settings.auth_scheme} {api_key}",
            "Accept": "application/json",
            "User-Agent": "payrun",
        }
        self._json_headers: Mapping[str, str] = {
            **self._headers,
            "Content-Type": "application/json",
        }

    def __repr__(self) -> str:
        return f"BankClient(base_url={self._base_url!r}, limiter={self._limiter!r})"

    def _signed(self, on_attempt: AttemptHook | None, settings: Settings) -> AttemptHook | None:
        """``on_attempt``, then the signature when ``settings`` carry a signing key (its
        ``created`` on the bank's clock as measured, so a machine's clock that is off by
        minutes is not refused once the bank has answered once)."""
        if settings.signing is None:
            return on_attempt
        # Loaded only by signed clients
        from payrun.bank.signing import RequestSigner

        signer = RequestSigner(settings.signing, clock=lambda: self.clock.now().timestamp())
        if on_attempt is None:
            return signer
        first = on_attempt
        return lambda request: signer(first(request))

    @property
    def limiter(self) -> AdaptiveLimiter:
        """The in-flight limiter every request of this client holds a slot of."""
        return self._limiter

    async def __aenter__(self) -> BankClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the transport and its connections."""
        await self._transport.aclose()

    # -- navigation and accounts -------------------------------------------------------

    async def organization(self) -> Organization:
        """The key's organization: the index's ``organization-url``, else via the API key.

        A redirect from the index means the base URL is not the bank's API: a ``ConfigError``.
        """
        return (await self.located_organization())[1]

    async def located_organization(self) -> tuple[str, Organization]:
        """``organization`` with the URL the index named (``organization_url``)."""
        url = await self.organization_url()
        return url, await self.read_organization(url)

    async def organization_url(self) -> str:
        """The URL of the key's organization: the index's ``organization-url``, else the
        API key's (a redirect from the index: ``ConfigError``, as ``organization``)."""
        try:
            index = await self._send("GET", _INDEX)
        except BankRejectedError as exc:
            if exc.status is None or not _HTTP_REDIRECT <= exc.status < _HTTP_CLIENT_ERROR:
                raise
            msg = (
                f"the base URL {self._origin.shown} answered GET {_INDEX} with a redirect"
                f" (HTTP {exc.status}), which payrun never follows: set PAYRUN_BASE_URL (or"
                " --base-url) to the bank API's own address"
            )
            raise ConfigError(msg) from None
        org_url = index.get("organization-url")
        if not isinstance(org_url, str):
            key = await self._send("GET", self._decode(lambda d: d["api-key-url"], index, "index"))
            org_url = self._decode(lambda d: d["organization-url"], key, "API key")
        return str(org_url)

    async def read_organization(self, url: str) -> Organization:
        """The organization at ``url`` (``organization_url``'s answer)."""
        return self._decode(parse_organization, await self._send("GET", url), "organization")

    async def signature_verified(self) -> bool:
        """Whether the bank's signature check verifies this client's requests: True on
        200, False on 401 (missing, malformed, unknown key id, bad signature)."""
        try:
            await self._send("GET", _VERIFY_SIGNATURE)
        except AuthError as exc:
            if exc.status != _HTTP_UNAUTHORIZED:
                raise
            return False
        return True

    async def accounts(self, org: Organization) -> AsyncIterator[BankAccount]:
        """Every bank account of the organization the API key sees, page by page."""
        params = {"page[size]": str(PAGE_SIZE)}
        async for account in self._pages(org.accounts_url, params, "accounts", parse_account):
            yield account

    async def get_account(self, url: str) -> BankAccount:
        """Read one bank account; an answer about another account is a ``BankError``."""
        account = self._decode(parse_account, await self._send("GET", url), "bank account")
        asked = self._origin.canonical(url)
        if account.url != asked:
            what, answered = f"the account {asked or url}", f"the account {account.url}"
            raise self._another(what, answered)
        return account

    async def find_account(
        self, org: Organization, *, sort_code: str, account_number: str
    ) -> BankAccount | None:
        """Find the organization's account with this sort code and account number, if any.

        Other accounts in the answer are left (the search also matches a prefix of the
        account number); two accounts both with these details are a ``BankError``.
        """
        body = {"search-query": account_number}
        data = await self._send("POST", org.accounts_search_url, body=body)
        wanted = (_digits(sort_code), _digits(account_number))
        found: BankAccount | None = None
        for item in self._items(data, "search-results"):
            account = self._decode(parse_account, item, "bank account search")
            if not any(
                (_digits(address.sort_code), _digits(address.account_number)) == wanted
                for address in account.bank_addresses
            ):
                continue
            if found is not None and found.url != account.url:
                msg = (
                    f"the bank answered a search for the account {sort_code} {account_number}"
                    f" with more than one account with those details ({found.url} and"
                    f" {account.url}); nothing is paid from any of them: ask the bank"
                )
                raise BankError(self._secrets.mask(msg))
            found = account
        return found

    async def active_restrictions(self, account: BankAccount) -> list[Restriction]:
        """Active restrictions of an account.

        When the bank has no restrictions list for it (404), fall back to the account's
        ``restricted`` flag: one active restriction of unknown type, or none.
        """
        url = account.restrictions_url or f"{account.url}/restrictions"
        params = {"filter[restriction-status][eq]": "active", "page[size]": str(PAGE_SIZE)}
        found: list[Restriction] = []
        try:
            async for item in self._pages(
                url, params, "bank-account-restrictions", parse_restriction
            ):
                # Another account's restriction says nothing of this one
                if item.account_url is not None and item.account_url != account.url:
                    what = f"the restrictions of the account {account.url}"
                    answered = f"a restriction of the account {item.account_url}"
                    raise self._another(what, answered)
                if item.status == "active":
                    found.append(item)
            return found
        except BankRejectedError as exc:
            if exc.status != _HTTP_NOT_FOUND:
                raise
        if account.restricted:
            return [Restriction(url=account.url, status="active", type=None)]
        return []

    # -- payees and confirmation of payee ----------------------------------------------

    async def payees(self, legal_person_url: str) -> AsyncIterator[Payee]:
        """Every payee of a legal person, page by page (200 a page)."""
        params = {"page[size]": str(PAGE_SIZE), "include": "cop-requests"}
        owner = self._origin.canonical(legal_person_url)
        async for payee in self._pages(
            f"{legal_person_url}/bank/payees", params, "payees", parse_payee, payee_parser
        ):
            # Another legal person's payee is never one to pay this one's rows to
            if payee.legal_person_url and payee.legal_person_url != owner:
                what = f"the payees of {owner or legal_person_url}"
                answered = f"a payee of {payee.legal_person_url}"
                raise self._another(what, answered)
            yield payee

    async def confirm_payee(
        self,
        org: Organization,
        *,
        name: str,
        sort_code: str,
        account_number: str,
        classification: str,
        requester_url: str,
    ) -> CopResult:
        """Ask Confirmation of Payee whether ``name`` matches the account."""
        body = {
            "account-number": account_number,
            "bank-id": sort_code,
            "account-classification": classification,
            "name": name,
            "requester-legal-person-url": requester_url,
        }
        data = await self._send("POST", org.cop_request_url, body=body, write=True)
        cop = self._decode(parse_cop_result, data, "confirmation of payee", write=True)
        # The answer echoes the request: an echo of another name or account is the
        # verdict on something else, never this payee's
        echo = data.get("account")
        if isinstance(echo, dict) and (
            _digits(str(echo.get("account-number", account_number))) != _digits(account_number)
            or _digits(str(echo.get("bank-id", sort_code))) != _digits(sort_code)
            or str(echo.get("name", name)).strip().casefold() != name.strip().casefold()
        ):
            msg = (
                f"the bank answered with the Confirmation of Payee {cop.url} of another"
                " name or account than the one asked for"
            )
            raise OutcomeUnknownError(self._secrets.mask(msg))
        return cop

    async def create_payee(
        self,
        legal_person_url: str,
        *,
        name: str,
        sort_code: str,
        account_number: str,
        cop_request_url: str | None = None,
    ) -> Payee:
        """Create a payee for a legal person."""
        body = {"account-holder": name, "account-number": account_number, "bank-id": sort_code}
        if cop_request_url is not None:
            body["cop-request-url"] = cop_request_url
        data = await self._send("POST", f"{legal_person_url}/bank/payees", body=body, write=True)
        payee = self._decode(parse_payee, data, "created payee", write=True)
        owner = self._origin.canonical(legal_person_url)
        if (
            (_digits(payee.sort_code), _digits(payee.account_number))
            != (_digits(sort_code), _digits(account_number))
        ) or (payee.legal_person_url and payee.legal_person_url != owner):
            # The bank acted on the request, but its answer is not about what it made
            msg = f"the bank answered with another payee, {payee.url}, than the one asked for"
            raise OutcomeUnknownError(self._secrets.mask(msg))
        return payee

    # -- payments and submissions ------------------------------------------------------

    async def create_payment(
        self, account_url: str, *, payee_url: str, amount: Decimal, reference: str | None
    ) -> Payment:
        """Create (not submit) a GBP payment from an account to a payee."""
        body: Json = {
            "creditor": {"creditor-type": "payee", "payee-url": payee_url},
            "payment-amount": {"currency": "GBP", "value": format_money(amount)},
        }
        if reference is not None:
            body["payment-reference"] = reference
        data = await self._send("POST", f"{account_url}/payments", body=body, write=True)
        return self._decode(parse_payment, data, "created payment", write=True)

    async def submit_payment(self, payment_url: str, *, scheme: str = "fps") -> Submission:
        """Submit a created payment over a scheme (``fps`` or ``book-transfer``)."""
        body = {"payment-scheme": scheme}
        data = await self._send(
            "POST", f"{payment_url}/submissions", body=body, write=True, urgent=True
        )
        return self._decode(parse_submission, data, "submission", write=True)

    async def payment_submissions(self, payment_url: str) -> list[Submission]:
        """Every submission of a payment (none means it was never submitted)."""
        return [
            s
            async for s in self._pages(
                f"{payment_url}/submissions", None, "submissions", parse_submission
            )
        ]

    async def get_submission(self, url: str) -> Submission:
        """Read one submission."""
        return self._decode(parse_submission, await self._send("GET", url), "submission")

    async def get_payment(self, url: str) -> Payment:
        """Read one payment."""
        return self._decode(parse_payment, await self._send("GET", url), "payment")

    async def payments(
        self,
        account: BankAccount | str,
        *,
        created_since: datetime,
        direction: str = "outbound-payment",
    ) -> AsyncIterator[Payment]:
        """An account's payments created since a moment, oldest first (account or its URL)."""
        if isinstance(account, BankAccount):
            url, account_url = account.payments_url, account.url
        else:
            url = f"{account}/payments"
            account_url = self._origin.canonical(account) or account
        params = {
            "page[size]": str(PAGE_SIZE),
            "sort": "created-at",
            "filter[created-at][gte]": format_timestamp(created_since),
            "filter[payment-direction][eq]": direction,
            "include[]": "latest-submission",
        }
        async for payment in self._pages(url, params, "payments", parse_payment, payment_parser):
            # Another account's payment is never one of this account's rows'
            if payment.account_url is not None and payment.account_url != account_url:
                what = f"the payments of the account {account_url}"
                answered = f"a payment from the account {payment.account_url}"
                raise self._another(what, answered)
            yield payment

    async def events(
        self, org: Organization, *, event_type: str, created_since: datetime
    ) -> AsyncIterator[Event]:
        """The organization's events of one type since a moment, oldest first."""
        params = {
            "page[size]": str(PAGE_SIZE),
            "sort": "created-at",
            "filter[event-type][eq]": event_type,
            "filter[created-at][gte]": format_timestamp(created_since),
        }
        async for event in self._pages(org.events_url, params, "events", parse_event):
            yield event

    # -- the wire ----------------------------------------------------------------------

    async def _pages(
        self,
        url: str,
        params: dict[str, str] | None,
        key: str,
        parse: Callable[[Json], T],
        page_parser: Callable[[Json], Callable[[Json], T]] | None = None,
    ) -> AsyncIterator[T]:
        """Yield the parsed items of a list, following ``links.next`` to the end.

        ``page_parser(page)`` gives the parser of one page's items (to use its ``included``).
        A page without its ``key`` array, or with a ``links.next`` that is neither a URL nor
        null, is a ``BankError``: never read as the end of the list. So is a list that does
        not end (``_Paging``): a next page already read, a page starting with the item an
        earlier page started with, more items or pages than the ``meta.page.total`` it
        counts, or more than ``MAX_LIST_PAGES`` pages.
        """
        paging = _Paging(self._page_key(url, params))
        next_url: str | None = url
        while next_url is not None:
            data = await self._send("GET", next_url, params=params)
            # The bank repeats the query in its links
            params = None
            parse_item = parse if page_parser is None else page_parser(data)
            items = self._items(data, key)
            for index, item in enumerate(items):
                value = self._decode(parse_item, item, key)
                if index == 0:
                    paging.starts_with(getattr(value, "url", None))
                yield value
            next_url = self._next_link(data, key)
            next_page = None if next_url is None else self._page_key(next_url)
            why = paging.why_not_end(len(items), _page_total(data), next_page)
            if why is not None:
                raise BankError(self._secrets.mask(_endless(key, why)))

    def _page_key(self, url: str, params: dict[str, str] | None = None) -> str:
        """The page a URL names, as compared for a repeat: on the origin, percent-decoded."""
        target = self._origin.canonical(url) or url
        if params:
            target = f"{target}{'&' if '?' in target else '?'}{urlencode(params)}"
        return unquote(target)

    def _items(self, data: Json, key: str) -> list[Any]:
        """A list answer's named array; its absence is a bank error, not an empty list."""
        items = data.get(key)
        if not isinstance(items, list):
            what = f"{key} list"
            why = f"it has no {key!r} array" if items is None else f"its {key!r} is not an array"
            raise unreadable_answer(what, why, write=False)
        return items

    def _next_link(self, data: Json, key: str) -> str | None:
        """The page's ``links.next``: a URL, or None at the end of the list."""
        links = data.get("links")
        link = links.get("next") if isinstance(links, dict) else None
        if link is None or isinstance(link, str):
            return link or None
        what = f"{key} list"
        raise unreadable_answer(what, "its links.next is not a URL", write=False)

    def _decode(self, parse: Callable[[Any], T], data: Any, what: str, *, write: bool = False) -> T:
        """Parse an answer; its links become paths on the bank's origin, and any link off
        that origin makes the answer unreadable."""
        value = decode_answer(parse, data, what, write=write, secrets=self._secrets)
        canonical = _canonical_links(value, self._origin)
        if isinstance(canonical, tuple):
            name, link = canonical
            why = (
                f"its {name} points at {self._origin.describe(link)}, not the bank's own"
                f" address {self._origin.shown}; payrun sends nothing there"
            )
            raise unreadable_answer(what, self._secrets.mask(why), write=write)
        return canonical

    async def _send(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        body: Json | None = None,
        write: bool = False,
        urgent: bool = False,
    ) -> Json:
        """Send one request under the retry policy; return its decoded JSON object.

        ``url`` (a path, or a URL from an answer or the ledger) must resolve to the bank's
        origin; otherwise nothing is sent and a ``BankError`` says so.
        """
        request = self._prepare(method, url, params, body)
        # A partial, not a closure: each try is ``_attempt``'s own coroutine, one frame less
        # for every resumption of the request to pass through
        attempt = partial(self._attempt, request, url, write=write, urgent=urgent)
        return await self._retry.call(attempt, retry_if=_retry_write if write else _retry_read)

    def _prepare(
        self, method: str, url: str, params: dict[str, str] | None, body: Json | None
    ) -> PreparedRequest:
        """The request as it goes on the wire, built once for every attempt."""
        target = self._origin.resolve(url)
        if target is None:
            msg = (
                f"payrun sent nothing for {method} {url}: that URL points at"
                f" {self._origin.describe(url)}, not the bank's own address {self._origin.shown}"
                " (the API key goes only there); a person must look at where it came from"
            )
            raise BankError(self._secrets.mask(msg))
        if params:
            target = f"{target}{'&' if '?' in target else '?'}{urlencode(params)}"
        if _URL_AS_IS.fullmatch(target) is None:
            target = quote(target, safe=_URL_SAFE)
        if body is None:
            return PreparedRequest(method, target, self._headers)
        content = _JSON_BODY.encode(body).encode()
        return PreparedRequest(method, target, self._json_headers, content)

    async def _attempt(
        self, request: PreparedRequest, url: str, *, write: bool, urgent: bool
    ) -> Json:
        """One try: hold a slot while on the wire, then classify the answer."""
        method = request.method
        async with self._limiter.slot(urgent=urgent) as generation:
            if self._on_attempt is not None:
                request = self._on_attempt(request)
            try:
                response = await self._transport.send(request)
            except AnswerTooLargeError as exc:
                raise self._too_large(method, url, write=write) from exc
            except NotSent as exc:
                raise self._not_sent(method, url, exc) from exc
            except MaybeSent as exc:
                raise self._maybe_sent(method, url, exc) from exc
            except BankError as exc:
                # A request the transport cannot form (its text may quote the URL)
                raise BankError(self._secrets.mask(str(exc))) from None
        # a transport that reads whole bodies (a test's) still meets the cap, after the fact
        if len(response.content) > MAX_ANSWER_BYTES:
            raise self._too_large(method, url, write=write)
        self.clock.observe_date(response.date)
        status = response.status
        if status < _HTTP_REDIRECT:
            self._limiter.on_success()
            # No bank text read from here on can carry the key, whatever field it is in
            content = self._secrets.mask_body(response.content)
            return answer_object(content, method, url, write=write, secrets=self._secrets)
        if status == _HTTP_TOO_MANY:
            self._limiter.on_rate_limited(generation)
        elif status < _HTTP_SERVER_ERROR:
            self._limiter.on_success()
        raise error_from_response(
            method,
            url,
            status,
            response.text,
            secrets=self._secrets,
            write=write,
            signed=self._signing,
        )

    def _another(self, asked: str, answered: str) -> BankError:
        """The bank answered a question about ``asked`` with ``answered``: nothing of the
        answer is used (the run stops before paying anything on it)."""
        msg = (
            f"the bank was asked for {asked} and answered with {answered}; payrun used"
            " nothing of it and stopped: run the same command again later, and ask the bank"
            " if it answers so again"
        )
        return BankError(self._secrets.mask(msg))

    def _too_large(self, method: str, url: str, *, write: bool) -> BankError:
        where = self._secrets.mask(f"{method} {url}")
        msg = f"the bank's answer to {where} was over payrun's limit of {MAX_ANSWER_BYTES} bytes"
        # The bank may have acted before its answer went wrong
        if write:
            return OutcomeUnknownError(f"{msg}; it may or may not have taken effect")
        return BankError(msg)

    def _not_sent(self, method: str, url: str, exc: NotSent) -> BankUnavailableError:
        mask = self._secrets.mask
        where = mask(f"{method} {url}")
        bank = redact_url(self._base_url)
        msg = f"could not reach the bank at {bank} for {where} ({mask(exc.kind)})"
        unavailable = BankUnavailableError(msg, detail=mask(str(exc))[:300] or None)
        unavailable.reason = None if exc.reason == "connect" else exc.reason
        return unavailable

    def _maybe_sent(self, method: str, url: str, exc: MaybeSent) -> OutcomeUnknownError:
        mask = self._secrets.mask
        where = mask(f"{method} {url}")
        msg = (
            f"no answer from the bank for {where} ({mask(exc.kind)}): it may or may not have"
            " taken effect"
        )
        lost = OutcomeUnknownError(msg, detail=mask(str(exc))[:300] or None)
        # A hang-up may come from a proxy or a bank process while another still works on it
        lost.late = True
        return lost


def _canonical_links(value: T, origin: BankOrigin) -> T | tuple[str, str]:
    """``value`` with its link fields (``url``, ``*_url``) as paths on the bank's origin,
    or the first link field off that origin, as ``(name, link)``."""
    kind = type(value)
    names = _LINK_FIELDS.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            return value
        names = _LINK_FIELDS[kind] = _link_fields(value)
    changed: dict[str, str] = {}
    for name in names:
        link = getattr(value, name)
        if not isinstance(link, str) or not link:
            continue
        path = origin.canonical(link)
        if path is None:
            return name.replace("_", "-"), link
        if path != link:
            changed[name] = path
    return dataclasses.replace(value, **changed) if changed else value  # type: ignore[type-var]


def _link_fields(value: Any) -> tuple[str, ...]:
    """The names of a dataclass's link fields, in field order."""
    return tuple(
        field.name
        for field in dataclasses.fields(value)
        if field.name == "url" or field.name.endswith("_url")
    )


_LINK_FIELDS: dict[type, tuple[str, ...]] = {}
"""Each answer type's link fields (``_canonical_links`` reads them on every answer)."""


class _Paging:
    """How far one list has gone, to tell when it does not end (``why_not_end``)."""

    __slots__ = ("_firsts", "_items", "_pages", "_read", "_repeats", "_total")

    def __init__(self, first_page: str) -> None:
        self._read = {first_page}
        self._firsts: set[str] = set()
        self._repeats = False
        self._pages = self._items = 0
        self._total: int | None = None

    def starts_with(self, url: object) -> None:
        """Note the URL of this page's first item: with cursors an item is on one page
        only, so a page starting like an earlier one repeats it."""
        if isinstance(url, str) and url:
            self._repeats = self._repeats or url in self._firsts
            self._firsts.add(url)

    def why_not_end(self, items: int, total: int | None, next_page: str | None) -> str | None:
        """After a page of ``items`` whose ``meta.page.total`` is ``total``, with
        ``next_page`` (as ``BankClient._page_key`` gives it) to come: why the list does not
        end, or None (it ended, or may go on)."""
        self._pages += 1
        self._items += items
        if total is not None:
            # The largest count: a list may grow while it is read
            self._total = total if self._total is None else max(self._total, total)
        if next_page is None:
            return None
        most = self._total
        if self._repeats:
            return f"page {self._pages:,} starts with an item an earlier page started with"
        if most is not None and self._items > most:
            return f"it counts {most:,} in all but has sent {self._items:,}"
        if most is not None and self._pages > most + 1:
            return f"it counts {most:,} in all but goes on after {self._pages:,} pages"
        if self._pages >= MAX_LIST_PAGES:
            return f"it goes on after {self._pages:,} pages, payrun's limit"
        if next_page in self._read:
            return "its next page is one already read"
        self._read.add(next_page)
        return None


def _endless(key: str, why: str) -> str:
    return (
        f"the bank's list of {key} does not end: {why}; payrun stopped reading it: run the"
        " same command again later, and ask the bank if it happens again"
    )


def _page_total(data: Json) -> int | None:
    """The page's ``meta.page.total`` (the whole list's count), when it gives one."""
    meta = data.get("meta")
    page = meta.get("page") if isinstance(meta, dict) else None
    total = page.get("total") if isinstance(page, dict) else None
    valid = isinstance(total, int) and not isinstance(total, bool) and total >= 0
    return total if valid else None


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())
