"""Bacs working days: the day after a processing day, with England and Wales bank holidays.

Input: a date. Output: the next working day (not a Saturday, Sunday or bank holiday in
England and Wales, where Bacs settles). The holidays come from the maintained ``holidays``
package, loaded only when a Standard 18 file's pay date is worked out.
"""

from __future__ import annotations

from datetime import date, timedelta

__all__ = ["next_working_day"]

_SATURDAY = 5


def next_working_day(day: date) -> date:
    """The first Bacs working day after ``day``."""
    import holidays

    bank_holidays = holidays.country_holidays("GB", subdiv="ENG", years=(day.year, day.year + 1))
    following = day + timedelta(days=1)
    while following.weekday() >= _SATURDAY or following in bank_holidays:
        following += timedelta(days=1)
    return following
