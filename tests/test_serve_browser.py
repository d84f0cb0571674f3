"""The review page in a real headless Chromium (Debian's, never Playwright's download),
driven only by accessible names: the flows of issue 30, and the screenshots in docs/.

``PAYRUN_SCREENSHOTS=docs/serve pytest tests/test_serve_browser.py`` regenerates them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from _run_helpers import exactly_once_problems, wait_until, write_batch
from _serve_helpers import PASSWORD, directory_batch, directory_rows, make_desk, start_server
from payrun.sandbox import RunningSandbox, serve_in_thread

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (.ci/run installs it)."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
RUN_TIMEOUT_MS = 90_000
# A page's next state within 20 s, not Playwright's 5 s: six test workers share two cores
expect.set_options(timeout=20_000)
SHOTS = os.environ.get("PAYRUN_SCREENSHOTS")
"""Where to save the docs' screenshots (unset: none are taken)."""


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Headless Chromium."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def server(tmp_path: Path, sandbox_server: RunningSandbox) -> Iterator[str]:
    """``payrun serve`` of a fresh desk, paying the session's sandbox; its URL."""
    make_desk(tmp_path / "desk", sandbox_server)
    process, url = start_server(tmp_path / "desk", sandbox_server)
    yield url
    _stop(process)


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    """Servers a test starts; any still running when it ends (a failed test) is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()
    assert code == 0


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def _sign_in(browser: Browser, url: str, name: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    page.goto(url)
    page.get_by_label("Name").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    return page


def _upload(page: Page, batch: Path) -> None:
    page.get_by_role("link", name="Upload a batch").click()
    page.get_by_label("Batch file").set_input_files(str(batch))
    page.get_by_role("button", name="Check").click()


def _request_plan(
    browser: Browser, url: str, batch: Path, *, shoot: bool = True
) -> tuple[Page, str]:
    """carol uploads ``batch`` and requests approval; her page and the plan's URL."""
    maker = _sign_in(browser, url, "carol")
    _upload(maker, batch)
    if shoot:
        _shot(maker, "verdict-good")
    maker.get_by_role("button", name="Request approval").click()
    expect(maker.get_by_role("heading", name=re.compile(r"^Plan [0-9a-f]{12}$"))).to_be_visible()
    return maker, maker.url


def _approve(browser: Browser, plan_url: str, url: str, *, shoot: bool = True) -> Page:
    approver = _sign_in(browser, url, "alice")
    approver.get_by_role("link", name="Plans").click()
    approver.get_by_role("link", name=plan_url.rsplit("/", 1)[1][:12]).click()
    if shoot:
        _shot(approver, "plan-approver")
    approver.get_by_label("Note").fill("checked against the payroll report")
    approver.get_by_role("button", name="Approve").click()
    expect(approver.get_by_role("button", name="Pay")).to_be_visible()
    return approver


def test_sign_in_refuses_a_wrong_password(browser: Browser, server: str) -> None:
    """A wrong password: one line that names neither part; no Sign out."""
    page = browser.new_page()
    page.goto(server)
    _shot(page, "sign-in")
    page.get_by_label("Name").fill("carol")
    page.get_by_label("Password").fill("not it")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("The name or password is wrong.")
    expect(page.get_by_role("button", name="Sign out")).to_have_count(0)


def test_maker_uploads_a_file_with_errors_and_sees_them(
    browser: Browser, server: str, tmp_path: Path
) -> None:
    """The verdict table names the row, the column and what to fix; no Request approval."""
    bad = tmp_path / "bad.csv"
    rows = directory_rows(2, "E")
    broken = [replace(rows[0], sort_code="30908"), replace(rows[1], amount="12.345")]
    write_batch(bad, broken)
    page = _sign_in(browser, server, "carol")
    _upload(page, bad)
    _shot(page, "verdict-errors")
    table = page.get_by_role("table", name="What is wrong, and how to fix it")
    expect(table).to_contain_text("sort_code")
    expect(table).to_contain_text("amount")
    expect(page.get_by_role("button", name="Request approval")).to_have_count(0)


def test_request_approve_pay_and_download_the_report(
    browser: Browser, server: str, tmp_path: Path
) -> None:
    """carol requests approval and cannot approve; alice approves; Pay runs to the end;
    the report downloads and opens with openpyxl."""
    maker, plan_url = _request_plan(browser, server, directory_batch(tmp_path / "p.csv", 8, "B"))
    _shot(maker, "plan-maker")
    expect(maker.get_by_role("button", name="Approve")).to_have_count(0)
    expect(maker.get_by_role("button", name="Pay")).to_have_count(0)
    approver = _approve(browser, plan_url, server)
    approver.get_by_role("button", name="Pay").click()
    expect(approver.get_by_role("status")).to_contain_text("of 8 rows paid")
    _shot(approver, "paying")
    report = approver.get_by_role("link", name="Download report (.xlsx)")
    expect(report).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(approver.get_by_role("status")).to_contain_text("8 of 8 rows paid")
    _shot(approver, "paid")
    with approver.expect_download() as download:
        report.click()
    saved = tmp_path / "report.xlsx"
    download.value.save_as(saved)
    assert openpyxl.load_workbook(saved).sheetnames
    approver.get_by_role("link", name="Plans").click()
    expect(approver.get_by_role("table")).to_contain_text("paid")
    _shot(approver, "plans")


def test_a_file_changed_after_approval_voids_it(
    browser: Browser, server: str, tmp_path: Path
) -> None:
    """The stored file changes after approval: Pay is refused with the reason."""
    batch = directory_batch(tmp_path / "v.csv", 3, "W")
    _, plan_url = _request_plan(browser, server, batch, shoot=False)
    approver = _approve(browser, plan_url, server, shoot=False)
    stored = next((tmp_path / "desk" / "batches").glob("*/batch.csv"))
    stored.write_text(stored.read_text(encoding="utf-8").replace("100.00", "190.00"))
    approver.get_by_role("button", name="Pay").click()
    expect(approver.get_by_role("alert")).to_contain_text("no longer reads as plan")


def _run_files(desk: Path) -> str:
    """What the desk's runs wrote (stdout, stderr, pid, exit code), for a failure message."""
    return "\n".join(
        f"--- {path.name}:\n{path.read_text(encoding='utf-8', errors='replace')[-2000:]}"
        for path in sorted(desk.glob("batches/*/runs/*"))
        if path.suffix in {".out", ".err", ".pid", ".exit"}
    )


@pytest.mark.slow
def test_kill_9_of_the_server_mid_run_then_restart_pays_exactly_once(
    browser: Browser, tmp_path: Path, servers: list[subprocess.Popen[str]]
) -> None:
    """The server and its run are killed mid-run; after a restart the plan shows
    interrupted, Pay resumes it, and every row is paid exactly once."""
    with serve_in_thread(deliver_after_ms=50, latency_ms=80) as sandbox:
        desk = tmp_path / "desk"
        make_desk(desk, sandbox)
        process, url = start_server(desk, sandbox)
        servers.append(process)
        rows = directory_rows(120, "K")
        batch = write_batch(tmp_path / "k.csv", rows)
        _, plan_url = _request_plan(browser, url, batch, shoot=False)
        approver = _approve(browser, plan_url, url, shoot=False)
        # The run cannot end before the kill, however slow the machine: the bank holds its
        # payments after the first 20 (never made: the run is gone when they go on)
        with sandbox.app.hold_payments(after=20, longest_s=RUN_TIMEOUT_MS / 1000):
            approver.get_by_role("button", name="Pay").click()
            expect(approver.get_by_role("status")).to_contain_text("paying")
            # Mid-run: 20 payments made, the next ones held (the ledger may record the
            # made ones' submits later, so the page's count is not the sign)
            try:
                wait_until(
                    lambda: sandbox.app.payments_held > 0, RUN_TIMEOUT_MS / 1000, "held payments"
                )
            except AssertionError as error:
                message = f"{error}\n{_run_files(desk)}"
                raise AssertionError(message) from None
            run_pid = int(next(desk.glob("batches/*/runs/*.pid")).read_text(encoding="ascii"))
            # The approver leaves the page: its refresh (every few seconds while paying)
            # would otherwise race the page opened again after the restart
            approver.goto("about:blank")
            os.killpg(process.pid, signal.SIGKILL)
            os.killpg(run_pid, signal.SIGKILL)
            process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
        process, url = start_server(desk, sandbox)
        servers.append(process)
        try:
            approver.goto(plan_url.replace(plan_url.split("/plans/")[0], url))
            expect(approver.get_by_text("State: interrupted")).to_be_visible(timeout=RUN_TIMEOUT_MS)
            approver.get_by_role("button", name="Pay").click()
            report = approver.get_by_role("link", name="Download report (.xlsx)")
            expect(report).to_be_visible(timeout=RUN_TIMEOUT_MS)
        finally:
            _stop(process)
        ledger = next(desk.glob("batches/*/batch.csv.ledger.sqlite"))
        assert exactly_once_problems(sandbox, rows, ledger) == []


@pytest.mark.slow
def test_kill_9_of_the_server_alone_leaves_the_run_going(
    browser: Browser, tmp_path: Path, servers: list[subprocess.Popen[str]]
) -> None:
    """The run is its own process: the server killed mid-run and restarted finds it paying
    or paid, and every row is paid exactly once with no Pay pressed again."""
    with serve_in_thread(deliver_after_ms=50, latency_ms=80) as sandbox:
        desk = tmp_path / "desk"
        make_desk(desk, sandbox)
        process, url = start_server(desk, sandbox)
        servers.append(process)
        rows = directory_rows(80, "S")
        _, plan_url = _request_plan(
            browser, url, write_batch(tmp_path / "s.csv", rows), shoot=False
        )
        approver = _approve(browser, plan_url, url, shoot=False)
        approver.get_by_role("button", name="Pay").click()
        # The run is going; as above, the approver leaves the refreshing page before the
        # server goes
        expect(approver.get_by_text("State: paying")).to_be_visible()
        approver.goto("about:blank")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
        process, url = start_server(desk, sandbox)
        servers.append(process)
        try:
            approver.goto(plan_url.replace(plan_url.split("/plans/")[0], url))
            report = approver.get_by_role("link", name="Download report (.xlsx)")
            expect(report).to_be_visible(timeout=RUN_TIMEOUT_MS)
            expect(approver.get_by_role("status")).to_contain_text("80 of 80 rows paid")
        finally:
            _stop(process)
        ledger = next(desk.glob("batches/*/batch.csv.ledger.sqlite"))
        assert exactly_once_problems(sandbox, rows, ledger) == []
