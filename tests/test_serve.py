"""The review page through Starlette's in-process client: users, sign-in, CSRF, uploads,
verdicts, plans, approvals (and the maker's refused ones), runs, progress and the report."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest

from _run_helpers import ACCOUNTS, BatchRow, write_batch
from _serve_helpers import (
    PASSWORD,
    Desk,
    csrf_of,
    directory_batch,
    make_desk,
    post,
    sign_in,
    upload,
)
from payrun.approval import load_policy, load_private_key, public_key_pem
from payrun.ledger import open_ledger
from payrun.sandbox import RunningSandbox, serve_in_thread
from payrun.serve import add_user, key_path, load_users

RUN_TIMEOUT_S = 60.0


@pytest.fixture
def desk(tmp_path: Path, sandbox_server: RunningSandbox) -> Desk:
    """A ledger dir with carol (maker), alice and bob (approvers) paying the sandbox."""
    return make_desk(tmp_path / "desk", sandbox_server)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<style>.*?</style>|<[^>]+>", " ", html, flags=re.S))


def _plan_url(desk: Desk, tmp_path: Path, tag: str, rows: int = 3) -> str:
    """carol uploads a good batch and requests approval; the plan page's URL."""
    maker = desk.client()
    sign_in(maker, "carol")
    verdict = upload(maker, directory_batch(tmp_path / f"{tag}.csv", rows, tag))
    token = csrf_of(maker.get(verdict).text)
    answer = maker.post(verdict + "/plan", data={"csrf": token})
    assert answer.status_code == 303, _text(answer.text)
    return str(answer.headers["location"])


def test_add_user_keeps_a_scrypt_hash_never_the_password(tmp_path: Path) -> None:
    """The users file (0600) holds an scrypt hash; an approver's key is 0600 beside it."""
    users = tmp_path / "users.json"
    key = add_user(users, "alice", "approver", PASSWORD)
    text = users.read_text(encoding="utf-8")
    assert PASSWORD not in text
    assert json.loads(text)["users"]["alice"]["password"].startswith("scrypt$")
    assert users.stat().st_mode & 0o777 == 0o600
    assert key is not None and key.stat().st_mode & 0o777 == 0o600
    assert load_users(users)["alice"].role == "approver"


def test_wrong_password_or_name_says_so_without_saying_which(desk: Desk) -> None:
    """A wrong password and an unknown name get the same answer; the right one signs in."""
    client = desk.client()
    assert sign_in(client, "carol", "not the password") == 401
    token = csrf_of(client.get("/sign-in").text)
    wrong = client.post("/sign-in", data={"name": "carol", "password": "x", "csrf": token})
    stranger = desk.client()
    token = csrf_of(stranger.get("/sign-in").text)
    unknown = stranger.post(
        "/sign-in", data={"name": "nobody", "password": PASSWORD, "csrf": token}
    )
    assert unknown.status_code == wrong.status_code == 401
    assert "The name or password is wrong." in wrong.text
    assert _text(unknown.text) == _text(wrong.text).replace('value="carol"', "")
    assert sign_in(client, "carol") == 303
    assert "Sign out" in client.get("/plans").text


def test_a_post_without_the_csrf_token_is_refused(desk: Desk) -> None:
    """Sign-in, sign-out and upload without the session's token: 403, nothing done."""
    client = desk.client()
    client.get("/sign-in")
    answer = client.post("/sign-in", data={"name": "carol", "password": PASSWORD})
    assert answer.status_code == 403
    sign_in(client, "carol")
    assert client.post("/sign-out", data={"csrf": "forged"}).status_code == 403
    assert client.get("/plans").status_code == 200
    files = {"batch": ("a.csv", b"payee_name\n", "text/csv")}
    assert client.post("/upload", data={"csrf": "x"}, files=files).status_code == 403
    assert not (desk.config.ledger_dir / "batches").exists()


def test_session_cookie_is_httponly_samesite_strict_and_expires(desk: Desk) -> None:
    """The session cookie is signed, HttpOnly, SameSite=Strict, with a Max-Age."""
    client = desk.client()
    token = csrf_of(client.get("/sign-in").text)
    answer = client.post("/sign-in", data={"name": "carol", "password": PASSWORD, "csrf": token})
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "max-age=" in cookie


def test_pages_after_sign_in_need_a_session(desk: Desk) -> None:
    """Signed out, every page sends you to sign in; sign-out ends the session."""
    client = desk.client()
    assert client.get("/plans").headers["location"] == "/sign-in"
    sign_in(client, "carol")
    assert post(client, "/sign-out", "/plans") == 303
    assert client.get("/upload").headers["location"] == "/sign-in"


def test_upload_with_errors_shows_the_verdict_table(desk: Desk, tmp_path: Path) -> None:
    """Row, column and what to fix, as validate says it; no "Request approval"."""
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "payee_name,sort_code,account_number,amount,reference,source_account\n"
        "Oliver Smith,30908,00705473,12.00,R1,040004 30000001\n",
        encoding="utf-8",
    )
    client = desk.client()
    sign_in(client, "carol")
    page = client.get(upload(client, bad)).text
    assert "<table>" in page and '<th scope="col">Row</th>' in page
    assert "sort_code" in page and "1 invalid" in _text(page)
    assert "Request approval" not in page


def test_upload_is_stored_under_a_server_chosen_name(desk: Desk, tmp_path: Path) -> None:
    """A file named like a path is kept as batches/<random>/batch.csv, and only there."""
    batch = directory_batch(tmp_path / "good.csv", 2, "N")
    client = desk.client()
    sign_in(client, "carol")
    token = csrf_of(client.get("/upload").text)
    files = {"batch": ("../../evil.csv", batch.read_bytes(), "text/csv")}
    answer = client.post("/upload", data={"csrf": token}, files=files)
    assert answer.status_code == 303
    kept = list((desk.config.ledger_dir / "batches").glob("*/batch.csv"))
    assert len(kept) == 1 and re.fullmatch(r"[0-9a-f]{32}", kept[0].parent.name)
    assert not (desk.config.ledger_dir.parent / "evil.csv").exists()


def test_upload_over_the_size_cap_is_refused(desk: Desk) -> None:
    """A body larger than MAX_UPLOAD_BYTES is refused (413) before it is read."""
    from payrun.serve import MAX_UPLOAD_BYTES

    client = desk.client()
    sign_in(client, "carol")
    headers = {"content-length": str(MAX_UPLOAD_BYTES + 1)}
    answer = client.post("/upload", content=b"x", headers=headers)
    assert answer.status_code == 413


def test_request_approval_makes_the_plan(desk: Desk, tmp_path: Path) -> None:
    """The plan page shows its first 12 hex, rows, per-account total, maker, no approvals."""
    url = _plan_url(desk, tmp_path, "P")
    plan_id = url.rsplit("/", 1)[1]
    maker = desk.client()
    sign_in(maker, "carol")
    page = _text(maker.get(url).text)
    assert f"Plan {plan_id[:12]}" in page and "awaiting approval" in page
    assert "040004 30000001" in page and "Maker carol" in page and "No approvals yet" in page
    assert "Approve" not in page


def test_the_maker_cannot_approve_and_a_forged_approve_is_recorded(
    desk: Desk, tmp_path: Path
) -> None:
    """No Approve button for the maker; a forged POST is 403 and in the audit trail."""
    url = _plan_url(desk, tmp_path, "M")
    maker = desk.client()
    sign_in(maker, "carol")
    assert "Approve" not in maker.get(url).text
    assert post(maker, url + "/approve", url, note="me") == 403
    ledger = next((desk.config.ledger_dir / "batches").glob("*/batch.csv.ledger.sqlite"))
    with open_ledger(ledger, readonly=True) as store:
        events = [(e.event, e.actor) for e in store.audit_trail()]
    assert ("approve-refused", "carol") in events
    assert "approved" not in _text(maker.get(url).text).split("Approvals")[1][:40]


def test_an_approver_approves_then_pay_runs_to_the_report(desk: Desk, tmp_path: Path) -> None:
    """alice approves; carol presses Pay; progress reaches the end; the report opens."""
    url = _plan_url(desk, tmp_path, "A")
    approver = desk.client()
    sign_in(approver, "alice")
    page = approver.get(url).text
    assert "Approve" in page and "Reject" in page and 'for="note"' in page
    assert post(approver, url + "/approve", url, note="checked") == 303
    maker = desk.client()
    sign_in(maker, "carol")
    assert "approved" in _text(maker.get(url).text)
    assert post(maker, url + "/pay", url) == 303
    page = _wait_for(maker, url, "Download report (.xlsx)")
    assert "3 of 3 rows paid" in _text(page)
    report = maker.get(url + "/report.xlsx")
    assert report.status_code == 200
    (tmp_path / "r.xlsx").write_bytes(report.content)
    assert openpyxl.load_workbook(tmp_path / "r.xlsx").sheetnames


def _wait_for(client: object, url: str, words: str) -> str:
    from starlette.testclient import TestClient

    assert isinstance(client, TestClient)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        page = client.get(url).text
        if words in page:
            return page
        time.sleep(0.2)
    msg = f"{words!r} never showed: {_text(page)[-400:]}"
    raise AssertionError(msg)


def test_reject_needs_a_note_and_closes_the_plan(desk: Desk, tmp_path: Path) -> None:
    """A rejection without a note is refused; with one, the plan shows rejected, no Pay."""
    url = _plan_url(desk, tmp_path, "R")
    approver = desk.client()
    sign_in(approver, "bob")
    assert post(approver, url + "/reject", url) == 400
    assert post(approver, url + "/reject", url, note="wrong month") == 303
    page = approver.get(url).text
    assert "State: rejected" in _text(page) and ">Pay</button>" not in page
    assert "rejected" in _text(approver.get("/plans").text)


def test_pay_before_approval_is_refused(desk: Desk, tmp_path: Path) -> None:
    """A forged Pay on a plan awaiting approval is refused (409); no run starts."""
    url = _plan_url(desk, tmp_path, "U")
    maker = desk.client()
    sign_in(maker, "carol")
    assert post(maker, url + "/pay", url) == 409
    assert not list((desk.config.ledger_dir / "batches").glob("*/runs"))


def test_a_file_changed_after_approval_voids_it(desk: Desk, tmp_path: Path) -> None:
    """Pay on a plan whose stored file changed since: refused with the reason, no run."""
    url = _plan_url(desk, tmp_path, "V")
    approver = desk.client()
    sign_in(approver, "alice")
    post(approver, url + "/approve", url)
    stored = next((desk.config.ledger_dir / "batches").glob("*/batch.csv"))
    stored.write_text(stored.read_text(encoding="utf-8").replace("100.00", "900.00"))
    token = csrf_of(approver.get(url).text)
    answer = approver.post(url + "/pay", data={"csrf": token})
    assert answer.status_code == 409
    assert "no longer reads as plan" in _text(answer.text)
    assert not list((desk.config.ledger_dir / "batches").glob("*/runs"))


def test_plans_lists_each_state(desk: Desk, tmp_path: Path) -> None:
    """The Plans page names a plan awaiting approval and an approved one."""
    first = _plan_url(desk, tmp_path, "L1")
    _plan_url(desk, tmp_path, "L2")
    approver = desk.client()
    sign_in(approver, "alice")
    post(approver, first + "/approve", first)
    page = _text(approver.get("/plans").text)
    assert "awaiting approval" in page and " approved" in page


def test_a_policy_asking_two_approvers_for_new_payees_waits_for_the_second(
    tmp_path: Path,
) -> None:
    """With the policy's second approver for new payees, one approval leaves the plan
    awaiting approval (the page says why); bob's second approval makes it payable."""

    # Its own bank: on the session's, other tests may have made these payees already
    with serve_in_thread() as sandbox:
        _two_approvals(tmp_path, sandbox)


def _two_approvals(tmp_path: Path, sandbox: RunningSandbox) -> None:
    first = make_desk(tmp_path / "desk", sandbox)
    entries = []
    for name in ("alice", "bob"):
        key = load_private_key(key_path(first.config.users_file, name))
        entries.append(f'[[approver]]\nname = "{name}"\npublic_key = """{public_key_pem(key)}"""')
    policy_file = tmp_path / "policy.toml"
    rules = "[approval]\napprovers = 1\nsecond_approver_for_new_payees = true\n"
    policy_file.write_text(rules + "\n".join(entries), encoding="utf-8")
    policy_file.chmod(0o644)
    # The page checks with the policy, and its plan and run children get it too
    bank = replace(first.config.bank, policy=policy_file)
    desk = Desk(replace(first.config, policy=load_policy(policy_file), bank=bank))
    url = _plan_url(desk, tmp_path, "Q", rows=8)
    for name, state in (("alice", "awaiting approval"), ("bob", "approved")):
        approver = desk.client()
        sign_in(approver, name)
        assert "it pays a new or changed payee" in _text(approver.get(url).text)
        assert post(approver, url + "/approve", url) == 303
        assert f"State: {state}" in _text(approver.get(url).text)


def test_an_approver_cannot_approve_a_plan_they_made(desk: Desk, tmp_path: Path) -> None:
    """alice (an approver) makes a plan: no Approve for her, and her forged POST is 403."""
    client = desk.client()
    sign_in(client, "alice")
    verdict = upload(client, directory_batch(tmp_path / "own.csv", 2, "O"))
    made = client.post(verdict + "/plan", data={"csrf": csrf_of(client.get(verdict).text)})
    url = made.headers["location"]
    assert ">Approve</button>" not in client.get(url).text
    assert post(client, url + "/approve", url) == 403
    assert "awaiting approval" in _text(client.get(url).text)


def test_a_tampered_session_cookie_signs_you_out(desk: Desk) -> None:
    """A session cookie changed by hand fails its signature: back to the sign-in page."""
    client = desk.client()
    sign_in(client, "carol")
    value = client.cookies["payrun_session"]
    tampered = ("f" if value[0] != "f" else "e") + value[1:]
    client.cookies.clear()
    client.cookies.set("payrun_session", value)
    assert client.get("/plans").status_code == 200
    client.cookies.clear()
    client.cookies.set("payrun_session", tampered)
    assert client.get("/plans").headers["location"] == "/sign-in"


def test_the_plan_page_shows_each_new_payees_confirmation_of_payee_answer(
    tmp_path: Path,
) -> None:
    """A plan with three new payees (one the bank's directory matches, one close, one
    unknown): its page shows each answer, the close match with the bank's suggested name,
    highlighted and labelled, and the rows CoP held are not in the plan."""
    payees = [
        ("Mia Davies", "110001", "22039287"),
        ("Grace Turnor", "086086", "83231350"),
        ("Peter Nobody", "401276", "15487605"),
    ]
    rows = [
        BatchRow(f"C{i}", name, code, number, "10.00", f"C-{i}", ACCOUNTS[0])
        for i, (name, code, number) in enumerate(payees)
    ]
    with serve_in_thread(deliver_after_ms=50) as sandbox:
        desk = make_desk(tmp_path / "desk", sandbox)
        maker = desk.client()
        sign_in(maker, "carol")
        verdict = upload(maker, write_batch(tmp_path / "cop.csv", rows))
        token = csrf_of(maker.get(verdict).text)
        answer = maker.post(verdict + "/plan", data={"csrf": token})
        assert answer.status_code == 303, _text(answer.text)
        html = maker.get(answer.headers["location"]).text
    page = _text(html)
    assert "Rows to pay 1 " in page and "Held (not in the plan) 2 " in page
    label = 'aria-label="Confirmation of Payee answer for {}: {}"'
    assert label.format("Mia Davies", "match") in html
    close = "close match: the bank says &#39;Grace Turner&#39;"
    assert label.format("Grace Turnor", close) in html
    assert label.format("Peter Nobody", "no match (no-match-name)") in html
    assert re.search(r'<tr class="new"><td>Mia Davies</td>', html)
    assert re.search(r'<tr class="held"><td>Grace Turnor</td>', html)
    assert "new payee; Confirmation of Payee: match" in page
    assert "run again with --accept-close-match" in page
