"""What masking the API key in every bank answer costs (``Secrets.mask_body``).

Each 2xx answer's raw bytes are searched for every spelling of the key before they are
decoded. Answers are about 0.5-2 KB and a payment takes about two. This times, per answer:
the common path (no backslash or percent sign: one substring test), a body with JSON
escapes or a percent sign (the full search), a body echoing the key (search and replace),
and the full search alone for comparison.

    python benchmarks/bench_masking.py
    python benchmarks/bench_masking.py --size 2000 --number 50000
"""

from __future__ import annotations

import argparse
import json
import timeit

from payrun.bank._masking import Secrets

KEY = 'sk_live/AbC+dEf/GhIjK=="q\\z'


def _answer(size: int, extra: str = "") -> bytes:
    """A submission-like JSON answer padded to about ``size`` bytes."""
    base = {
        "payment-url": "/v0/bank/payments/pay.0123456789abcdef",
        "amount": "125.00",
        "currency": "GBP",
        "creditor": {"name": "Ann Payee", "sort-code": "201234", "account-number": "12345678"},
        "reference": "SALARY NOV",
        "submission-status": "submitted",
        "note": extra,
    }
    text = json.dumps(base)
    base["padding"] = "x" * max(0, size - len(text) - 14)
    return json.dumps(base).encode()


def main() -> None:
    """Print microseconds per answer for each path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="answer bytes (default 1000)")
    parser.add_argument("--number", type=int, default=20000, help="calls timed per case")
    args = parser.parse_args()
    secrets = Secrets([KEY])
    full = secrets._pattern  # noqa: SLF001 - the full search, timed alone for comparison
    assert full is not None
    cases = {
        "common (no \\ or %)": _answer(args.size),
        "escapes present (é as \\u00e9)": _answer(args.size, "Zo\u00eb"),
        "key echoed": _answer(args.size, "key " + KEY),
    }
    print(f"answer of about {args.size} bytes, {args.number} calls each")
    for name, body in cases.items():
        seconds = timeit.timeit(lambda body=body: secrets.mask_body(body), number=args.number)
        print(f"  mask_body, {name}: {seconds / args.number * 1e6:.2f} us")
    text = cases["common (no \\ or %)"].decode()
    seconds = timeit.timeit(lambda: full.search(text), number=args.number)
    print(f"  full search alone, common body: {seconds / args.number * 1e6:.2f} us")


if __name__ == "__main__":
    main()
