"""What ``payrun fleet status`` and ``submit --wait`` say about many batches at once.

Input: ``FleetBatch`` records (and the time now). Output: the batches a filter keeps
(``select_batches``: names, submitted since, states) and one ``FleetOverview``: lanes
done, paying and queued, rows paid of all rows, and an estimate of the time left from the
pace so far. Pure: reads nothing, writes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from payrun._models import RowStatus
from payrun.fleet._store import FleetBatch

__all__ = ["STATES", "FleetOverview", "overview", "select_batches"]

STATES = ("queued", "paying", "done", "incomplete", "refused")
"""A batch's states, in the order a batch moves through them."""
_PAID = frozenset({RowStatus.SUBMITTED.value, RowStatus.DELIVERED.value})


@dataclass(frozen=True, slots=True)
class FleetOverview:
    """Lanes by where their batches stand, rows paid of all, and the time left (or None)."""

    lanes_done: int
    lanes_paying: int
    lanes_queued: int
    rows_paid: int
    rows: int
    left: timedelta | None

    def line(self) -> str:
        """One line: organizations done / paying / queued, rows paid of total, ETA."""
        eta = "" if self.left is None else f", about {_duration(self.left)} left"
        return (
            f"organizations: {self.lanes_done} done, {self.lanes_paying} paying,"
            f" {self.lanes_queued} queued; rows paid {self.rows_paid:,} of {self.rows:,}{eta}"
        )


def select_batches(
    batches: Sequence[FleetBatch],
    *,
    names: Collection[str] | None = None,
    since: datetime | None = None,
    states: Collection[str] | None = None,
) -> list[FleetBatch]:
    """The batches named in ``names``, submitted at or after ``since``, in ``states``."""
    return [
        batch
        for batch in batches
        if (names is None or batch.name in names)
        and (since is None or (batch.submitted_at is not None and batch.submitted_at >= since))
        and (states is None or batch.state in states)
    ]


def overview(batches: Sequence[FleetBatch], now: datetime) -> FleetOverview:
    """Count lanes (a lane is paying if any batch of it pays, queued if any waits, else
    done) and rows; the time left at the pace of the batches still open."""
    by_lane: dict[str, set[str]] = {}
    for batch in batches:
        by_lane.setdefault(batch.lane, set()).add(batch.state)
    paying = sum(1 for states in by_lane.values() if "paying" in states)
    queued = sum(1 for states in by_lane.values() if "queued" in states and "paying" not in states)
    rows = sum(sum(batch.rows.values()) for batch in batches)
    paid = sum(n for batch in batches for status, n in batch.rows.items() if status in _PAID)
    return FleetOverview(
        lanes_done=len(by_lane) - paying - queued,
        lanes_paying=paying,
        lanes_queued=queued,
        rows_paid=paid,
        rows=rows,
        left=_time_left([b for b in batches if not b.final], now),
    )


def _time_left(open_batches: Sequence[FleetBatch], now: datetime) -> timedelta | None:
    """Rows still to pay at the pace the open batches paid since the first was submitted."""
    starts = [b.submitted_at for b in open_batches if b.submitted_at is not None]
    paid = sum(n for b in open_batches for status, n in b.rows.items() if status in _PAID)
    to_pay = sum(
        n for b in open_batches for status, n in b.rows.items() if status in _OPEN_STATUSES
    )
    if not starts or paid == 0 or to_pay == 0:
        return None
    elapsed = (now - min(starts)).total_seconds()
    return timedelta(seconds=round(elapsed / paid * to_pay))


_OPEN_STATUSES = frozenset(
    {
        RowStatus.PENDING.value,
        RowStatus.CREATING.value,
        RowStatus.CREATED.value,
        RowStatus.SUBMITTING.value,
    }
)


def _duration(left: timedelta) -> str:
    seconds = int(left.total_seconds())
    if seconds < 60:  # noqa: PLR2004 - a minute
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
