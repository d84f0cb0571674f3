"""Helpers for the review page's tests: users, a configured app, signing in, forms.

``desk`` makes a ledger dir with a maker (carol) and two approvers (alice, bob), and a
``ServeConfig`` whose children pay the given sandbox bank over loopback.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from starlette.testclient import TestClient

from _run_helpers import ACCOUNTS, BatchRow, run_env, write_batch
from payrun.approval import NO_POLICY, Policy
from payrun.sandbox import RunningSandbox
from payrun.serve import Bank, ServeConfig, add_user, create_app

PASSWORD = "correct horse battery"
"""Every test user's password."""
USERS = {"carol": "maker", "alice": "approver", "bob": "approver"}
"""The test users: carol makes plans, alice and bob approve them."""
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass(frozen=True, slots=True)
class Desk:
    """A ledger dir with users and the config a server of it runs with."""

    config: ServeConfig

    def client(self) -> TestClient:
        """A fresh in-process browser of the app (its own cookies)."""
        return TestClient(create_app(self.config), follow_redirects=False)


def make_desk(root: Path, sandbox: RunningSandbox, policy: Policy = NO_POLICY) -> Desk:
    """Users and a config under ``root`` paying ``sandbox``."""
    users = root / "users.json"
    for name, role in USERS.items():
        add_user(users, name, role, PASSWORD)
    key = root / "api-key"
    key.write_text(sandbox.api_key, encoding="ascii")
    bank = Bank(sandbox.base_url, key, 1.0, None)
    return Desk(ServeConfig(root, users, policy, bank, "k" * 64))


def csrf_of(html: str) -> str:
    """The CSRF token in a page's forms."""
    found = _CSRF.search(html)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def sign_in(client: TestClient, name: str, password: str = PASSWORD) -> int:
    """Sign in through the form; the answer's status (303 when signed in)."""
    token = csrf_of(client.get("/sign-in").text)
    answer = client.post("/sign-in", data={"name": name, "password": password, "csrf": token})
    return answer.status_code


def upload(client: TestClient, path: Path) -> str:
    """Upload ``path`` with the page's token; the verdict page's URL."""
    token = csrf_of(client.get("/upload").text)
    with path.open("rb") as handle:
        answer = client.post(
            "/upload", data={"csrf": token}, files={"batch": (path.name, handle, "text/csv")}
        )
    assert answer.status_code == 303, answer.text
    return answer.headers["location"]


def post(client: TestClient, url: str, page: str, **fields: str) -> int:
    """POST ``fields`` to ``url`` with the CSRF token of ``page``; the status."""
    token = csrf_of(client.get(page).text)
    return client.post(url, data={"csrf": token, **fields}).status_code


def directory_rows(count: int, tag: str) -> list[BatchRow]:
    """``count`` rows to payees the sandbox's Confirmation of Payee directory knows (so none
    is held), from its first source account, references unique to ``tag``."""
    import payrun.sandbox

    directory = Path(payrun.sandbox.__file__).with_name("directory.csv")
    with directory.open(encoding="utf-8") as handle:
        payees = list(csv.DictReader(handle))
    return [
        BatchRow(
            row_id=f"{tag}-{i:05d}",
            payee_name=payees[i % len(payees)]["account_holder"],
            sort_code=payees[i % len(payees)]["sort_code"],
            account_number=payees[i % len(payees)]["account_number"],
            amount=f"{100 + i}.{i % 100:02d}",
            reference=f"{tag}-{i:05d}",
            source_account=ACCOUNTS[0],
        )
        for i in range(count)
    ]


def directory_batch(path: Path, count: int, tag: str) -> Path:
    """A batch file of ``directory_rows``."""
    return write_batch(path, directory_rows(count, tag))


def start_server(root: Path, sandbox: RunningSandbox) -> tuple[subprocess.Popen[str], str]:
    """``payrun serve`` of ``root`` (``make_desk``'s) paying ``sandbox``, in its own process
    group; the process and its URL (its first stdout line)."""
    env = run_env(sandbox)
    del env["PAYRUN_API_KEY"]
    command = [
        sys.executable,
        "-m",
        "payrun",
        "serve",
        "--port",
        "0",
        "--ledger-dir",
        str(root),
        "--api-key-file",
        str(root / "api-key"),
    ]
    process = subprocess.Popen(  # noqa: S603 - our own interpreter
        command, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    name, _, url = line.partition("=")
    assert name == "PAYRUN_SERVE_URL", f"first line {line!r}"
    return process, url
