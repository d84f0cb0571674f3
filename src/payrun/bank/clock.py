"""The bank's clock as seen from here, for every filter and comparison on its timestamps.

The bank stamps payments, submissions and events with its own clock (``created-at``);
payrun stamps intents with this machine's. When the two disagree by minutes, a filter
written in our time (payments created since a row's intent) misses what the bank made, and
a rerun makes it again. ``BankClock`` measures the difference: from the ``Date`` header of
the bank's answers (HTTP says an origin server with a clock sends one; it is the time the
answer was made, to the second), and, while no answer has carried one, from the
``created-at`` of a payment payrun has just made (made between sending the request and
reading its answer). Unmeasured, the bank's clock is taken to be ours.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["BankClock", "parse_http_date"]

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

_HALF_SECOND = timedelta(milliseconds=500)
"""A Date header is cut to the second: the bank's time was on average half a second later."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def parse_http_date(text: str) -> datetime | None:
    """The time of an HTTP date (``Sun, 06 Nov 1994 08:49:37 GMT``, the form servers
    send), or None for anything else (without ``email.utils``: a run loads less)."""
    parts = text.split()
    if len(parts) != 6 or parts[5] not in ("GMT", "UTC", "+0000"):  # noqa: PLR2004
        return None
    _, day, month, year, hms = parts[:5]
    try:
        hour, minute, second = (int(part) for part in hms.split(":"))
        return datetime(int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=UTC)
    except (KeyError, ValueError):
        return None


class BankClock:
    """How far the bank's clock is ahead of ours (``offset``; negative when behind)."""

    __slots__ = ("_date", "_dated", "_offset")

    def __init__(self) -> None:
        self._offset = timedelta(0)
        # The last Date header read: the header changes once a second, so it is parsed once.
        self._date: str | None = None
        # A Date header was measured: created-at, less precise, is then not needed.
        self._dated = False

    @property
    def offset(self) -> timedelta:
        """The bank's time minus ours, as last measured (zero until measured)."""
        return self._offset

    def observe_date(self, header: str | None) -> None:
        """Measure from the ``Date`` header of an answer just read (None: it had none).

        The header changes once a second, so it is parsed only when it differs from the
        last one; an unreadable value is ignored.
        """
        if not header or header == self._date:
            return
        self._date = header
        stamp = parse_http_date(header)
        if stamp is not None:
            self._offset = stamp + _HALF_SECOND - _utc_now()
            self._dated = True

    def observe_created(self, created_at: datetime, *, sent: datetime, received: datetime) -> None:
        """Measure from a payment's ``created-at`` (the bank made it between ``sent`` and
        ``received``, our times), unless a ``Date`` header has been measured."""
        if not self._dated:
            self._offset = created_at - (sent + (received - sent) / 2)

    def to_bank(self, ours: datetime) -> datetime:
        """One of our times on the bank's clock."""
        return ours + self._offset

    def now(self) -> datetime:
        """The bank's time now, as measured."""
        return _utc_now() + self._offset
