"""What the payee-change guard costs over a big batch (``changed_details_holds``).

Every row that needs a new payee is judged: its name's key (look-alike spellings, titles,
word order, the 18 characters a Bacs file keeps) is computed once per name and cached, then
looked up among the owner's payees, the rows this ledger paid and the batch's other rows.
This times, in CPU seconds, 100,000 rows of distinct names against 200 payees: the names
computed (first run) and cached (again), for plain ASCII names and for names with accents
(which go through the TR39 confusables table).

    python benchmarks/bench_guard.py
    python benchmarks/bench_guard.py --rows 20000
"""

from __future__ import annotations

import argparse
import itertools
import string
import time
from decimal import Decimal
from typing import NamedTuple

from payrun._models import LedgerRow, RowStatus
from payrun.run._bankview import PayeeIndex
from payrun.run._changed import changed_details_holds
from payrun.run._names import name_forms

_FIRST = (
    "Ada Alan Mary John Jane Tom Sue Oliver Amelia Harry Isla Jack Ava Noah Mia Leo Ivy Oscar"
    " Lily Arthur Rosie George Ella Freddie Sophia Theo Evie Alfie Grace Charlie Florence"
).split()
_LAST = (
    "Smith Jones Taylor Brown Williams Wilson Johnson Davies Patel Wright Robinson Wood"
    " Thompson Evans Walker White Roberts Green Hall Thomas Clarke Jackson Harris Lewis"
).split()


class _Payee(NamedTuple):
    url: str
    account_holder: str
    sort_code: str
    account_number: str
    status: str = "active"
    srd: str | None = None


def _names(count: int, *, accented: bool) -> list[str]:
    """``count`` distinct names (a surname, two letters, a first name)."""
    pairs = ("".join(p) for p in itertools.product(string.ascii_lowercase, repeat=2))
    names = (f"{f} {s}{x}" for x in pairs for f in _FIRST for s in _LAST)
    picked = list(itertools.islice(names, count))
    return [name.replace("e", "\u00e9") for name in picked] if accented else picked


def _rows(names: list[str]) -> list[LedgerRow]:
    return [
        LedgerRow(
            row=n + 2,
            row_id=None,
            payee_name=name,
            sort_code="200000",
            account_number=f"{n:08d}",
            amount=Decimal("1.00"),
            reference=None,
            source_account="040004 30000001",
            status=RowStatus.PENDING,
        )
        for n, name in enumerate(names)
    ]


def main() -> None:
    """Time the guard over distinct names, computed and then cached."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    payees = [_Payee(f"/pe/{p}", f"Payee {p}", "200000", f"{p:08d}") for p in range(200)]
    index = PayeeIndex.build(payees)
    for accented in (False, True):
        rows = _rows(_names(args.rows, accented=accented))
        name_forms.cache_clear()
        kind = "accented" if accented else "plain ASCII"
        for when in ("names computed", "names cached"):
            started = time.process_time()
            held = changed_details_holds(rows, [index.known])
            seconds = time.process_time() - started
            what = f"{len(rows):,} rows, {kind} names, {when}"
            print(f"{what}: {seconds:.3f} s CPU, {len(held)} held")


if __name__ == "__main__":
    main()
