"""``BankOrigin``: which URLs from the bank's answers or the ledger payrun may send to."""

from __future__ import annotations

import pytest

from payrun.bank._origin import BankOrigin

BASE = "https://bank.test"


@pytest.mark.parametrize(
    ("url", "sent_to"),
    [
        ("/v0/payments/pm.1", "https://bank.test/v0/payments/pm.1"),
        ("https://bank.test/v0/payments/pm.1", "https://bank.test/v0/payments/pm.1"),
        ("HTTPS://BANK.test:443/v0/x", "https://BANK.test:443/v0/x"),
        ("v0/payments/pm.1", "https://bank.test/v0/payments/pm.1"),
        ("?page=2", "https://bank.test/?page=2"),
    ],
)
def test_urls_on_the_banks_origin_resolve_against_the_base_url(url: str, sent_to: str) -> None:
    """Paths, same-origin absolute URLs and other relative references are sent on."""
    assert BankOrigin(BASE).resolve(url) == sent_to


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.test/v0/x",
        "http://bank.test/v0/x",
        "https://bank.test:8443/v0/x",
        "//evil.test/v0/x",
        "https://evil.test\\@bank.test/v0/x",
        "https://user@bank.test/v0/x",
        "https://bank.test\\.evil.test/v0/x",
        "/v0/x\r\nHost: evil.test",
        "ftp://bank.test/v0/x",
        "https://bank.test:99999/v0/x",
        "",
    ],
)
def test_urls_anywhere_else_are_refused(url: str) -> None:
    """Another host, scheme (http under https) or port, user info, backslashes, control
    characters: never resolved, so nothing is sent."""
    assert BankOrigin(BASE).resolve(url) is None


def test_a_base_url_with_a_path_keeps_it_for_the_banks_paths() -> None:
    """The bank's resource paths are joined to a base URL's own path, as before."""
    origin = BankOrigin("https://bank.test/api/")
    assert origin.resolve("/v0/index") == "https://bank.test/api/v0/index"
    assert origin.shown == "https://bank.test:443"


def test_a_refused_url_is_described_by_its_origin_only() -> None:
    """The message names where a refused URL points, not its path or query."""
    origin = BankOrigin(BASE)
    assert origin.describe("http://127.0.0.2:81/x?key=s3cret") == "http://127.0.0.2:81"
    assert origin.describe("https://a\\@b/") == "an address payrun cannot trust"


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("/v0/payments/pm.1", "/v0/payments/pm.1"),
        ("v0/payments/pm.1", "/v0/payments/pm.1"),
        ("https://bank.test/v0/payments/pm.1", "/v0/payments/pm.1"),
        ("https://BANK.test:443/v0/payments/pm.1?page=2", "/v0/payments/pm.1?page=2"),
        ("http://bank.test/v0/payments/pm.1", None),
    ],
)
def test_a_link_is_stored_as_one_path_however_the_bank_writes_it(
    url: str, stored: str | None
) -> None:
    """Absolute, relative and path links to one resource compare equal once canonical."""
    assert BankOrigin(BASE).canonical(url) == stored


@pytest.mark.parametrize(
    "base", ["https://bank.test", "https://bank.test/api", "https://bank.test/api/"]
)
@pytest.mark.parametrize(
    "url",
    [
        "/v0/payments/pm.1",
        "v0/payments/pm.1",
        "/v0/payments?page=2",
        "?page=2",
        "https://bank.test/api/v0/payments/pm.1",
        "https://bank.test/v0/payments/pm.1",
        "https://BANK.test:443/api/v0/payments/pm.1?page=2",
        "https://bank.test/other/x",
    ],
)
def test_canonical_and_resolve_round_trip_with_and_without_a_base_path(base: str, url: str) -> None:
    """A stored link is sent where the link itself would be, and storing a sent URL gives
    the stored link back, whether the base URL has a path or not."""
    origin = BankOrigin(base)
    sent, stored = origin.resolve(url), origin.canonical(url)
    assert sent is not None and stored is not None
    assert origin.canonical(sent) == stored
    assert origin.resolve(stored) == origin.resolve(origin.canonical(stored) or "")
    assert _same_place(origin.resolve(stored) or "") == _same_place(sent)


def _same_place(url: str) -> str:
    """A URL with the host's case and the default port written out left out."""
    return url.lower().replace(":443/", "/")


def test_a_base_path_is_not_stored_twice() -> None:
    """With the base https://bank.test/api, the bank's own URL of a payment is stored as
    its resource path and sent back to /api/v0/..., never /api/api/v0/..."""
    origin = BankOrigin("https://bank.test/api")
    assert origin.canonical("https://bank.test/api/v0/payments/pm.1") == "/v0/payments/pm.1"
    assert origin.canonical("/v0/payments/pm.1") == "/v0/payments/pm.1"
    assert origin.resolve("/v0/payments/pm.1") == "https://bank.test/api/v0/payments/pm.1"
    assert origin.canonical("https://bank.test/other/x") == "https://bank.test:443/other/x"


@pytest.mark.parametrize(
    "url",
    ["/v0/payments/pm.1", "/v0/p?page[size]=2", "/v0/p#frag", "/v0/a b", "/v0/a\\b", "//h/v0"],
)
def test_the_quick_path_for_plain_paths_agrees_with_the_full_parse(url: str) -> None:
    """A path from the root is canonical as the full parse says, quick path or not."""
    origin = BankOrigin(BASE)
    absolute = origin.resolve(url)
    expected = None if absolute is None else origin.canonical(BASE + "/" + url.lstrip("/"))
    assert origin.canonical(url) == expected
