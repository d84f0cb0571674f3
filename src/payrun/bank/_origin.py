"""The bank's origin: the only scheme, host and port payrun sends a request (and its key) to.

``BankOrigin(base_url).resolve(url)`` turns a URL from the bank's answers or from the
ledger into the absolute URL to send to (``canonical`` into the path payrun stores and
compares, whether the bank wrote it absolute or relative), or returns None when it points
anywhere else:
another host, another port, another scheme (plain http where the base is https), or a
spelling that URL parsers read differently (backslashes, control characters, user info).
A path (``/v0/...``) is joined to the base URL, as the bank's resource paths are meant;
any other relative reference resolves against the base URL.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urljoin, urlsplit

__all__ = ["BankOrigin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Control characters, space, DEL and the backslash: URL parsers disagree about them
_AMBIGUOUS = re.compile(r"[\x00-\x20\x7f\\]")
# A path from the root (not ``//``: a host) with no fragment and none of those characters
_PLAIN_PATH = re.compile(r"/(?!/)[^#\x00-\x20\x7f\\]*")
Origin = tuple[str, str, int]


def _origin(url: str) -> Origin | None:
    """(scheme, host, port) of an absolute URL; None when it has none or is ambiguous."""
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    # a user-info part is where parsers disagree on the host: such a URL is never trusted
    if not parts.hostname or "@" in parts.netloc or scheme not in _DEFAULT_PORTS:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def _ambiguous(url: str) -> bool:
    """True for characters URL parsers treat differently (a backslash is a slash to some)."""
    return _AMBIGUOUS.search(url) is not None


def _plain_path(url: str) -> bool:
    """True for a path from the root with nothing a parser could read two ways."""
    return _PLAIN_PATH.fullmatch(url) is not None


class BankOrigin:
    """The base URL's origin; ``resolve`` says where a URL would go, if anywhere."""

    __slots__ = ("_base", "_origin", "_path")

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")
        self._origin = _origin(self._base)
        self._path = urlsplit(self._base).path if self._origin else ""

    def __repr__(self) -> str:
        return f"BankOrigin({self.shown!r})"

    @property
    def shown(self) -> str:
        """The origin as ``scheme://host:port``, for messages."""
        return _shown(self._origin) if self._origin else self._base

    def resolve(self, url: str) -> str | None:
        """The absolute URL to send ``url`` to, or None when it is not on the bank's origin."""
        if not url or _ambiguous(url) or self._origin is None:
            return None
        if url.startswith("/") and not url.startswith("//"):
            return self._base + url
        absolute = urljoin(self._base + "/", url)
        return absolute if _origin(absolute) == self._origin else None

    def canonical(self, url: str) -> str | None:
        """``url`` as the path (and query) on the bank's origin, the one form payrun stores
        and compares; None when it is not on the bank's origin.

        The path is relative to the base URL's own path (``/v0/x`` for
        ``https://bank/api/v0/x`` with the base ``https://bank/api``), so ``resolve`` sends
        it back to the same place; a URL on the origin outside that path stays absolute.
        """
        # The bank's own form (a path from the root, no fragment) under a base URL without a
        # path is already canonical: most links, on every answer
        if not self._path and self._origin is not None and _plain_path(url):
            return url
        absolute = self.resolve(url)
        if absolute is None:
            return None
        parts = urlsplit(absolute)
        path = parts.path or "/"
        if path == self._path or path.startswith(self._path + "/"):
            # the bank's paths are relative to the base URL: its own path is not theirs
            path = path[len(self._path) :] or "/"
        elif self._origin is not None:
            # on the origin but outside the base URL's path: kept whole, to resolve to itself
            path = _shown(self._origin) + path
        return f"{path}?{parts.query}" if parts.query else path

    def describe(self, url: str) -> str:
        """Where a refused URL points, without its path or query (which may carry anything)."""
        origin = None if _ambiguous(url) else _origin(urljoin(self._base + "/", url))
        return _shown(origin) if origin is not None else "an address payrun cannot trust"


def _shown(origin: Origin) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"
