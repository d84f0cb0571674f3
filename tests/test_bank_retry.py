"""RetryPolicy: bounded, jittered retries in which the last exception propagates."""

from __future__ import annotations

import dataclasses
import gc
import time

import anyio
import pytest

from payrun.bank import DEFAULT_RETRY, RetryPolicy


class _Flaky(Exception):
    """A retryable failure in these tests."""


class _Fatal(Exception):
    """A failure these tests never retry."""


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Flaky)


async def test_retries_until_success() -> None:
    """Two retryable failures, then the value of the third attempt is returned."""
    calls = 0

    async def fn() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _Flaky
        return "ok"

    assert await RetryPolicy.no_wait().call(fn, retry_if=_retryable) == "ok"
    assert calls == 3


async def test_non_retryable_error_propagates_at_once() -> None:
    """An error the predicate refuses is raised after a single attempt."""
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        raise _Fatal

    with pytest.raises(_Fatal):
        await RetryPolicy.no_wait().call(fn, retry_if=_retryable)
    assert calls == 1


async def test_last_exception_propagates_when_attempts_run_out() -> None:
    """After the last attempt its own exception is raised, not a tenacity wrapper."""
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        msg = f"attempt {calls}"
        raise _Flaky(msg)

    with pytest.raises(_Flaky, match="attempt 5"):
        await RetryPolicy.no_wait(attempts=5).call(fn, retry_if=_retryable)
    assert calls == 5


async def test_retry_stops_on_a_later_non_retryable_error() -> None:
    """A fatal error after a retryable one ends the retries with the fatal error."""
    errors: list[Exception] = [_Flaky(), _Fatal()]

    async def fn() -> None:
        raise errors.pop(0)

    with pytest.raises(_Fatal):
        await RetryPolicy.no_wait().call(fn, retry_if=_retryable)


async def test_single_attempt_policy_never_retries() -> None:
    """attempts=1 means one try only."""
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        raise _Flaky

    with pytest.raises(_Flaky):
        await RetryPolicy.no_wait(attempts=1).call(fn, retry_if=_retryable)
    assert calls == 1


async def test_total_time_bounds_the_retries() -> None:
    """max_seconds stops retrying long before a huge attempt count is used."""
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        raise _Flaky

    policy = RetryPolicy(attempts=10_000, max_seconds=0.2, initial_wait=0.02, max_wait=0.02)
    started = time.monotonic()
    with pytest.raises(_Flaky):
        await policy.call(fn, retry_if=_retryable)
    assert time.monotonic() - started < 1.0
    assert 2 <= calls < 100


async def test_waits_stay_within_max_wait() -> None:
    """Full-jitter waits never exceed max_wait, so 4 retries take at most 4 x max_wait."""

    async def fn() -> None:
        raise _Flaky

    policy = RetryPolicy(attempts=5, max_seconds=60, initial_wait=1.0, max_wait=0.03)
    started = time.monotonic()
    with pytest.raises(_Flaky):
        await policy.call(fn, retry_if=_retryable)
    assert time.monotonic() - started < 4 * 0.03 + 0.3


async def test_waits_are_full_jitter_not_the_plain_exponential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each wait is drawn from [0, cap], so clients refused together spread out (plain
    exponential backoff would wait the cap, 1 s here, every time)."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    async def fn() -> None:
        raise _Flaky

    monkeypatch.setattr(anyio, "sleep", record)
    policy = RetryPolicy(attempts=41, max_seconds=600, initial_wait=1.0, max_wait=1.0)
    with pytest.raises(_Flaky):
        await policy.call(fn, retry_if=_retryable)
    assert len(waits) == 40 and all(0 <= w <= 1.0 for w in waits), waits
    assert min(waits) < 0.5 and len(set(waits)) > 30, waits


def test_policy_is_frozen_and_validated() -> None:
    """Policies are immutable, and nonsensical bounds are refused."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_RETRY.attempts = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="negative"):
        RetryPolicy(max_wait=-1)


def test_no_wait_policy_has_zero_waits() -> None:
    """The test policy keeps the attempt count and never sleeps."""
    policy = RetryPolicy.no_wait(attempts=3)
    assert (policy.attempts, policy.initial_wait, policy.max_wait) == (3, 0.0, 0.0)


async def test_a_call_leaves_no_cyclic_garbage() -> None:
    """A request's retry state is freed when the call returns, not by the garbage collector:
    tenacity's pending actions are bound methods of the retrying object, a cycle per call
    that made 98% of a run's cyclic garbage and gen-0 pauses of 40-180 ms mid-run."""
    calls = 0

    async def fn() -> str:
        nonlocal calls
        calls += 1
        if calls % 2:
            raise _Flaky
        return "ok"

    policy = RetryPolicy.no_wait()
    # Built once, before counting
    await policy.call(fn, retry_if=_retryable)
    gc.collect()
    gc.disable()
    # Keep what the collector finds, to count only the retry machinery's own objects
    # (another thread of this test process may leave cycles of its own meanwhile)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(200):
            assert await policy.call(fn, retry_if=_retryable) == "ok"
        with pytest.raises(_Fatal):
            await policy.call(_fatal, retry_if=_retryable)
        gc.collect()
        left = [o for o in gc.garbage if type(o).__module__.startswith(("tenacity", "payrun"))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    # None a call; 840 of them (4 a call) while the cycle was left to the
    # collector
    assert len(left) < 20, f"{len(left)} retry objects in reference cycles after 201 calls"


async def _fatal() -> None:
    raise _Fatal


async def test_a_first_try_that_succeeds_never_builds_the_retry_machinery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most requests succeed at once: they go straight out, without tenacity's per-call
    bookkeeping (about 25 us a request); a retryable failure still gets its retries."""
    import tenacity  # noqa: PLC0415

    built = 0
    original = tenacity.AsyncRetrying.__init__

    def counting(self: tenacity.AsyncRetrying, *args: object, **kwargs: object) -> None:
        nonlocal built
        built += 1
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tenacity.AsyncRetrying, "__init__", counting)
    calls = 0

    async def fn() -> str:
        nonlocal calls
        calls += 1
        if calls == 101:
            raise _Flaky
        return "ok"

    policy = RetryPolicy.no_wait()
    for _ in range(100):
        assert await policy.call(fn, retry_if=_retryable) == "ok"
    assert built == 0
    assert await policy.call(fn, retry_if=_retryable) == "ok"
    assert (built, calls) == (1, 102)


async def test_the_time_bound_counts_the_first_try() -> None:
    """A first try that fails after the policy's whole time is not tried again."""
    calls = 0

    async def slow() -> str:
        nonlocal calls
        calls += 1
        await anyio.sleep(0.3)
        raise _Flaky

    policy = dataclasses.replace(RetryPolicy.no_wait(), max_seconds=0.2)
    with pytest.raises(_Flaky):
        await policy.call(slow, retry_if=_retryable)
    assert calls == 1
