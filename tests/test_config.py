"""Settings from the environment: base URL rules, the API key's sources, caps on options."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from payrun.config import RunOptions, Secret, load_settings
from payrun.errors import ConfigError, InterruptedRunError


def test_key_from_environment_never_shows() -> None:
    """PAYRUN_API_KEY is read, and the key hides itself in repr and str."""
    settings = load_settings(
        environ={"PAYRUN_BASE_URL": "https://bank.example/", "PAYRUN_API_KEY": "s3cret"}
    )
    assert settings.base_url == "https://bank.example"
    assert settings.api_key.reveal() == "s3cret"
    assert "s3cret" not in repr(settings) + str(settings.api_key)
    assert settings.auth_scheme == "ServiceAPIKey"


def test_key_file_wins_and_scheme_is_configurable(tmp_path: Path) -> None:
    """PAYRUN_API_KEY_FILE is read (trimmed) and PAYRUN_AUTH_SCHEME changes the scheme word."""
    key = tmp_path / "key"
    key.write_text("from-file\n", encoding="utf-8")
    settings = load_settings(
        environ={
            "PAYRUN_BASE_URL": "http://127.0.0.1:8080",
            "PAYRUN_API_KEY_FILE": str(key),
            "PAYRUN_AUTH_SCHEME": "GriffinAPIKey",
        }
    )
    assert settings.api_key == Secret("from-file")
    assert settings.auth_scheme == "GriffinAPIKey"


def test_a_key_file_named_from_home_is_found_without_a_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PAYRUN_API_KEY_FILE='~/.payrun/api-key' as a crontab or systemd unit sets it (no
    shell expands the '~'): the file in the home folder is read."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".payrun").mkdir()
    (tmp_path / ".payrun" / "api-key").write_text("from-home\n", encoding="utf-8")
    settings = load_settings(
        environ={
            "PAYRUN_BASE_URL": "https://bank.example",
            "PAYRUN_API_KEY_FILE": "~/.payrun/api-key",
        }
    )
    assert settings.api_key == Secret("from-home")
    with pytest.raises(ConfigError, match="cannot read the API key file"):  # no such user
        load_settings(
            environ={
                "PAYRUN_BASE_URL": "https://bank.example",
                "PAYRUN_API_KEY_FILE": "~nosuchuser-payrun/key",
            }
        )


def test_a_key_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows editors start UTF-8 files with a BOM: it is not part of the key."""
    key = tmp_path / "key"
    key.write_bytes("\ufeffwith-bom\r\n".encode())
    settings = load_settings(
        environ={"PAYRUN_BASE_URL": "http://127.0.0.1:8080", "PAYRUN_API_KEY_FILE": str(key)}
    )
    assert settings.api_key == Secret("with-bom")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PAYRUN_API_KEY": "k"}, "PAYRUN_BASE_URL"),
        ({"PAYRUN_BASE_URL": "https://bank.example"}, "PAYRUN_API_KEY"),
        ({"PAYRUN_BASE_URL": "http://bank.example", "PAYRUN_API_KEY": "k"}, "https"),
        ({"PAYRUN_BASE_URL": "ftp://bank.example", "PAYRUN_API_KEY": "k"}, "http(s)"),
        (
            {"PAYRUN_BASE_URL": "https://bank.example", "PAYRUN_API_KEY_FILE": "/no/such"},
            "cannot read the API key file",
        ),
    ],
)
def test_bad_settings_say_what_to_do(environ: dict[str, str], message: str) -> None:
    """Each missing or unsafe setting is a ConfigError naming the fix."""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(environ=environ)


def test_a_user_name_or_password_in_the_base_url_is_refused_unshown() -> None:
    """https://user:password@host: refused (it would be kept in the ledger), never echoed."""
    with pytest.raises(ConfigError, match="has a user name or password in it") as refused:
        load_settings(
            environ={"PAYRUN_BASE_URL": "https://ops:hunter2@bank.example", "PAYRUN_API_KEY": "k"}
        )
    assert "hunter2" not in str(refused.value) and "ops" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://bank.example/v0?token=Tok-S3cret",
        "https://bank.example?Tok-S3cret",
        "https://bank.example/#Tok-S3cret",
        "https://bank.example/v0?",
    ],
)
def test_a_query_or_fragment_in_the_base_url_is_refused_unshown(url: str) -> None:
    """https://host/?token=...: refused in one line (it would be kept in the ledger),
    the query's value never echoed."""
    with pytest.raises(ConfigError, match="has a query or fragment in it") as refused:
        load_settings(environ={"PAYRUN_BASE_URL": url, "PAYRUN_API_KEY": "k"})
    assert "Tok-S3cret" not in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("scheme", ["A\nB", "Service APIKey", "Bearer:"])
def test_an_auth_scheme_that_is_not_one_word_is_refused_as_such(scheme: str) -> None:
    """A bad PAYRUN_AUTH_SCHEME is named as the fault (it was blamed on the key)."""
    with pytest.raises(ConfigError, match="PAYRUN_AUTH_SCHEME must be one word"):
        load_settings(
            environ={
                "PAYRUN_BASE_URL": "https://bank.example",
                "PAYRUN_API_KEY": "k",
                "PAYRUN_AUTH_SCHEME": scheme,
            }
        )


def test_an_oversized_key_file_or_a_device_is_refused_without_reading_it_all(
    tmp_path: Path,
) -> None:
    """A key file over 64 KiB, or /dev/zero (it filled memory until the kernel killed the
    run): refused with one line that never shows the file's name or content."""
    big = tmp_path / "key"
    big.write_bytes(b"k" * 70_000)
    for path in (big, Path("/dev/zero")):
        with pytest.raises(ConfigError, match="holds more than 65536 bytes") as refused:
            load_settings(
                environ={
                    "PAYRUN_BASE_URL": "https://bank.example",
                    "PAYRUN_API_KEY_FILE": str(path),
                }
            )
        assert str(path) not in str(refused.value)


def test_a_piped_key_file_is_read_and_a_stop_ends_the_wait_for_its_writer(
    tmp_path: Path,
) -> None:
    """--api-key-file <(secret-tool ...) is a pipe: its key is read; with no writer yet,
    a stop request (Ctrl-C) ends the wait at once instead of blocking for ever."""
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    environ = {"PAYRUN_BASE_URL": "https://bank.example", "PAYRUN_API_KEY_FILE": str(fifo)}
    writer = threading.Thread(target=lambda: fifo.write_text("piped-key\n", encoding="utf-8"))
    writer.start()
    assert load_settings(environ=environ).api_key == Secret("piped-key")
    writer.join(5)
    started = time.monotonic()
    with pytest.raises(InterruptedRunError, match="stopped while waiting for the API key file"):
        load_settings(environ=environ, stopped=lambda: time.monotonic() - started > 0.3)
    assert time.monotonic() - started < 3
    with fifo.open("w"):  # let the reader left waiting end
        pass


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_plain_http_allowed_on_loopback(host: str) -> None:
    """http:// is accepted for loopback hosts (the sandbox)."""
    settings = load_settings(environ={"PAYRUN_BASE_URL": f"http://{host}:9", "PAYRUN_API_KEY": "k"})
    assert settings.base_url.startswith("http://")


def test_run_option_caps() -> None:
    """The bank's limits are hard caps on the run options."""
    RunOptions(max_in_flight=50, per_account_submits=3)
    with pytest.raises(ConfigError, match="between 1 and 50"):
        RunOptions(max_in_flight=51)
    with pytest.raises(ConfigError, match="between 1 and 3"):
        RunOptions(per_account_submits=0)


@pytest.mark.parametrize(
    "key", ["abc\x01def-SECRETKEY", "abc\ndef-SECRETKEY", "abc def-SECRETKEY", "abcé-SECRETKEY"]
)
@pytest.mark.parametrize("source", ["env", "file"])
def test_a_key_that_cannot_travel_in_a_header_is_refused_unshown(
    key: str, source: str, tmp_path: Path
) -> None:
    """A key with a control character, line break, space or non-ASCII letter: ConfigError.

    The message says where the key came from and what is wrong, never the key itself
    (an HTTP client refusing the header would quote it).
    """
    environ = {"PAYRUN_BASE_URL": "https://bank.example"}
    if source == "env":
        environ["PAYRUN_API_KEY"] = key
    else:
        path = tmp_path / "key"
        path.write_text(key, encoding="utf-8")
        environ["PAYRUN_API_KEY_FILE"] = str(path)
    with pytest.raises(ConfigError, match="cannot be sent in an HTTP header") as info:
        load_settings(environ=environ)
    assert "SECRETKEY" not in str(info.value)


def test_payrun_ledger_url_is_a_postgresql_url_or_refused_without_repeating_it() -> None:
    """PAYRUN_LEDGER_URL selects a ledger database (shown masked); anything else set there is
    a ConfigError that does not repeat it (it may be a mistyped URL with a password)."""
    from payrun.config import ledger_url_from_env

    assert ledger_url_from_env({}) is None
    url = ledger_url_from_env({"PAYRUN_LEDGER_URL": " postgres://u:pw-1@db/x "})
    assert url is not None and url.reveal() == "postgres://u:pw-1@db/x"
    assert str(url) == "postgres://u:***@db/x"
    with pytest.raises(ConfigError, match="not a PostgreSQL URL") as caught:
        ledger_url_from_env({"PAYRUN_LEDGER_URL": "postgresq://u:pw-2@db/x"})
    assert "pw-2" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", None), (" 20 ", 20.0), ("3", 3.0), ("2.5", None), ("301", None), ("soon", None)],
)
def test_the_fleet_heartbeat_timeout_is_read_and_checked_here(
    text: str, expected: float | None
) -> None:
    """PAYRUN_FLEET_HEARTBEAT_TIMEOUT: unset is None, 3 to 300 seconds is taken, anything
    else is refused naming the variable."""
    from payrun.config import heartbeat_timeout_from_env

    environ = {"PAYRUN_FLEET_HEARTBEAT_TIMEOUT": text}
    if expected is None and text.strip():
        with pytest.raises(ConfigError, match="^PAYRUN_FLEET_HEARTBEAT_TIMEOUT is seconds from 3"):
            heartbeat_timeout_from_env(environ)
    else:
        assert heartbeat_timeout_from_env(environ) == expected


def test_a_fleet_lane_sees_only_the_auth_scheme_of_the_environment() -> None:
    """A worker's lanes take PAYRUN_AUTH_SCHEME from the environment, never its API key."""
    from payrun.config import auth_scheme_environ

    environ = {"PAYRUN_AUTH_SCHEME": "GriffinAPIKey", "PAYRUN_API_KEY": "s3cret", "HOME": "/h"}
    assert auth_scheme_environ(environ) == {"PAYRUN_AUTH_SCHEME": "GriffinAPIKey"}
    assert auth_scheme_environ({"PAYRUN_API_KEY": "s3cret"}) == {}
