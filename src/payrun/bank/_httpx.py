"""The bank's HTTP client on httpx (its own pool, or the aiohttp transport): answers capped.

A selectable transport (``make_http_client(..., transport="httpx")`` or
``"httpx-aiohttp"``). ``httpx.AsyncClient.request`` reads a whole body, however large; this
wrapper streams each answer instead and stops at ``MAX_ANSWER_BYTES``. Redirects are not
followed (httpx's default, kept). httpx's exceptions propagate unchanged, for
``transport.never_sent`` to classify.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from payrun.bank._lean import Answer, check_length, read_capped

__all__ = ["CappedHttpxClient"]


class CappedHttpxClient:
    """An ``httpx.AsyncClient`` whose answers are read only up to the size cap."""

    __slots__ = ("_client",)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    @property
    def base_url(self) -> httpx.URL:
        """The bank's base address."""
        return self._client.base_url

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers sent with every request."""
        return self._client.headers

    async def request(
        self, method: str, url: str, *, params: dict[str, str] | None = None, json: Any = None
    ) -> Answer:
        """Send one request and read its body, refusing one over the cap."""
        async with self._client.stream(
            method, url, params=params, json=json, follow_redirects=False
        ) as response:
            check_length(response.headers.get("content-length"))
            body = await read_capped(response.aiter_bytes())
            return Answer(response.status_code, body, response.headers.get("date"))

    async def aclose(self) -> None:
        """Close the client and its connections."""
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()
