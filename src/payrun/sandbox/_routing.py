"""A small, fast router: ``METHOD /path/{prefix}`` templates compiled to regexes.

A template segment ``{ba}`` matches one id with that prefix (``ba.x2Uc…``), ``<name>`` one
plain lower-case word; both are passed to the handler positionally. Routes are bucketed by
segment count, so a lookup tries a few regexes at most. An unknown path is 404; a known
path with another method is 405 with ``Allow``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from payrun.sandbox._http import ApiError, Reply, Request
from payrun.sandbox._listing import ListSpec, Page, list_page
from payrun.sandbox.state import SandboxState

__all__ = ["Context", "Handler", "Route", "Router"]

# {ba} -> (ba\.<id>)
_ID_GROUP = r"(\1\\.[A-Za-z0-9_-]{1,64})"


@dataclass(slots=True)
class Context:
    """What handlers see: the state and the timing settings of this bank."""

    state: SandboxState
    deliver_after_s: float = 0.2
    clock: Callable[[], float] = time.monotonic

    def page(self, spec: ListSpec, records: list[Any], request: Request) -> Page[Any]:
        """Cut one page of ``records`` as the request's query asks."""
        return list_page(spec, records, request.query(), request.path)


Handler = Callable[[Context, Request, tuple[str, ...]], Reply]


@dataclass(frozen=True, slots=True)
class Route:
    """One route: method, compiled path, handler, and its kind (for limits and faults)."""

    method: str
    pattern: re.Pattern[str]
    handler: Handler
    kind: str = ""
    public: bool = False


@dataclass(slots=True)
class Router:
    """Routes bucketed by number of path segments."""

    buckets: dict[int, list[Route]] = field(default_factory=dict)

    def add(
        self, method: str, template: str, handler: Handler, *, kind: str = "", public: bool = False
    ) -> None:
        """Register ``handler`` for ``method template``."""
        regex = re.escape(template).replace(r"\{", "{").replace(r"\}", "}")
        regex = re.sub(r"\{([a-z]+)\}", _ID_GROUP, regex)
        regex = re.sub(r"<[a-z]+>", r"([a-z0-9-]{1,64})", regex)
        route = Route(method, re.compile(regex), handler, kind, public)
        self.buckets.setdefault(template.count("/"), []).append(route)

    def match(self, method: str, path: str) -> tuple[Route, tuple[str, ...]]:
        """Find the route for ``method path``, or raise a 404/405 ``ApiError``."""
        allowed: list[str] = []
        for route in self.buckets.get(path.count("/"), ()):
            found = route.pattern.fullmatch(path)
            if found is None:
                continue
            if route.method == method:
                return route, found.groups()
            allowed.append(route.method)
        if allowed:
            headers = [(b"allow", ", ".join(sorted(set(allowed))).encode())]
            raise ApiError(405, "method-not-allowed", f"use {', '.join(allowed)}", headers=headers)
        raise ApiError(404, "not-found", f"no resource at {path}")
