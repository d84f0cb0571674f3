"""Settings, defaults and hard caps: the only module that reads ``os.environ``.

Input: the environment and command-line options. Output: frozen value objects
(``Settings``, ``ValidationOptions``, ``RunOptions``) built once at the edge and passed
down explicitly. Raises ``ConfigError`` for a missing or unsafe setting.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import shlex
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from payrun.errors import ConfigError, InterruptedRunError

# cryptography loads only when a signing key is configured
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from payrun._models import ApprovedRows

__all__ = [
    "FLEET_EXTRA",
    "REQUEST_TIMEOUT",
    "DEFAULT_AUTH_SCHEME",
    "DEFAULT_DUPLICATE_WINDOW_DAYS",
    "DEFAULT_MAX_AMOUNT",
    "DEFAULT_WAIT_TIMEOUT",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "MAX_HEARTBEAT_TIMEOUT",
    "MIN_HEARTBEAT_TIMEOUT",
    "DEFAULT_SETTLE_WAIT",
    "MAX_SETTLE_WAIT",
    "SHORT_SETTLE_WAIT",
    "MAX_IN_FLIGHT_CAP",
    "PER_ACCOUNT_SUBMITS_CAP",
    "DatabaseURL",
    "RunOptions",
    "Secret",
    "Settings",
    "SigningKey",
    "ValidationOptions",
    "auth_scheme_environ",
    "check_base_url",
    "check_heartbeat_timeout",
    "completion_requested",
    "configured_secrets",
    "database_url",
    "heartbeat_timeout_from_env",
    "ledger_url_from_env",
    "environ_with_ledger_url",
    "login_name",
    "policy_path_from_env",
    "load_settings",
    "mask_database_url",
    "redact_url",
    "refuse_key_open_to_others",
    "parse_settle_wait",
    "settle_wait_from_env",
    "without_userinfo",
]

MAX_IN_FLIGHT_CAP = 50
"""The bank answers 429 above 50 requests in flight per organization."""
PER_ACCOUNT_SUBMITS_CAP = 3
"""The bank answers 429 above 3 concurrent submit-payment requests per bank account."""
DEFAULT_MAX_AMOUNT = Decimal("1000000.00")
"""The Faster Payments scheme limit per payment."""
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_DUPLICATE_WINDOW_DAYS = 3
DEFAULT_AUTH_SCHEME = "ServiceAPIKey"
DEFAULT_WAIT_TIMEOUT = 600.0
"""Seconds ``--wait`` follows submissions before giving up (exit 3: run again to keep waiting)."""
FLEET_EXTRA = (
    "install payrun's fleet extra from the project: pip install '.[fleet]' in a payrun"
    " checkout, or pip install 'payrun-VERSION-py3-none-any.whl[fleet]' (docs/fleet.md)"
)
"""How to install what ``payrun fleet`` and a PostgreSQL ledger need (payrun is not on PyPI:
the name ``payrun`` there is another project's)."""

REQUEST_TIMEOUT = 30.0
"""How long a request waits for the bank's answer."""
DEFAULT_HEARTBEAT_TIMEOUT = 15.0
"""Fleet: seconds without a heartbeat before Temporal gives a batch to another worker (a
killed worker's database session ends at once on its machine's kernel; a dead machine's
within the ledger connections' keepalives, about 25 s)."""
MIN_HEARTBEAT_TIMEOUT = 3.0
"""The shortest heartbeat timeout accepted, in seconds (a paying worker beats every second)."""
MAX_HEARTBEAT_TIMEOUT = 300.0
"""The longest heartbeat timeout accepted, in seconds."""
DEFAULT_SETTLE_WAIT = 60.0
"""How long after a request whose answer was lost (a timeout, a crash of payrun) the bank
may still carry it out: a row "in doubt" is checked with the bank, and sent again if the
bank has nothing, only once that much time has passed since the request's last possible
send (``--settle-wait``, ``PAYRUN_SETTLE_WAIT``)."""
MAX_SETTLE_WAIT = 86_400.0
"""A settle wait above a day is a mistake (a unit typed wrong), not a bank's bound."""
SHORT_SETTLE_WAIT = 5.0
"""A settle wait under 5 s is shorter than a real bank may take to carry out a request
whose answer was lost (a gateway holds it, the bank's own timeouts run to seconds): a run
with rows in doubt warns that they may be paid twice (a test bank's 1 s is fine)."""


class Secret:
    """A string that never shows itself in ``repr``, ``str``, logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """Return the secret text: call only where it goes on the wire."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """The Ed25519 private key every request is signed with, and the key id the bank issued
    for its public half (``repr`` shows the key id only)."""

    key_id: str
    private_key: Ed25519PrivateKey = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    """A ledger database's ``postgresql://`` URL: it may hold a password, so ``str`` and
    ``repr`` show it masked (``postgresql://user:***@host/db``) and only ``reveal`` shows it."""

    secret: Secret = field(repr=False)

    def reveal(self) -> str:
        """The URL itself: call only where it is handed to the database driver."""
        return self.secret.reveal()

    @property
    def masked(self) -> str:
        """The URL with its password (in the address or the query) replaced by ``***``."""
        return mask_database_url(self.reveal())

    def passwords(self) -> list[str]:
        """Every password text in the URL, as written and decoded (to mask in messages)."""
        return _url_passwords(self.reveal())

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"DatabaseURL({self.masked!r})"


@dataclass(frozen=True, slots=True)
class Settings:
    """How to reach the bank: base URL, API key, the Authorization scheme word, and the
    signing key when requests are signed (``None``: unsigned); ``warnings``: what the
    command should say about them (an API key file other users can read)."""

    base_url: str
    api_key: Secret = field(repr=False)
    auth_scheme: str = DEFAULT_AUTH_SCHEME
    signing: SigningKey | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationOptions:
    """Options of the batch-file checks shared by ``validate`` and ``run``."""

    max_amount: Decimal = DEFAULT_MAX_AMOUNT
    allow_duplicates: bool = False
    source_account: str | None = None
    max_rows: int = DEFAULT_MAX_ROWS
    sheet: str | None = None
    input_format: str = "auto"
    """``--input-format``: auto, payrun, bacs18, bankline or barclays."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """Options of ``payrun run`` beyond validation."""

    max_in_flight: int = MAX_IN_FLIGHT_CAP
    per_account_submits: int = PER_ACCOUNT_SUBMITS_CAP
    dry_run: bool = False
    # payrun plan's dry run: asks Confirmation of Payee about new payees (creates nothing)
    planning: bool = False
    create_only: bool = False
    wait: bool = False
    confirm_payees: bool = True
    accept_close_match: bool = False
    expect_count: int | None = None
    expect_total: Decimal | None = None
    duplicate_window_days: int = DEFAULT_DUPLICATE_WINDOW_DAYS
    allow_repeat: bool = False
    accept_changed_details: bool = False
    # --yes: a live-mode run goes on without asking
    assume_yes: bool = False
    ledger_path: Path | DatabaseURL | None = None
    report_path: Path | None = None
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    settle_wait: float = DEFAULT_SETTLE_WAIT
    # run --plan: only the approved plan's rows are paid
    plan: ApprovedRows | None = None

    def __post_init__(self) -> None:
        # Text and range: the same rule as the option and the variable
        parse_settle_wait(str(self.settle_wait), source="settle_wait")
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT_CAP:
            msg = f"--max-in-flight must be between 1 and {MAX_IN_FLIGHT_CAP} (the bank's limit)"
            raise ConfigError(msg)
        if not 1 <= self.per_account_submits <= PER_ACCOUNT_SUBMITS_CAP:
            msg = (
                f"--per-account-submits must be between 1 and {PER_ACCOUNT_SUBMITS_CAP}"
                " (the bank's limit)"
            )
            raise ConfigError(msg)
        if self.duplicate_window_days < 0:
            msg = "--duplicate-window must be 0 or more days"
            raise ConfigError(msg)


def parse_settle_wait(text: str, *, source: str = "--settle-wait") -> float:
    """A settle wait in seconds, 0 to ``MAX_SETTLE_WAIT``; else ``ConfigError`` naming
    ``source`` (the option or the variable the text came from)."""
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_SETTLE_WAIT:
        msg = (
            f"{source} must be a number of seconds from 0 to {MAX_SETTLE_WAIT:,.0f}, not"
            f" {text.strip()!r}: how long after a request whose answer was lost the bank may"
            f" still carry it out (default {DEFAULT_SETTLE_WAIT:.0f})"
        )
        raise ConfigError(msg)
    return value


def check_heartbeat_timeout(value: float, *, source: str) -> float:
    """``value`` when it is a fleet heartbeat timeout (``MIN_HEARTBEAT_TIMEOUT`` to
    ``MAX_HEARTBEAT_TIMEOUT`` seconds), else ``ConfigError`` naming ``source``."""
    if not MIN_HEARTBEAT_TIMEOUT <= value <= MAX_HEARTBEAT_TIMEOUT:
        msg = f"{source} is seconds from {MIN_HEARTBEAT_TIMEOUT:g} to {MAX_HEARTBEAT_TIMEOUT:g}"
        raise ConfigError(msg)
    return value


def heartbeat_timeout_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """``PAYRUN_FLEET_HEARTBEAT_TIMEOUT`` checked (``ConfigError`` when it is not a heartbeat
    timeout), or None when it is unset or blank."""
    env = os.environ if environ is None else environ
    name = "PAYRUN_FLEET_HEARTBEAT_TIMEOUT"
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    return check_heartbeat_timeout(value, source=name)


def auth_scheme_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment as a fleet worker's lanes see it: ``PAYRUN_AUTH_SCHEME`` only (when
    set), so ``load_settings`` takes each lane's keys from its files, never ``PAYRUN_API_KEY``."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in ("PAYRUN_AUTH_SCHEME",) if name in env}


def settle_wait_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """``PAYRUN_SETTLE_WAIT`` checked (``ConfigError`` when it is not a settle wait), or None
    when it is unset or blank."""
    env = os.environ if environ is None else environ
    text = env.get("PAYRUN_SETTLE_WAIT", "").strip()
    return parse_settle_wait(text, source="PAYRUN_SETTLE_WAIT") if text else None


# An API key file is a few dozen bytes: a bigger one is a mistake
_KEY_FILE_LIMIT = 65_536
# How often a wait for a piped key file looks for Ctrl-C
_KEY_WAIT_STEP = 0.1
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


def load_settings(
    *,
    base_url: str | None = None,
    api_key_file: Path | None = None,
    signing_key_file: Path | None = None,
    signing_key_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Settings:
    """Build ``Settings`` from options, falling back to ``PAYRUN_*`` environment variables.

    ``stopped`` ends the wait for an API key file that is a pipe (Ctrl-C, SIGTERM). The
    signing key is read when a key file or a key id is given (both are then needed).
    """
    env = os.environ if environ is None else environ
    url = (base_url or env.get("PAYRUN_BASE_URL", "")).strip().rstrip("/")
    if not url:
        msg = "no bank address: set PAYRUN_BASE_URL or pass --base-url (or use --sandbox)"
        raise ConfigError(msg)
    check_base_url(url, source="--base-url" if base_url else "PAYRUN_BASE_URL")
    key, warnings = _read_api_key(api_key_file, env, stopped)
    scheme = env.get("PAYRUN_AUTH_SCHEME", DEFAULT_AUTH_SCHEME).strip() or DEFAULT_AUTH_SCHEME
    # Sent before the key in every request's header
    if not _SCHEME.fullmatch(scheme):
        msg = "PAYRUN_AUTH_SCHEME must be one word of letters and digits, such as ServiceAPIKey"
        raise ConfigError(msg)
    signing = _read_signing_key(signing_key_file, signing_key_id, env, stopped)
    return Settings(
        base_url=url, api_key=key, auth_scheme=scheme, signing=signing, warnings=warnings
    )


_SECRET_MIN_LENGTH = 6
"""Shorter secret texts are not scrubbed from messages: they would cut words apart (a URL's
password so short is masked where the URL is shown, all the same)."""
_REMEMBERED: set[str] = set()
"""Secret texts this process read (keys, passwords): ``configured_secrets`` includes them."""
_FROM_ENV: dict[tuple[str, ...], frozenset[str]] = {}
_SECRET_VARIABLES = (
    "PAYRUN_API_KEY",
    "PAYRUN_API_KEY_FILE",
    "PAYRUN_SIGNING_KEY_FILE",
    "PAYRUN_LEDGER_URL",
)


def _remember(*texts: str) -> None:
    """Keep ``texts`` (secrets this process read) to scrub from every message."""
    _REMEMBERED.update(text for text in texts if len(text) >= _SECRET_MIN_LENGTH)


def _pem_lines(data: bytes) -> list[str]:
    """The key material of a PEM file: its lines but the BEGIN and END ones."""
    lines = data.decode("ascii", "replace").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("-----")]


def configured_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every secret text of this process, longest first: the keys and passwords it read,
    and those the environment configures whether or not they were read yet (PAYRUN_API_KEY,
    the files PAYRUN_API_KEY_FILE and PAYRUN_SIGNING_KEY_FILE name, PAYRUN_LEDGER_URL's
    passwords). Never raises: a file that cannot be read adds nothing."""
    env = os.environ if environ is None else environ
    given = tuple(env.get(name, "") for name in _SECRET_VARIABLES)
    if given not in _FROM_ENV:
        _FROM_ENV[given] = frozenset(_env_secrets(*given))
    found = {*_REMEMBERED, *_FROM_ENV[given]}
    return tuple(sorted(found, key=len, reverse=True))


def _env_secrets(api_key: str, api_key_file: str, signing_file: str, ledger: str) -> list[str]:
    texts = [api_key.strip()]
    data = _file_bytes(api_key_file)
    texts.append(data.decode("utf-8-sig", "replace").strip())
    data = _file_bytes(signing_file)
    texts += [data.decode("ascii", "replace").strip(), *_pem_lines(data)]
    url = ledger.strip()
    if _DATABASE_URL.match(url):
        texts += _url_passwords(url)
    return [text for text in texts if len(text) >= _SECRET_MIN_LENGTH]


def _file_bytes(path_text: str) -> bytes:
    """Up to ``_KEY_FILE_LIMIT`` bytes of the regular file at ``path_text``; nothing when
    there is none or it cannot be read (a pipe is never waited for)."""
    if not path_text.strip():
        return b""
    path = _home_expanded(path_text.strip())
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return b""
        with path.open("rb") as handle:
            return handle.read(_KEY_FILE_LIMIT)
    except (OSError, ValueError):
        return b""


def completion_requested() -> bool:
    """True when a shell asks for tab completions (argcomplete's ``_ARGCOMPLETE``)."""
    return "_ARGCOMPLETE" in os.environ


_DATABASE_URL = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
_MASK = "***"
_NOT_A_URL = "(not a URL: not shown)"
# A URL option whose value is a secret: password, sslpassword, a token, a key
_SECRET_OPTION = re.compile(r"pass|secret|token|key", re.IGNORECASE)


def database_url(text: str) -> DatabaseURL | None:
    """``text`` as a ledger database's URL when it is one (``postgresql://`` or
    ``postgres://``), else None (a ledger file's path)."""
    if not _DATABASE_URL.match(text.strip()):
        return None
    url = DatabaseURL(Secret(text.strip()))
    _remember(*url.passwords())
    return url


def ledger_url_from_env(environ: Mapping[str, str] | None = None) -> DatabaseURL | None:
    """The ledger database named by ``PAYRUN_LEDGER_URL`` (None when it is not set);
    ``ConfigError`` when it is set to anything but a ``postgresql://`` URL."""
    env = os.environ if environ is None else environ
    text = env.get("PAYRUN_LEDGER_URL", "").strip()
    if not text:
        return None
    url = database_url(text)
    if url is None:
        # Not repeated: it may be a mistyped URL holding a password
        msg = (
            "PAYRUN_LEDGER_URL is not a PostgreSQL URL (postgresql://USER@HOST/DATABASE):"
            " set it to the ledger database's URL, or unset it to use a ledger file"
        )
        raise ConfigError(msg)
    return url


def environ_with_ledger_url(
    url: DatabaseURL, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment (or ``environ``) with ``PAYRUN_LEDGER_URL`` set to
    ``url``: how a process hands the ledger database to a child without showing its
    password on the child's command line."""
    env = dict(os.environ if environ is None else environ)
    env["PAYRUN_LEDGER_URL"] = url.reveal()
    return env


def login_name() -> str:
    """Who is running payrun: the login name (LOGNAME, USER, ..., else the user id's name)."""
    import getpass

    try:
        return getpass.getuser()
    except OSError:
        return f"uid {os.getuid()}"


def policy_path_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    """The approval policy file ``PAYRUN_POLICY_FILE`` names (None when it is not set)."""
    env = os.environ if environ is None else environ
    text = env.get("PAYRUN_POLICY_FILE", "").strip()
    return Path(text) if text else None


def redact_url(url: str) -> str:
    """``url`` as it may be shown: scheme, user, host, port and path (a ledger's database)
    only. A password shows as ``***``; the query (``?sslpassword=...``, ``?password=...``,
    any option's value) and the fragment never show. The one way a URL that may hold
    credentials (a ledger database's, the bank's) is printed, logged or put in an error."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        # Unparsable (a stray "["): nothing of it is shown
        return f"{_scheme_of(url)}://{_MASK}"
    # Not a URL at all (a key pasted in its place?): nothing of it is shown
    if not parts.scheme or "://" not in url:
        return _NOT_A_URL
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    if ":" in userinfo:
        user += f":{_MASK}"
    netloc = f"{user}@{hosts}" if at else hosts
    # Built by hand: urlunsplit drops the "//" of an empty host (a Unix socket's URL)
    return f"{parts.scheme}://{netloc}{parts.path}"


def _scheme_of(url: str) -> str:
    """The scheme of ``url`` when it has one of letters only, else ``url`` (shown as the
    scheme of a URL that cannot be parsed: nothing else of it)."""
    scheme = url.strip().partition(":")[0]
    return scheme if scheme.isalpha() else "url"


def mask_database_url(url: str) -> str:
    """A ledger database's URL as it may be shown: ``redact_url``."""
    return redact_url(url)


def _url_passwords(url: str) -> list[str]:
    """The passwords in the URL's address and the values of its secret options (password,
    sslpassword, a token or key), as written and decoded, longest first."""
    try:
        parts = urlsplit(url)
    except ValueError:
        # Unparsable: everything after the scheme may be one
        return [url.partition("://")[2]]
    query = parts.query
    found = [parts.password or ""]
    found += [v for k, v in parse_qsl(query, keep_blank_values=True) if _SECRET_OPTION.search(k)]
    written = [word.partition("=") for word in query.split("&")]
    found += [value for name, _, value in written if _SECRET_OPTION.search(name)]
    found += [unquote(text) for text in found]
    return sorted({text for text in found if text}, key=len, reverse=True)


def without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` part (older ledgers may hold one)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def check_base_url(url: str, *, source: str = "PAYRUN_BASE_URL") -> None:
    """Refuse a base URL that is not https, unless it is plain http on a loopback host,
    or that holds a user name, password, query or fragment (kept in the ledger: never).

    ``source`` names where the address came from, for the message.
    """
    parts = urlsplit(url)
    # Never shown: the part before "@" may be a password
    if "@" in parts.netloc:
        msg = (
            f"{source} has a user name or password in it (before '@'): payrun signs in with"
            " the API key alone, so give the bank's address without them"
        )
        raise ConfigError(msg)
    # Never shown either: a query or fragment may carry a token, and the address is kept
    # in the ledger
    if parts.query or parts.fragment or "?" in url or "#" in url:
        msg = (
            f"{source} has a query or fragment in it (after '?' or '#'): payrun signs in with"
            " the API key alone, so give the bank's address without them"
        )
        raise ConfigError(msg)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"{source} {redact_url(url)!r} is not an http(s) address such as https://bank.example"
        raise ConfigError(msg)
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        msg = (
            f"refusing plain http to {parts.hostname}: API keys would travel unencrypted;"
            " use https:// (http:// is allowed only for loopback hosts)"
        )
        raise ConfigError(msg)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_api_key(
    api_key_file: Path | None, env: Mapping[str, str], stopped: Callable[[], bool]
) -> tuple[Secret, tuple[str, ...]]:
    """The API key, and a warning when its file can be read by other users."""
    # The file's name is shown only once it names a file (the chmod that fixes its
    # permissions): a key pasted in its place would be echoed.
    source = "--api-key-file" if api_key_file else "PAYRUN_API_KEY_FILE"
    path_text = str(api_key_file) if api_key_file else env.get("PAYRUN_API_KEY_FILE", "")
    if path_text:
        where = f"the API key file named by {source}"
        path = _home_expanded(path_text)
        open_to = _open_to_others(path)
        warnings = () if open_to is None else (_too_open(where, path, open_to, refused=False),)
        try:
            # Undecodable bytes become U+FFFD, which _checked_key refuses without showing.
            data = _key_file_bytes(path, where, stopped)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            msg = f"cannot read {where}: {reason}; give the path of a file holding the key"
            raise ConfigError(msg) from None
        if len(data) > _KEY_FILE_LIMIT:
            msg = f"{where} holds more than {_KEY_FILE_LIMIT} bytes: give a file holding the key"
            raise ConfigError(msg)
        value = data.decode("utf-8-sig", "replace").strip()
        if not value:
            msg = f"{where} is empty: put the API key in it"
            raise ConfigError(msg)
        _remember(value)
        return _checked_key(value, where), warnings
    value = env.get("PAYRUN_API_KEY", "").strip()
    if not value:
        msg = "no API key: set PAYRUN_API_KEY or PAYRUN_API_KEY_FILE (or use --sandbox)"
        raise ConfigError(msg)
    _remember(value)
    return _checked_key(value, "PAYRUN_API_KEY"), ()


_OTHERS_BITS = stat.S_IRWXG | stat.S_IRWXO
"""Permission bits that let users other than the owner read (or change) a key file."""


def _open_to_others(path: Path) -> int | None:
    """The permission bits of the key file at ``path`` when users other than its owner
    may read or change it, as ssh refuses a private key; None when only its owner can,
    or it is no regular file (a pipe from a secret store, a device) or cannot be read."""
    if os.name != "posix":
        return None
    try:
        status = path.stat()
    except (OSError, ValueError):
        return None
    mode = stat.S_IMODE(status.st_mode)
    return mode if stat.S_ISREG(status.st_mode) and mode & _OTHERS_BITS else None


def refuse_key_open_to_others(path: Path, where: str) -> None:
    """``ConfigError`` when users other than its owner may read or change the private key
    file at ``path`` (as ssh refuses one): one line with the chmod that fixes it."""
    open_to = _open_to_others(path)
    if open_to is not None:
        raise ConfigError(_too_open(where, path, open_to, refused=True))


def _too_open(where: str, path: Path, mode: int, *, refused: bool) -> str:
    """The one line about a key file other users can read, with the chmod that fixes it."""
    fix = f"chmod 600 {shlex.quote(str(path))}"
    if refused:
        return (
            f"{where} can be read by other users (permissions {mode:04o}), so the key is not"
            f" secret: payrun uses a private key only its owner can read; run `{fix}`, and"
            " replace the key if others may have copied it"
        )
    return (
        f"{where} can be read by other users (permissions {mode:04o}): run `{fix}` so"
        " that only you can read the API key"
    )


def _home_expanded(path_text: str) -> Path:
    """'~/...' as a crontab or a systemd unit writes it (no shell expands it there); a
    '~' that names no home folder stays as written (the read then says it is missing)."""
    try:
        return Path(path_text).expanduser()
    except RuntimeError:
        return Path(path_text)


def _key_file_bytes(path: Path, where: str, stopped: Callable[[], bool]) -> bytes:
    """Up to ``_KEY_FILE_LIMIT`` + 1 bytes of the key file. A pipe (``--api-key-file
    <(secret-tool ...)``) or device is read on a thread of its own, so that Ctrl-C ends the
    wait for a writer that never comes."""
    if stat.S_ISREG(path.stat().st_mode):
        with path.open("rb") as handle:
            return handle.read(_KEY_FILE_LIMIT + 1)
    read: list[bytes | OSError] = []

    def reading() -> None:
        try:
            with path.open("rb") as handle:
                read.append(handle.read(_KEY_FILE_LIMIT + 1))
        except OSError as exc:
            read.append(exc)

    thread = threading.Thread(target=reading, name="payrun-key-file", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(_KEY_WAIT_STEP)
        if stopped() and thread.is_alive():
            msg = f"stopped while waiting for {where} to be written; nothing was sent"
            raise InterruptedRunError(msg)
    if isinstance(read[0], OSError):
        raise read[0]
    return read[0]


def _checked_key(value: str, where: str) -> Secret:
    """The key as a ``Secret``, if it can travel in an HTTP header (visible ASCII only).

    A key with a control character, a line break or a non-ASCII letter would be refused
    by the HTTP client, and some clients quote the header value in their error; the
    message here never shows the key.
    """
    if not all("!" <= ch <= "~" for ch in value):
        msg = (
            f"the API key in {where} has a space, line break, control character or non-ASCII"
            " letter, which cannot be sent in an HTTP header: copy the key again exactly"
        )
        raise ConfigError(msg)
    return Secret(value)


_KEY_ID = re.compile(r"[!-~]{1,256}")
_MAKE_KEY = "make one with `openssl genpkey -algorithm ed25519 -out signing.pem`"


def _read_signing_key(
    key_file: Path | None,
    key_id: str | None,
    env: Mapping[str, str],
    stopped: Callable[[], bool],
) -> SigningKey | None:
    """The signing key and its id, both or neither (``None``: requests go unsigned)."""
    file_source = "--signing-key-file" if key_file else "PAYRUN_SIGNING_KEY_FILE"
    path_text = str(key_file) if key_file else env.get("PAYRUN_SIGNING_KEY_FILE", "").strip()
    id_text = (key_id if key_id is not None else env.get("PAYRUN_SIGNING_KEY_ID", "")).strip()
    if not path_text and not id_text:
        return None
    if not id_text:
        msg = (
            f"{file_source} is set but no signing key id: set PAYRUN_SIGNING_KEY_ID (or"
            " --signing-key-id) to the key id the bank issued for the key's public half"
        )
        raise ConfigError(msg)
    if not path_text:
        msg = (
            "a signing key id is set but no signing key file: set PAYRUN_SIGNING_KEY_FILE (or"
            " --signing-key-file) to the Ed25519 private key whose public half has that id"
        )
        raise ConfigError(msg)
    # Sent in every request's Signature-Input, between quotes
    if not _KEY_ID.fullmatch(id_text) or '"' in id_text or "\\" in id_text:
        msg = (
            "the signing key id has a space, quote, backslash, control character or non-ASCII"
            " letter: copy the key id the bank issued exactly"
        )
        raise ConfigError(msg)
    where = f"the signing key file named by {file_source}"
    path = _home_expanded(path_text)
    # As ssh refuses a private key others can read: the key may no longer be secret
    refuse_key_open_to_others(path, where)
    try:
        data = _key_file_bytes(path, where, stopped)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        msg = f"cannot read {where}: {reason}; give the path of the Ed25519 private key file"
        raise ConfigError(msg) from None
    _remember(*_pem_lines(data))
    return SigningKey(id_text, _ed25519_key(data, where))


def _ed25519_key(data: bytes, where: str) -> Ed25519PrivateKey:
    """The Ed25519 private key of a PEM PKCS#8 file; the message never quotes the file."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if b"ENCRYPTED" in data:
        msg = (
            f"{where} is encrypted with a passphrase, which payrun cannot ask for: keep it in"
            " a file only the paying user can read, unencrypted, or write a decrypted copy"
            " with `openssl pkey -in signing.pem -out plain.pem`"
        )
        raise ConfigError(msg)
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        msg = (
            f"{where} holds a public key: give the private half (the public half is what"
            " is registered with the bank)"
        )
        raise ConfigError(msg)
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        msg = f"{where} is encrypted with a passphrase, which payrun cannot ask for"
        raise ConfigError(msg) from None
    except (ValueError, UnsupportedAlgorithm):
        msg = f"{where} is not a PEM private key (PKCS#8): {_MAKE_KEY}"
        raise ConfigError(msg) from None
    if not isinstance(key, Ed25519PrivateKey):
        kind = type(key).__name__.removesuffix("PrivateKey").removesuffix("_") or "another"
        msg = f"{where} holds an {kind} key, not an Ed25519 one: {_MAKE_KEY}"
        raise ConfigError(msg)
    return key
