"""The bank's HTTP client straight on aiohttp: the few ``httpx.AsyncClient`` members used.

A selectable transport (``make_http_client(..., transport="aiohttp")``); the default is
pyreqwest (``_pyreqwest``). ``BankClient`` needs ``request``, ``aclose``, ``base_url`` and
``headers``. Going through ``httpx.AsyncClient`` on the aiohttp transport costs about
0.5 ms of CPU per request here (request building, URL merging, cookie extraction); this
class does the same job in about half (benchmarks/bench_transport.py). aiohttp's own
exceptions propagate unchanged, so ``never_sent`` can tell a refused connection (safe to
resend) from a reset after sending (outcome unknown). Redirects are never followed, and no
answer is read past ``MAX_ANSWER_BYTES``.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from payrun.bank._lean import Answer, LeanClient, check_length, read_capped

__all__ = ["AiohttpClient"]

# As pyreqwest's connect limit
_CONNECT_SECONDS = 10.0


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class AiohttpClient(LeanClient):
    """An aiohttp session with a base URL and default headers, opened on first use."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout: float,
        max_connections: int,
        keepalive_seconds: float,
    ) -> None:
        super().__init__(base_url, headers)
        self._session_headers = {"User-Agent": "payrun", **headers}
        # a connect that hangs fails as a connect (never sent), as on the other transports
        connect = min(timeout, _CONNECT_SECONDS)
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect)
        self._max_connections = max_connections
        self._keepalive = keepalive_seconds
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=self._keepalive
        )
        self._session = aiohttp.ClientSession(
            headers=self._session_headers,
            timeout=self._timeout,
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            json_serialize=_dumps,
        )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
    ) -> Answer:
        """Send one request (a path is joined to the base URL) and read the whole body."""
        session = self._session or self._open()
        target = self._target(url)
        async with session.request(
            method, target, params=params, json=json, allow_redirects=False
        ) as response:
            check_length(response.content_length)
            body = await read_capped(response.content.iter_any())
            return Answer(response.status, body, response.headers.get("Date"))

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
