"""The registers of batches being paid: no two runs pay the same rows at once.

Input: a run's rows and its bank (``bank_identity``). Output: a ``BatchLock`` held for the
run's life; or ``LedgerLockedError`` naming the run already paying the same batch or some
of the same rows (``check_batch_lock`` tells a dry run the same without taking anything).

**The user's own register.** Every paying run publishes an entry in its user's register,
a folder chosen by the user id alone (never by HOME or another variable, so a cron job
with no home finds the same one): ``/tmp/payrun-UID``, made 0700 and used only while it
belongs to this user with no access for anyone else. A folder of that name made by
another user (which this user cannot remove) sends this user's runs to
``~/.local/state/payrun/register`` of the home the user database names, with a warning.
Whichever of the two a run uses, it also looks (read-only, without its guard) in the other
when that one is there, this user's and private: a run that fell back to the home register
while another user held the name, and a later run that made ``/tmp/payrun-UID`` once it was
free, still see each other (each publishes before it looks, so at least one sees the other).
An entry holds the run's process, its ledger, and its batch's fingerprint, its bank and
an 8-byte hash of each valid row's payment (source account, payee account, amount,
reference), all keyed with the register's own random key (``key``, 0600): readable by
this user only, and useless anywhere else. An ``flock`` on ``register.lock`` (which only
this user can open) makes looking and publishing one step.

**The shared register** (optional) lets the runs of several users see each other. An
administrator makes it: ``SHARED_FOLDER`` owned by root, its group the people who pay,
mode 3770 (setgid, sticky: nobody else may read it, and a member may remove only their
own entries), holding ``key``, random bytes owned by root and readable by the group only.
When it is there and safe, a run publishes there too (its process and user, never its
ledger; hashes keyed with that key): first the entry, then it looks, so that two runs
starting at once see at least one another; no lock there is ever waited for. A shared
register that is unsafe or that this user cannot open is ignored with a warning.

Each run holds an ``flock`` on its entries for its life; the kernel drops it when the
process dies, even by kill -9, so an entry nobody holds is a dead run's: ignored, and
removed by its owner. Files are opened without following links; an entry that cannot be
read (another user's, a planted file) is skipped: nothing another user leaves can stop a
run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pwd
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from payrun._models import LedgerRow, RowStatus, format_money
from payrun.errors import LedgerError, LedgerLockedError

__all__ = [
    "SHARED_FOLDER",
    "TMP_FOLDER",
    "BatchLock",
    "RunningBatch",
    "RunningEntry",
    "check_batch_lock",
    "refuse_overlap_with",
    "running_batch",
    "take_batch_lock",
]

TMP_FOLDER = Path("/tmp")  # noqa: S108 - a folder of this user's, checked before use
"""Where each user's register is, as ``payrun-UID``."""
SHARED_FOLDER = Path("/var/lib/payrun/register")
"""The shared register an administrator may make for the runs of several users."""
_HOME_REGISTER = Path(".local", "state", "payrun", "register")
"""The user's register under their home when ``/tmp/payrun-UID`` is another user's."""
_GUARD = "register.lock"
_KEY = "key"
_ENTRY_PREFIX = "run-"
_ENTRY_SUFFIX = ".rows"
_NEW_PREFIX = ".new-"
_FORMAT = 2
_KEY_BYTES = 8
_SECRET_BYTES = 32
_MIN_SHARED_SECRET = 16
_MAX_ENTRY = 1 << 26
"""An entry's size at most (8 bytes a row): anything bigger is no run's."""
_OWN_MODE = 0o700
_OWN_FILE_MODE = 0o600
_SHARED_FILE_MODE = 0o640
_SHARED_GROUP_ACCESS = 0o070
_OTHERS = 0o007
_SHARED_KEY_PRIVATE = 0o026
"""The shared key: its group may read it, nobody but root change it, others not read it."""
_NOT_OWNER = 0o077
_GUARD_PATIENCE = 10.0
"""Seconds a run waits for its register's guard (only this user's runs hold it, briefly)."""
_GUARD_RETRY_SECONDS = 0.02
_SHARED_RECIPE = "see 'Two runs at once' in docs/exactly-once.md"

Note = Callable[[str], None]
"""Where a warning goes (the run's progress or log)."""


@dataclass(frozen=True, slots=True)
class RunningBatch:
    """What a run pays, as a register compares it."""

    bank: str
    fingerprint: str
    keys: bytes

    @property
    def count(self) -> int:
        """Valid rows in the batch."""
        return len(self.keys) // _KEY_BYTES


@dataclass(frozen=True, slots=True)
class RunningEntry:
    """A live run's entry in a register."""

    name: str
    pid: int | None
    ledger: str
    bank: str
    fingerprint: str
    keys: bytes
    user: str = ""


@dataclass(frozen=True, slots=True)
class _Place:
    """A register's folder, opened and checked, with the key of its hashes."""

    path: Path
    folder: int
    secret: bytes
    shared: bool
    read_only: bool = False
    """Another place of this user's register, only looked in (never written, no guard)."""


class _Held:
    """One entry of this run's, locked until ``release``."""

    def __init__(self, place: _Place, name: str, fd: int) -> None:
        self.place = place
        self.name = name
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the entry, then drop its lock (a run looking now finds it gone or held)."""
        if self._fd is None:
            return
        _unlink_if_same(self.place.folder, self.name, self._fd)
        os.close(self._fd)
        os.close(self.place.folder)
        self._fd = None


class BatchLock:
    """A run's entries in the registers, held until ``release`` (or the process ends)."""

    def __init__(self, held: Sequence[_Held]) -> None:
        self._held = list(held)

    @property
    def path(self) -> Path:
        """The entry in the user's own register (else in the shared one)."""
        first = next((h for h in self._held if not h.place.shared), self._held[0])
        return first.place.path / first.name

    def release(self) -> None:
        """Remove the entries and drop their locks (a second call does nothing)."""
        for held in self._held:
            held.release()

    def __enter__(self) -> BatchLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_batch_lock(
    rows: Sequence[LedgerRow], bank: str, ledger_path: str | Path, *, note: Note | None = None
) -> BatchLock | None:
    """Publish this run's rows in the registers and hold them until ``release``.

    Raises ``LedgerLockedError`` when a live run at the same bank pays the same batch (the
    same fingerprint) or any of the same payments, and ``LedgerError`` when this user has
    no register it can use: paying without one could pay twice.
    """
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    found = _payments(rows)
    places = _open_places(create=True, note=note)
    stored = [(place, _hashed(found, bank, place.secret)) for place in places]
    held: list[_Held] = []
    try:
        with _guard(places):
            # The entries first, then the look: of two runs starting at once that use
            # different registers (two users' in the shared one, or this user's in /tmp
            # and under the home), at least one sees the other; in this user's register
            # the guard makes the two one step.
            held += [_publish(p, b, ledger_path) for p, b in stored if not p.read_only]
            _refuse_overlap(stored, found.fingerprint, dry_run=False, own=held)
    except BaseException:
        for entry in held:
            entry.release()
        _close(p for p in places if not any(h.place is p for h in held))
        raise
    _close(p for p in places if p.read_only)
    return BatchLock(held)


def check_batch_lock(rows: Sequence[LedgerRow], bank: str, *, note: Note | None = None) -> None:
    """Raise ``LedgerLockedError`` when a live run at this bank pays any of these rows.

    A dry run checks this: the payments of that run in flight are not at the bank yet.
    """
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return
    places = _open_places(create=False, note=note)
    try:
        if places:
            found = _payments(rows)
            stored = [(place, _hashed(found, bank, place.secret)) for place in places]
            with _guard(places):
                _refuse_overlap(stored, found.fingerprint, dry_run=True, own=())
    finally:
        _close(places)


@dataclass(frozen=True, slots=True)
class _Payments:
    """The valid rows' payments, encoded, and the batch's fingerprint."""

    payments: list[bytes]
    fingerprint: str


def running_batch(rows: Sequence[LedgerRow], bank: str) -> RunningBatch:
    """The fingerprint and the row hashes (keyed by the bank) of the valid rows, in order.

    The fingerprint hashes what ``payrun validate`` hashes; a row's key is its payment
    as the bank sees it (the source account resolved to the bank's account when known).
    A register on this machine keys them with its own secret instead (``_hashed``).
    """
    return _hashed(_payments(rows), bank, None)


def _payments(rows: Sequence[LedgerRow]) -> _Payments:
    lines: list[str] = []
    payments: list[bytes] = []
    for row in rows:
        if row.status is RowStatus.INVALID:
            continue
        payment = (
            f"{row.sort_code}\t{row.account_number}\t{format_money(row.amount)}\t"
            f"{row.reference or ''}"
        )
        lines.append(f"{row.payee_name}\t{payment}\t{row.source_account}\t{row.row_id or ''}\n")
        payments.append(f"{row.account_url or row.source_account}\t{payment}".encode())
    return _Payments(payments, hashlib.sha256("".join(lines).encode()).hexdigest())


def _hashed(found: _Payments, bank: str, secret: bytes | None) -> RunningBatch:
    """The batch as a register compares it; with ``secret``, nothing in it can be
    recomputed from a guessed payment (or bank, or batch) without that secret."""
    if secret is None:
        bank_key = hashlib.sha256(bank.encode()).digest()
        fingerprint = found.fingerprint
    else:
        bank_key = hashlib.blake2b(b"bank\0" + bank.encode(), key=secret).digest()[:32]
        batch = b"batch\0" + found.fingerprint.encode()
        fingerprint = hashlib.blake2b(batch, key=secret, digest_size=32).hexdigest()
    keys: list[bytes] = []
    fresh = hashlib.blake2b(digest_size=_KEY_BYTES, key=bank_key).copy
    for payment in found.payments:
        key = fresh()
        key.update(payment)
        keys.append(key.digest())
    return RunningBatch(bank_key.hex()[:32], fingerprint, b"".join(keys))


def _refuse_overlap(
    stored: Sequence[tuple[_Place, RunningBatch]],
    fingerprint: str,
    *,
    dry_run: bool,
    own: Sequence[_Held],
) -> None:
    """Raise ``LedgerLockedError`` for the first live run paying any of these rows, in
    each register (the batch as that register keys it); messages name ``fingerprint``."""
    for place, batch in stored:
        if not batch.keys:
            return
        mine = {h.name for h in own if h.place is place}
        entries = (e for e in _live_entries(place) if e.name not in mine)
        shown = replace(batch, fingerprint=fingerprint)
        refuse_overlap_with(entries, shown, dry_run=dry_run, compared=batch)


def refuse_overlap_with(
    entries: Iterable[RunningEntry],
    batch: RunningBatch,
    *,
    dry_run: bool,
    compared: RunningBatch | None = None,
) -> None:
    """Raise ``LedgerLockedError`` for the first of these live runs that pays, at the same
    bank, the same batch (fingerprint) or any of ``batch``'s payments.

    ``compared`` is ``batch`` as these entries store it (keyed), when they do; messages
    name ``batch``'s own fingerprint.
    """
    if not batch.keys:
        return
    stored = compared or batch
    mine: list[int] | None = None
    for entry in entries:
        if entry.bank != stored.bank:
            continue
        if entry.fingerprint == stored.fingerprint:
            raise _paying(entry, None, batch, dry_run=dry_run)
        mine = mine if mine is not None else _numbers(stored.keys)
        theirs = set(_numbers(entry.keys))
        shared = sum(1 for key in mine if key in theirs)
        if shared:
            raise _paying(entry, shared, batch, dry_run=dry_run)


def _numbers(keys: bytes) -> list[int]:
    return memoryview(keys).cast("Q").tolist()


def _paying(
    entry: RunningEntry, shared: int | None, batch: RunningBatch, *, dry_run: bool
) -> LedgerError:
    holder = f"process {entry.pid}" if entry.pid else "another payrun run"
    holder += f" (ledger {entry.ledger})" if entry.ledger else ""
    holder += f" of user {entry.user}" if entry.user else ""
    what = (
        f"a batch with the same content (fingerprint sha256 {batch.fingerprint[:16]}…)"
        if shared is None
        else f"{shared} of these {batch.count} rows (the same source account, payee account,"
        " amount and reference)"
    )
    if dry_run:
        then = (
            "its payments in flight are not at the bank yet, so a dry run cannot tell what"
            " a run would pay: wait for it to finish, then check again"
        )
    else:
        rows = "every row" if shared is None else "them"
        then = (
            f"two runs at once would pay {rows} twice: wait for it to finish, then run again"
            " (rows it paid are then held as possible repeats)"
        )
    msg = f"{holder} is paying {what} at this bank right now; {then}"
    return LedgerLockedError(msg, pid=entry.pid)


# ---- the places ----------------------------------------------------------------------------


def _own_register() -> Path:
    """The user's own register when no other user has taken its name in ``TMP_FOLDER``."""
    return TMP_FOLDER / f"payrun-{os.getuid()}"


def _open_places(*, create: bool, note: Note | None) -> list[_Place]:
    """This user's register and the shared one, those that are there and usable.

    With ``create`` (a paying run), a run with neither is refused: it could pay twice.
    """
    shared = _open_shared(note)
    try:
        own = _open_own(create=create, note=note)
    except _NotUsable as exc:
        own = None
        if shared is not None and note is not None:
            note(
                f"warning: this user's register cannot be used ({exc.why}): the shared"
                f" register {SHARED_FOLDER} alone stops two runs paying the same rows"
            )
        elif shared is None and create:
            msg = (
                "cannot take the lock that stops two runs of this user's from paying the"
                f" same rows at once: {exc.why}; ask an administrator to remove what is in"
                " the way, then run again"
            )
            raise LedgerError(msg) from None
    used = [p for p in (own, shared) if p is not None]
    try:
        return used + _other_places(own)
    except BaseException:
        _close(used)
        raise


def _other_places(own: _Place | None) -> list[_Place]:
    """The places of this user's register that ``own`` is not (``/tmp/payrun-UID`` or
    the home one), opened read-only when there, this user's and private; else none.

    A run that fell back to the home register (another user held ``/tmp/payrun-UID``)
    and a later one that made ``/tmp/payrun-UID`` once it was free look in both.
    """
    home = _home_of(os.getuid())
    candidates = [_own_register()] + ([home / _HOME_REGISTER] if home is not None else [])
    found = (_peek_place(p) for p in candidates if own is None or p != own.path)
    return [place for place in found if place is not None]


def _peek_place(path: Path) -> _Place | None:
    """``path`` as a register to look in only: None unless it is a real folder of this
    user's that nobody else may enter, holding a key of this user's."""
    try:
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(folder)
        if info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & _NOT_OWNER:
            secret = _read_secret(folder, minimum=_SECRET_BYTES, private=_NOT_OWNER)
            return _Place(path, folder, secret, shared=False, read_only=True)
    except (OSError, _NotUsable):
        pass
    os.close(folder)
    return None


def _open_own(*, create: bool, note: Note | None) -> _Place | None:
    """The user's register: ``/tmp/payrun-UID``, or under the home when another user
    holds that name; None for a dry run when this user has none yet."""
    first = _own_register()
    try:
        return _private_place(first, create=create)
    except _NotUsable as exc:
        why = f"{first} {exc.why}"
    home = _home_of(os.getuid())
    if home is None:
        raise _NotUsable(why)
    second = home / _HOME_REGISTER
    try:
        place = _private_place(second, create=create)
    except _NotUsable as exc:
        msg = f"{why}, and {second} {exc.why}"
        raise _NotUsable(msg) from None
    if note is not None and place is not None:
        note(f"warning: {why}; this user's runs use {second} instead")
    return place


class _NotUsable(LedgerError):
    """Why a folder or key was passed over (never shown alone: a caller says what of)."""

    @property
    def why(self) -> str:
        return str(self)


def _home_of(uid: int) -> Path | None:
    """The home the user database names for ``uid`` (not HOME, which a job may change)."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return Path(home) if home and Path(home).is_absolute() else None


def _private_place(path: Path, *, create: bool) -> _Place | None:
    """``path`` as this user's register: made 0700 if missing, used only if it is a real
    folder of this user's that nobody else may enter."""
    if create:
        _make_private(path)
    try:
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if create:
            msg = "vanished while it was made"
            raise _NotUsable(msg) from None
        return None
    except OSError as exc:
        raise _NotUsable(_cannot("open it", exc)) from None
    try:
        info = os.fstat(folder)
        if info.st_uid != os.getuid():
            msg = f"belongs to {_user_name(info.st_uid)}"
            raise _NotUsable(msg)
        if stat.S_IMODE(info.st_mode) != _OWN_MODE:
            os.fchmod(folder, _OWN_MODE)
        return _Place(path, folder, _own_secret(path, folder), shared=False)
    except OSError as exc:
        os.close(folder)
        raise _NotUsable(_cannot("hold its key", exc)) from None
    except BaseException:
        os.close(folder)
        raise


def _make_private(path: Path) -> None:
    try:
        path.parent.mkdir(mode=_OWN_MODE, parents=True, exist_ok=True)
        os.mkdir(path, _OWN_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise _NotUsable(_cannot("create it", exc)) from None


def _cannot(what: str, exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "is not a folder (a link or a file)"
    return f"cannot be used ({what}: {exc.strerror})"


def _own_secret(path: Path, folder: int) -> bytes:
    """The key of this user's register, made (random, 0600) by its first run."""
    try:
        return _read_secret(folder, minimum=_SECRET_BYTES, private=_NOT_OWNER)
    except FileNotFoundError:
        pass
    except _NotUsable:
        # Not a key this user's payrun made: none of its live entries can use it either
        with suppress(FileNotFoundError):
            os.unlink(_KEY, dir_fd=folder)
    new = f"{_NEW_PREFIX}{os.urandom(8).hex()}"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    try:
        os.write(fd, os.urandom(_SECRET_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    # A link is made only where no key is: two first runs at once end with one key
    with suppress(FileExistsError):
        os.link(new, _KEY, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
    os.unlink(new, dir_fd=folder)
    try:
        return _read_secret(folder, minimum=_SECRET_BYTES, private=_NOT_OWNER)
    except (OSError, _NotUsable) as exc:
        msg = f"has a key payrun cannot use ({path / _KEY})"
        raise _NotUsable(msg) from exc


def _read_secret(folder: int, *, minimum: int, private: int, owner: int | None = None) -> bytes:
    """The key file's bytes, if it is a plain file of ``owner``'s (this user by default)
    that gives none of the access in ``private`` to anyone but its owner."""
    owner = os.getuid() if owner is None else owner
    fd = os.open(_KEY, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != owner or mode & private:
            msg = "has a key that is not a private file"
            raise _NotUsable(msg)
        secret = os.read(fd, 256)
        if owner == os.getuid():
            _touch(fd)
    finally:
        os.close(fd)
    if len(secret) < minimum:
        msg = "has a key that is too short"
        raise _NotUsable(msg)
    return secret


def _open_shared(note: Note | None) -> _Place | None:
    """The administrator's shared register, when there and safe; else None (warned)."""
    try:
        folder = os.open(SHARED_FOLDER, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _warn_shared(note, _cannot("open it", exc))
        return None
    try:
        _check_shared(os.fstat(folder))
        secret = _read_secret(
            folder, minimum=_MIN_SHARED_SECRET, private=_SHARED_KEY_PRIVATE, owner=0
        )
    except _NotUsable as exc:
        os.close(folder)
        _warn_shared(note, exc.why)
        return None
    except OSError as exc:
        os.close(folder)
        _warn_shared(note, f"has no key this user can read ({_KEY}: {exc.strerror})")
        return None
    return _Place(SHARED_FOLDER, folder, secret, shared=True)


def _check_shared(info: os.stat_result) -> None:
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != 0:
        msg = f"belongs to {_user_name(info.st_uid)}, not root"
        raise _NotUsable(msg)
    if mode & _OTHERS or not mode & stat.S_ISVTX:
        msg = f"has mode {mode:o}, not 3770"
        raise _NotUsable(msg)
    if mode & _SHARED_GROUP_ACCESS != _SHARED_GROUP_ACCESS:
        msg = f"has mode {mode:o}: its group cannot use it"
        raise _NotUsable(msg)


def _warn_shared(note: Note | None, why: str) -> None:
    if note is not None:
        note(
            f"warning: the shared register {SHARED_FOLDER} {why}: ignored, so this run is"
            f" checked against this user's own runs only ({_SHARED_RECIPE})"
        )


def _user_name(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"user {uid}"


def _close(places: Iterable[_Place]) -> None:
    for place in places:
        os.close(place.folder)


# ---- the guard, and the entries -----------------------------------------------------------


@contextmanager
def _guard(places: Sequence[_Place]) -> Iterator[None]:
    """Hold the guard of this user's register: no other run of this user's looks or
    publishes meanwhile (the shared register has none: no other user can delay a run)."""
    own = next((p for p in places if not p.shared and not p.read_only), None)
    if own is None:
        yield
        return
    fd = _open_guard(own)
    try:
        _flock_patiently(fd, own.path / _GUARD)
        yield
    finally:
        os.close(fd)


def _flock_patiently(fd: int, path: Path) -> None:
    import fcntl

    deadline = time.monotonic() + _GUARD_PATIENCE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                msg = (
                    f"the register of this user's running batches {path} has been locked"
                    f" for {_GUARD_PATIENCE:.0f} s by another process of this user's; find"
                    f" it (fuser {path}), stop it, then run again"
                )
                raise LedgerLockedError(msg) from None
            time.sleep(_GUARD_RETRY_SECONDS)


def _open_guard(place: _Place) -> int:
    """The guard file (never through a link), created if missing."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(_GUARD, flags, _OWN_FILE_MODE, dir_fd=place.folder)
    except OSError as exc:
        _refuse_unusable(place, f"cannot hold {_GUARD} ({exc.strerror})")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _refuse_unusable(place, f"holds {_GUARD} that is not a plain file")
    _touch(fd)
    return fd


def _touch(fd: int) -> None:
    """Mark a file of the register's as in use: a cleaner of /tmp (systemd-tmpfiles) removes
    only what has not been used for days, and a new key would hide the live runs."""
    with suppress(OSError):
        os.utime(fd)


def _refuse_unusable(place: _Place, why: str) -> NoReturn:
    msg = (
        "cannot take the lock that stops two runs from paying the same rows at once:"
        f" {place.path} {why}; remove it (payrun makes its own), then run again"
    )
    raise LedgerError(msg) from None


def _live_entries(place: _Place) -> Iterator[RunningEntry]:
    """Every readable entry whose run is alive; this user's dead entries are removed
    (except from a place only looked in)."""
    with os.scandir(place.folder) as found:
        names = sorted(e.name for e in found)
    for name in names:
        if name.startswith(_ENTRY_PREFIX) and name.endswith(_ENTRY_SUFFIX):
            entry = _read_live(place.folder, name, tidy=not place.read_only)
            if entry is not None:
                yield entry


def _read_live(folder: int, name: str, *, tidy: bool) -> RunningEntry | None:
    """The entry ``name`` if a live run holds it; None if its run is over, or if it is no
    entry this user can read (planted, or another user's: skipped, never in the way)."""
    import fcntl

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_ENTRY:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _parse(name, os.read(fd, info.st_size))
        except OSError:
            return None
        if tidy and info.st_uid == os.getuid():
            _unlink_if_same(folder, name, fd)
        return None
    finally:
        os.close(fd)


def _parse(name: str, data: bytes) -> RunningEntry | None:
    """A live entry's content; None for one this payrun cannot read."""
    header, _, keys = data.partition(b"\n")
    try:
        info = json.loads(header)
        if info["format"] != _FORMAT or len(keys) % _KEY_BYTES:
            return None
        pid = info["pid"]
        return RunningEntry(
            name,
            pid if isinstance(pid, int) else None,
            str(info.get("ledger", "")),
            str(info["bank"]),
            str(info["fingerprint"]),
            keys,
            str(info.get("user", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _publish(place: _Place, batch: RunningBatch, ledger_path: str | Path) -> _Held:
    """Put this run's entry in ``place``, locked before anyone can see it.

    It is written under a name no reader looks at, then renamed into place whole. The
    user's own register names the ledger; the shared one names only the user.
    """
    header: dict[str, object] = {"format": _FORMAT, "pid": os.getpid()}
    if place.shared:
        header["user"] = _user_name(os.getuid()).removeprefix("user ")
    else:
        header["ledger"] = str(ledger_path)
    header |= {"bank": batch.bank, "fingerprint": batch.fingerprint}
    data = json.dumps(header).encode() + b"\n" + batch.keys
    name = f"{_ENTRY_PREFIX}{os.urandom(8).hex()}{_ENTRY_SUFFIX}"
    new = f"{_NEW_PREFIX}{os.urandom(8).hex()}"
    mode = _SHARED_FILE_MODE if place.shared else _OWN_FILE_MODE
    try:
        fd = os.open(
            new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0, dir_fd=place.folder
        )
    except OSError as exc:
        _refuse_unusable(place, f"cannot hold a file of this user's ({exc.strerror})")
    try:
        _write_entry(place, fd, data, mode)
        os.rename(new, name, src_dir_fd=place.folder, dst_dir_fd=place.folder)
    except OSError as exc:
        _unlink_if_same(place.folder, new, fd)
        os.close(fd)
        _refuse_unusable(place, f"cannot hold a file of this user's ({exc.strerror})")
    return _Held(place, name, fd)


def _write_entry(place: _Place, fd: int, data: bytes, mode: int) -> None:
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if place.shared:
        # The register's group reads it (setgid does this too, when set)
        with suppress(OSError):
            os.fchown(fd, -1, os.fstat(place.folder).st_gid)
    os.fchmod(fd, mode)
    while data:
        data = data[os.write(fd, data) :]


def _unlink_if_same(folder: int, name: str, fd: int) -> None:
    """Remove ``name`` if it still names the file ``fd`` has open."""
    try:
        if os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            os.unlink(name, dir_fd=folder)
    except OSError:
        return
