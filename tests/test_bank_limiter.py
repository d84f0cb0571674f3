"""AdaptiveLimiter: the organization-wide in-flight limit, under real concurrency."""

from __future__ import annotations

import contextlib
import functools
import random

import anyio
import pytest

from payrun.bank import AdaptiveLimiter


async def test_never_more_holders_than_the_limit() -> None:
    """200 tasks contending for 7 slots never hold more than 7 at once, and peak says so."""
    limiter = AdaptiveLimiter(7)
    holding = 0
    most = 0
    rng = random.Random(4)

    async def worker() -> None:
        nonlocal holding, most
        async with limiter.slot():
            holding += 1
            most = max(most, holding)
            assert limiter.in_flight <= limiter.limit
            await anyio.sleep(rng.random() / 500)
            holding -= 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(worker)
    assert most == 7
    assert limiter.peak == 7
    assert limiter.in_flight == 0


async def test_rate_limited_halves_down_to_one() -> None:
    """Each 429 halves the limit, never below one."""
    limiter = AdaptiveLimiter(50)
    seen = []
    for _ in range(8):
        limiter.on_rate_limited()
        seen.append(limiter.limit)
    assert seen == [25, 12, 6, 3, 1, 1, 1, 1]


async def test_success_streak_grows_by_one_up_to_cap() -> None:
    """After grow_after successes in a row the limit grows by one, never above the cap."""
    limiter = AdaptiveLimiter(4, grow_after=3)
    limiter.on_rate_limited()
    assert limiter.limit == 2
    for _ in range(2):
        limiter.on_success()
    assert limiter.limit == 2
    limiter.on_success()
    assert limiter.limit == 3
    for _ in range(30):
        limiter.on_success()
    assert limiter.limit == 4


async def test_rate_limited_restarts_the_success_streak() -> None:
    """A 429 in the middle of a streak means the growth count starts again."""
    limiter = AdaptiveLimiter(10, grow_after=3)
    limiter.on_rate_limited()
    limiter.on_success()
    limiter.on_success()
    limiter.on_rate_limited()
    limiter.on_success()
    limiter.on_success()
    assert limiter.limit == 2


async def test_shrunk_limit_holds_back_new_requests_until_holders_drop() -> None:
    """After halving with 8 holders, a newcomer waits until fewer than 4 are held."""
    limiter = AdaptiveLimiter(8)
    releases = [anyio.Event() for _ in range(8)]
    got_in = anyio.Event()

    async def holder(done: anyio.Event) -> None:
        async with limiter.slot():
            await done.wait()

    async def newcomer() -> None:
        async with limiter.slot():
            got_in.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for done in releases:
                tg.start_soon(holder, done)
            await anyio.wait_all_tasks_blocked()
            assert limiter.in_flight == 8
            limiter.on_rate_limited()
            tg.start_soon(newcomer)
            for done in releases[:4]:
                done.set()
            await anyio.wait_all_tasks_blocked()
            assert limiter.in_flight == 4
            assert not got_in.is_set()
            releases[4].set()
            await got_in.wait()
            for done in releases[5:]:
                done.set()
    assert limiter.peak == 8
    assert limiter.in_flight == 0


async def test_growth_wakes_a_waiter() -> None:
    """Growing the limit lets a waiting request in at once."""
    limiter = AdaptiveLimiter(2, grow_after=1)
    limiter.on_rate_limited()
    release = anyio.Event()
    entered = anyio.Event()

    async def holder() -> None:
        async with limiter.slot():
            await release.wait()

    async def waiter() -> None:
        async with limiter.slot():
            entered.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert not entered.is_set()
            limiter.on_success()
            await entered.wait()
            release.set()


async def test_cancelled_waiter_leaks_no_slot() -> None:
    """A request cancelled while waiting for a slot neither holds nor loses one."""
    limiter = AdaptiveLimiter(1)
    release = anyio.Event()

    async def holder() -> None:
        async with limiter.slot():
            await release.wait()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.wait_all_tasks_blocked()
            with anyio.move_on_after(0.01):
                async with limiter.slot():
                    pytest.fail("the slot was granted above the limit")
            release.set()
    async with limiter.slot():
        assert limiter.in_flight == 1
    assert limiter.in_flight == 0


async def test_slot_is_released_when_the_body_raises() -> None:
    """An exception inside the slot gives the slot back."""
    limiter = AdaptiveLimiter(1)
    with pytest.raises(RuntimeError):
        async with limiter.slot():
            raise RuntimeError
    assert limiter.in_flight == 0


def test_rejects_a_cap_or_growth_below_one() -> None:
    """A cap or grow_after below one is a programming error."""
    with pytest.raises(ValueError, match="cap"):
        AdaptiveLimiter(0)
    with pytest.raises(ValueError, match="grow_after"):
        AdaptiveLimiter(5, grow_after=0)


def test_repr_shows_the_state() -> None:
    """The repr names cap, limit, in-flight count and peak."""
    assert repr(AdaptiveLimiter(3)) == "AdaptiveLimiter(cap=3, limit=3, in_flight=0, peak=0)"


async def test_one_halving_per_burst_of_429s() -> None:
    """429s for requests sent before the last cut do not halve the limit again."""
    limiter = AdaptiveLimiter(48)
    generations = []
    for _ in range(3):
        async with limiter.slot() as generation:
            generations.append(generation)
    for generation in generations:  # three 429s from one burst
        limiter.on_rate_limited(generation)
    assert limiter.limit == 24
    async with limiter.slot() as later:
        pass
    limiter.on_rate_limited(later)  # a request sent after the cut: a new burst
    assert limiter.limit == 12


async def test_urgent_waiters_go_first_and_each_queue_keeps_its_order() -> None:
    """Freed slots go to urgent waiters (submits) before ordinary ones, each queue in order."""
    limiter = AdaptiveLimiter(1)
    release = anyio.Event()
    order: list[str] = []

    async def holder() -> None:
        async with limiter.slot():
            await release.wait()

    async def request(name: str, *, urgent: bool) -> None:
        async with limiter.slot(urgent=urgent):
            order.append(name)
            assert limiter.in_flight == 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.wait_all_tasks_blocked()
            for name, urgent in [
                ("create1", False),
                ("submit1", True),
                ("create2", False),
                ("submit2", True),
            ]:
                tg.start_soon(functools.partial(request, name, urgent=urgent))
                await anyio.wait_all_tasks_blocked()
            release.set()
    assert order == ["submit1", "submit2", "create1", "create2"]
    assert limiter.in_flight == 0


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    """Cancelled in the same turn its slot was handed over: the next waiter gets the slot."""
    limiter = AdaptiveLimiter(1)
    entered: list[str] = []
    scopes: list[anyio.CancelScope] = []

    async def request(name: str) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            async with limiter.slot():
                entered.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            async with contextlib.AsyncExitStack() as held:
                await held.enter_async_context(limiter.slot())
                tg.start_soon(request, "first")
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(request, "second")
                await anyio.wait_all_tasks_blocked()
                scopes[0].cancel()  # "first" is cancelled (delivered on the next loop turn) ...
                await held.aclose()  # ... and handed the slot in this one, before it runs
                assert limiter.in_flight == 1
    assert entered == ["second"]
    assert limiter.in_flight == 0
