"""List conventions shared by every collection: paging, cursors, sorting, filters, include.

``ListSpec`` names what one list operation allows; ``list_page`` parses the query against
it (400 with ``source.parameter`` for anything malformed), filters, sorts, cuts one page
and builds ``links.prev`` / ``links.next``. Cursors are opaque base64url of
``[sort, key, seq]``: keyset paging, so records created between two pages never shift it.
Query parameters other than the cursors are carried into the links unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from payrun.sandbox._checks import flag, parse_time
from payrun.sandbox._http import ApiError

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "Filter",
    "ListSpec",
    "Page",
    "created_sorts",
    "list_page",
]

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
_FILTER = re.compile(r"filter\[([a-z?-]+)\]\[(eq|in|lt|lte|gt|gte)\](\[\])?")
_TIME_OPS = frozenset({"lt", "lte", "gt", "gte"})
T = TypeVar("T")
SortKey = Callable[[Any], "str | int"]


@dataclass(frozen=True, slots=True)
class Filter:
    """One filterable field: allowed operators, how values are read, how records answer."""

    ops: frozenset[str]
    # "enum", "bool", "time" or "text"
    kind: str
    getter: Callable[[Any], Any]
    options: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ListSpec:
    """What one list operation accepts: sort keys, the default sort, filters, includes."""

    sorts: dict[str, SortKey]
    default_sort: str = "-created-at"
    filters: dict[str, Filter] = field(default_factory=dict)
    includes: frozenset[str] = frozenset()


@dataclass(slots=True)
class Page(Generic[T]):
    """One page of results, the ``links`` object, the total and the includes asked for."""

    items: list[T]
    links: dict[str, str | None]
    total: int
    includes: frozenset[str]


def created_sorts() -> dict[str, SortKey]:
    """Return the usual ``created-at`` sort (creation order is the ``seq`` counter)."""
    return {"created-at": lambda record: record.seq}


@dataclass(slots=True)
class _Query:
    size: int = DEFAULT_PAGE_SIZE
    sort: str = ""
    after: list[Any] | None = None
    before: list[Any] | None = None
    includes: set[str] = field(default_factory=set)
    predicates: list[Callable[[Any], bool]] = field(default_factory=list)
    carry: list[tuple[str, str]] = field(default_factory=list)


def _decode_cursor(value: str, parameter: str) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        cursor = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "bad-request", "not a valid cursor", parameter=parameter) from exc
    valid = (
        isinstance(cursor, list)
        and len(cursor) == 3  # noqa: PLR2004 - [sort, key, seq]
        and isinstance(cursor[0], str)
        and isinstance(cursor[1], str | int)
        and isinstance(cursor[2], int)
    )
    if not valid:
        raise ApiError(400, "bad-request", "not a valid cursor", parameter=parameter)
    return list(cursor)


def _encode_cursor(sort: str, key: str | int, seq: int) -> str:
    raw = json.dumps([sort, key, seq], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _filter_predicate(spec: ListSpec, name: str, values: list[str]) -> Callable[[Any], bool]:
    match = _FILTER.fullmatch(name)
    field_spec = spec.filters.get(match.group(1)) if match else None
    if match is None or field_spec is None or match.group(2) not in field_spec.ops:
        raise ApiError(400, "bad-request", f"{name} is not a supported filter", parameter=name)
    op, getter = match.group(2), field_spec.getter
    if field_spec.kind == "time":
        bound = parse_time(values[-1], name)
        return _time_predicate(op, getter, bound)
    parsed = [_filter_value(field_spec, v, name) for v in values]
    if op == "in":
        chosen = set(parsed)
        return lambda record: getter(record) in chosen
    return lambda record: getter(record) == parsed[-1]


def _time_predicate(
    op: str, getter: Callable[[Any], Any], bound: datetime
) -> Callable[[Any], bool]:
    comparisons: dict[str, Callable[[datetime], bool]] = {
        "lt": lambda moment: moment < bound,
        "lte": lambda moment: moment <= bound,
        "gt": lambda moment: moment > bound,
        "gte": lambda moment: moment >= bound,
    }
    compare = comparisons[op]
    return lambda record: compare(getter(record))


def _filter_value(spec: Filter, value: str, name: str) -> Any:
    if spec.kind == "bool":
        return flag(value, name)
    if spec.kind == "enum":
        if value not in spec.options:
            detail = f"{name} must be one of: {', '.join(sorted(spec.options))}"
            raise ApiError(400, "invalid-enum-value", detail, parameter=name)
        return None if value == "null" else value
    return value


def _parse_size(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE_SIZE:
        detail = f"page[size] must be an integer from 1 to {MAX_PAGE_SIZE}"
        raise ApiError(400, "bad-request", detail, parameter="page[size]")
    return int(value)


def _parse_query(spec: ListSpec, pairs: Sequence[tuple[str, str]]) -> _Query:
    query = _Query(sort=spec.default_sort)
    filters: dict[str, list[str]] = {}
    for name, value in pairs:
        if name in {"page[after]", "page[before]"}:
            cursor = _decode_cursor(value, name)
            query.after, query.before = (cursor, None) if name == "page[after]" else (None, cursor)
            continue
        query.carry.append((name, value))
        if name == "page[size]":
            query.size = _parse_size(value)
        elif name == "sort":
            if value.removeprefix("-") not in spec.sorts:
                allowed = ", ".join(f"{s}, -{s}" for s in spec.sorts)
                raise ApiError(
                    400, "bad-request", f"sort must be one of: {allowed}", parameter="sort"
                )
            query.sort = value
        elif name in {"include", "include[]"}:
            query.includes.update(_parse_includes(spec.includes, value))
        elif name.startswith("filter["):
            filters.setdefault(name.removesuffix("[]"), []).append(value)
    query.predicates = [_filter_predicate(spec, n, v) for n, v in filters.items()]
    return query


def _parse_includes(allowed: Collection[str], value: str) -> set[str]:
    wanted = {part.strip() for part in value.split(",") if part.strip()}
    unknown = wanted - set(allowed)
    if unknown:
        detail = f"include must be among: {', '.join(sorted(allowed)) or '(none)'}"
        raise ApiError(400, "bad-request", detail, parameter="include")
    return wanted


def list_page(
    spec: ListSpec, records: Sequence[T], pairs: Sequence[tuple[str, str]], path: str
) -> Page[T]:
    """Filter, sort and cut ``records`` to one page as the query in ``pairs`` asks."""
    query = _parse_query(spec, pairs)
    descending = query.sort.startswith("-")
    sort_name = query.sort.removeprefix("-")
    key_of = spec.sorts[sort_name]
    chosen = [r for r in records if all(p(r) for p in query.predicates)]
    keyed: list[tuple[Any, int, Any]] = [(key_of(r), r.seq, r) for r in chosen]  # type: ignore[attr-defined]
    keyed.sort(key=lambda entry: (entry[0], entry[1]), reverse=descending)
    cursor = query.after or query.before
    if cursor is not None and cursor[0] != query.sort:
        raise ApiError(400, "bad-request", "the cursor belongs to another sort", parameter="page")
    start, stop = _window(keyed, query, descending=descending)
    items = keyed[start:stop]

    def link(name: str, entry: tuple[Any, int, Any]) -> str:
        pairs_out = [*query.carry, (name, _encode_cursor(query.sort, entry[0], entry[1]))]
        return f"{path}?{urlencode(pairs_out, safe='[]')}"

    links: dict[str, str | None] = {
        "prev": link("page[before]", items[0]) if items and start > 0 else None,
        "next": link("page[after]", items[-1]) if items and stop < len(keyed) else None,
    }
    return Page([entry[2] for entry in items], links, len(chosen), frozenset(query.includes))


def _window(
    keyed: list[tuple[Any, int, Any]], query: _Query, *, descending: bool
) -> tuple[int, int]:
    """Return the slice bounds of the page inside the list, in presentation order."""
    try:
        if query.after is not None:
            mark = (query.after[1], query.after[2])
            if descending:
                start = sum(1 for k in keyed if (k[0], k[1]) >= mark)
            else:
                start = sum(1 for k in keyed if (k[0], k[1]) <= mark)
            return start, start + query.size
        if query.before is not None:
            mark = (query.before[1], query.before[2])
            if descending:
                stop = sum(1 for k in keyed if (k[0], k[1]) > mark)
            else:
                stop = sum(1 for k in keyed if (k[0], k[1]) < mark)
            return max(0, stop - query.size), stop
    except TypeError as exc:
        raise ApiError(400, "bad-request", "not a valid cursor", parameter="page") from exc
    return 0, query.size
