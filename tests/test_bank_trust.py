"""Trust at the bank's edge (issue 17): what payrun does with hostile or broken answers.

- Every request goes only to the base URL's origin: a URL in an answer (``links.next``,
  ``payment-url``) or in the ledger that points at another host, port or scheme is a bank
  error, and a recording server there receives nothing (the API key goes nowhere else).
- An API key the bank echoes in an error is masked in every JSON spelling, everywhere.
- Answers that are nested too deep, too large, or lists without their array are bank
  errors; a base URL that redirects is a configuration error.

Real CLI runs against the sandbox bank over loopback HTTP, its answers rewritten by
``rewrite_answers`` (a hostile network), as in ``test_bank_rewrites``.
"""

from __future__ import annotations

import http.server
import json
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _run_helpers import (
    BatchRow,
    Finished,
    ledger_rows,
    make_rows,
    rewrite_answers,
    run,
    run_env,
    stats,
    write_batch,
)
from payrun.bank._masking import Secrets
from payrun.bank._refusals import error_from_response
from payrun.sandbox import RunningSandbox, serve_in_thread

KEY = 'sk_live/AbC+dEf/GhIjK=="q\\z'
"""An API key with every character JSON escapes specially: ``/``, ``"`` and ``\\``."""


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """A fresh sandbox bank for one test, its API key full of JSON's special characters."""
    with serve_in_thread(rng_seed=5, api_key=KEY) as sandbox:
        yield sandbox


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records every request it gets (and answers 200 ``{}``)."""

    received: list[str]

    def _record(self) -> None:
        self.received.append(f"{self.command} {self.path} {dict(self.headers)}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _record  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""


@pytest.fixture
def elsewhere() -> Iterator[tuple[list[str], dict[str, str]]]:
    """Recording servers on another loopback host (127.0.0.2) and on another port of
    127.0.0.1; yields what they received and their base URLs by name."""
    received: list[str] = []
    handler = type("Recorder", (_Recorder,), {"received": received})
    hosts = ("127.0.0.2", "127.0.0.1")
    servers = [http.server.ThreadingHTTPServer((host, 0), handler) for host in hosts]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    pairs = zip(hosts, servers, strict=True)
    other_host, other_port = (f"http://{host}:{server.server_port}" for host, server in pairs)
    try:
        yield received, {"other-host": other_host, "other-port": other_port}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _foreign_forms(bank: RunningSandbox, urls: dict[str, str]) -> dict[str, str]:
    """Spellings of a link to a recording server, each one a URL to another origin."""
    bank_host = bank.base_url.split("//", 1)[1]
    other = urls["other-host"].split("//", 1)[1]
    return {
        "other-host": urls["other-host"],
        "other-port": urls["other-port"],
        "scheme-relative": f"//{other}",
        "backslash-userinfo": f"{urls['other-host']}\\@{bank_host}",
    }


FOREIGN = pytest.mark.parametrize(
    "form", ["other-host", "other-port", "scheme-relative", "backslash-userinfo"]
)

ROW = BatchRow(
    row_id="R1",
    payee_name="Ann Payee",
    sort_code="201234",
    account_number="55501234",
    amount="125.00",
    reference="JUNE-1",
    source_account="040004 30000001",
)


def _is_list_of(path: str, name: str) -> bool:
    return path.endswith(f"/{name}")


def _edit(body: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    data = json.loads(body)
    change(data)
    return json.dumps(data).encode()


def _one_line_error(finished: Finished) -> None:
    """The run ended on one clear line, never a traceback or an 'unexpected' error."""
    both = finished.stdout + finished.stderr
    assert "Traceback" not in both, finished.describe()
    assert "unexpected" not in both, finished.describe()
    assert "please report" not in both, finished.describe()


# -- D2: the key goes only to the bank's origin --------------------------------------------


@FOREIGN
def test_a_foreign_next_link_is_a_bank_error_and_never_followed(
    bank: RunningSandbox,
    tmp_path: Path,
    elsewhere: tuple[list[str], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    """A payments list whose links.next points at another origin: exit 3 on one line
    naming it, nothing created, and the server there receives nothing."""
    received, urls = elsewhere
    link = _foreign_forms(bank, urls)[form] + "/v0/bank/accounts/x/payments?page=2"

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "GET" and _is_list_of(path, "payments") and status == 200:
            return status, _edit(body, lambda d: d["links"].update(next=link))
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    finished = run(bank, write_batch(tmp_path / "b.csv", [ROW]), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    _one_line_error(finished)
    assert "payrun sent nothing" in finished.stdout + finished.stderr, finished.describe()
    assert received == []
    assert bank.state.payments == {}


@FOREIGN
def test_a_foreign_payment_url_is_never_called_nor_stored(
    bank: RunningSandbox,
    tmp_path: Path,
    elsewhere: tuple[list[str], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    """The create answer names a payment on another origin: nothing goes there, the ledger
    never holds it, and this run and the next pay the row once (found by its own URL)."""
    received, urls = elsewhere
    foreign = _foreign_forms(bank, urls)[form]

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "POST" and _is_list_of(path, "payments") and status < 300:
            return status, _edit(body, lambda d: d.update({"payment-url": foreign + path}))
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    batch = write_batch(tmp_path / "b.csv", [ROW])
    ledger = tmp_path / "b.ledger.sqlite"
    first = run(bank, batch, ledger)
    _one_line_error(first)
    again = run(bank, batch, ledger)
    _one_line_error(again)
    assert received == []
    [row] = ledger_rows(ledger)
    assert all(foreign not in str(value) for value in row.values()), row
    assert len(bank.state.payments) == 1
    assert again.returncode == 0, first.describe() + again.describe()


@FOREIGN
def test_a_foreign_payment_url_left_in_the_ledger_is_never_called(
    bank: RunningSandbox,
    tmp_path: Path,
    elsewhere: tuple[list[str], dict[str, str]],
    form: str,
) -> None:
    """A ledger from an older run holds a payment URL on another origin: the rerun sends
    nothing there, and says so on one line (exit 3)."""
    received, urls = elsewhere
    batch = write_batch(tmp_path / "b.csv", [ROW])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    [row] = ledger_rows(ledger)
    foreign = _foreign_forms(bank, urls)[form] + row["payment_url"]
    with sqlite3.connect(ledger) as db:
        db.execute("UPDATE rows SET payment_url = ?", (foreign,))
    rerun = run(bank, batch, ledger)
    assert rerun.returncode == 3, rerun.describe()
    _one_line_error(rerun)
    assert "payrun sent nothing" in rerun.stdout + rerun.stderr, rerun.describe()
    assert received == []


@pytest.mark.parametrize("form", ["absolute", "relative"])
def test_a_payment_url_on_the_banks_own_origin_is_followed(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A payment URL written absolute on the bank's origin, or relative without its
    leading slash, resolves against the base URL: the row is paid once."""

    def spell(url: str) -> str:
        return bank.base_url + url if form == "absolute" else url.lstrip("/")

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "POST" and _is_list_of(path, "payments") and status < 300:
            return status, _edit(body, lambda d: d.update({"payment-url": spell(d["payment-url"])}))
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    ledger = tmp_path / "b.ledger.sqlite"
    finished = run(bank, write_batch(tmp_path / "b.csv", [ROW]), ledger)
    assert finished.returncode == 0, finished.describe()
    assert [r["status"] for r in ledger_rows(ledger)] == ["submitted"]
    [group] = [g for g in stats(bank)["payments"] if g["reference"] == ROW.reference]
    assert (group["payments"], group["submissions"]) == (1, 1)


# -- D3: an echoed key is masked in every spelling -------------------------------------------


def _spellings(key: str) -> dict[str, str]:
    """The key as JSON string content, escaped every way JSON allows."""
    plain = json.dumps(key)[1:-1]
    return {
        "ordinary": plain,
        "slash": plain.replace("/", "\\/"),
        "all-u": "".join(f"\\u{ord(c):04x}" for c in key),
        "all-U-hex": "".join(f"\\u{ord(c):04X}" for c in key),
        "mixed": "".join(
            f"\\u{ord(c):04x}" if i % 2 else json.dumps(c)[1:-1].replace("/", "\\/")
            for i, c in enumerate(key)
        ),
    }


def _leaks(text: str) -> list[str]:
    """Every spelling of the key found in ``text``."""
    forms = {KEY, *_spellings(KEY).values(), KEY.replace("/", "\\/")}
    return [form for form in forms if form in text]


@pytest.mark.parametrize("spelling", list(_spellings(KEY)))
def test_an_echoed_key_is_masked_in_every_spelling_everywhere(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """A 422 whose detail echoes the key (JSON-escaped this way): stderr, the JSON log, the
    ledger's error column, `payrun report` and its JSON show *** and never the key."""
    echoed = _spellings(KEY)[spelling]
    refusal = (
        '{"errors": [{"title": "Invalid request", "detail": "key '
        + echoed
        + ' is not allowed here"}]}'
    ).encode()

    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler

    async def refusing(scope: Any, receive: Any, send: Any) -> None:
        if not (scope["method"] == "POST" and _is_list_of(scope["path"], "payments")):
            await serve_api(scope, receive, send)
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(refusal)).encode()),
        ]
        await send({"type": "http.response.start", "status": 422, "headers": headers})
        await send({"type": "http.response.body", "body": refusal})

    monkeypatch.setattr(bank.app, "_serve_api", refusing)
    batch = write_batch(tmp_path / "b.csv", [ROW])
    ledger = tmp_path / "b.ledger.sqlite"
    texts = [run(bank, batch, ledger, "--report", str(tmp_path / "r.csv"))]
    texts.append(run(bank, batch, ledger, "--log-format", "json"))
    [row] = ledger_rows(ledger)
    assert "key *** is not allowed" in row["error"], row
    outputs = [f.stdout + f.stderr for f in texts] + [row["error"]]
    for fmt in ("csv", "json"):
        report = subprocess.run(
            [sys.executable, "-m", "payrun", "report", str(ledger), "--format", fmt],
            env=run_env(bank),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        outputs.append(report.stdout + report.stderr)
    outputs.append((tmp_path / "r.csv").read_text(encoding="utf-8"))
    assert "***" in outputs[1], outputs[1]
    assert [_leaks(text) for text in outputs] == [[]] * len(outputs)


# -- D8, D9: broken answers are bank errors --------------------------------------------------


def test_a_payments_list_without_its_array_is_a_bank_error_not_an_empty_list(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create's answer is lost (after the bank made the payment), then the payments
    list comes without its array: the run stops (exit 3) and never creates a second."""
    created: list[str] = []

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "POST" and _is_list_of(path, "payments"):
            created.append(path)
            return 500, b"{}"
        if method == "GET" and _is_list_of(path, "payments") and created:
            return status, _edit(body, lambda d: d.pop("payments"))
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    batch = write_batch(tmp_path / "b.csv", [ROW])
    finished = run(bank, batch, tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    _one_line_error(finished)
    assert "no 'payments' array" in finished.stdout + finished.stderr, finished.describe()
    assert len(bank.state.payments) == 1


@pytest.mark.parametrize(("path", "code"), [("/v0/index", 2), ("payments", 3)])
def test_a_deeply_nested_answer_is_a_bank_error(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, code: int
) -> None:
    """An answer nested 100,000 deep says so on one line: from the index, the base URL is
    not the bank's API (exit 2); from a list, a bank error (exit 3)."""
    nested = b"[" * 100_000 + b"]" * 100_000

    def rewrite(method: str, at: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        return (200, nested) if method == "GET" and at.endswith(path) else None

    rewrite_answers(bank, monkeypatch, rewrite)
    finished = run(bank, write_batch(tmp_path / "b.csv", [ROW]), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == code, finished.describe()
    _one_line_error(finished)
    assert "nested too deep" in finished.stdout + finished.stderr, finished.describe()


def test_an_oversize_answer_is_a_bank_error(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 20 MB answer to a payments list: exit 3 on one line naming the limit."""
    big = b'{"pad": "' + b"x" * (20 * 1024 * 1024) + b'"}'
    rewrite_answers(
        bank, monkeypatch, lambda m, p, s, b: (200, big) if _is_list_of(p, "payments") else None
    )
    finished = run(bank, write_batch(tmp_path / "b.csv", [ROW]), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    _one_line_error(finished)
    assert "limit of 16777216 bytes" in finished.stdout + finished.stderr, finished.describe()


def test_a_base_url_that_redirects_is_a_configuration_error(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 301 from /v0/index: exit 2 (fix the base URL), not 3 (run again)."""
    rewrite_answers(
        bank,
        monkeypatch,
        lambda m, p, s, b: (301, b"") if p == "/v0/index" else None,
        headers=lambda m, p: [(b"location", b"https://elsewhere.test/v0/index")],
    )
    finished = run(
        bank, write_batch(tmp_path / "b.csv", make_rows(1, 1)), tmp_path / "b.ledger.sqlite"
    )
    assert finished.returncode == 2, finished.describe()
    _one_line_error(finished)
    assert "PAYRUN_BASE_URL" in finished.stdout + finished.stderr, finished.describe()


@pytest.mark.parametrize("spelling", ["ordinary", "slash", "all-u", "mixed"])
def test_a_key_echoed_in_a_successful_answer_is_masked_before_it_is_read(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """A submission answer (2xx) whose status reason echoes the key: stderr, the JSON log's
    row events, the ledger's error column and the JSON report show *** and never the key."""
    echoed = _spellings(KEY)[spelling].encode()

    def echo(_method: str, _path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if b'"submission-status"' not in body:
            return None
        reason = b'"submission-status":"failed","submission-status-reason":"key ' + echoed + b'"'
        return status, re.sub(rb'"submission-status": ?"[a-z-]+"', lambda _: reason, body)

    rewrite_answers(bank, monkeypatch, echo)
    batch = write_batch(tmp_path / "b.csv", [ROW])
    ledger = tmp_path / "b.ledger.sqlite"
    report = tmp_path / "r.json"
    args = ("--wait", "--wait-timeout", "40", "--log-format", "json", "--report", str(report))
    finished = run(bank, batch, ledger, *args)
    [row] = ledger_rows(ledger)
    assert row["status"] == "failed" and "key ***" in row["error"], finished.describe()
    outputs = [finished.stdout, finished.stderr, row["error"], report.read_text()]
    assert [_leaks(text) for text in outputs] == [[]] * len(outputs)


def test_a_key_with_markup_in_an_html_error_page_is_masked_whole() -> None:
    """A key holding ``<...>`` echoed in an HTML error page: masked before the tags are
    stripped (stripping would cut it into pieces no longer the key) and after."""
    key = "sk_<b>live</b>_x1"
    secrets = Secrets([key])
    page = f"<html><body><h1>Forbidden</h1><p>key {key} is not allowed</p></body></html>"
    refused = error_from_response("GET", "/v0/x", 403, page, secrets=secrets, write=False)
    assert "***" in str(refused) and "live" not in str(refused), str(refused)


def test_masking_an_answer_body_keeps_every_other_byte() -> None:
    """``mask_body`` masks each spelling inside raw JSON bytes (still JSON after), and leaves
    a body without the key, or one that is not UTF-8, byte for byte."""
    secrets = Secrets([KEY])
    for echoed in _spellings(KEY).values():
        body = b'{"name": "Ann", "reason": "key ' + echoed.encode() + b' here"}'
        assert json.loads(secrets.mask_body(body)) == {"name": "Ann", "reason": "key *** here"}
    plain = json.dumps({"name": "Zo\u00eb", "links": {"self": "/v0/x%2F"}}).encode()
    assert secrets.mask_body(plain) is plain
    assert secrets.mask_body(b"\xff\xfe" + KEY.encode() + b"\xff") == b"\xff\xfe***\xff"
