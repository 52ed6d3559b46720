"""The channel layer's receive locks survive a cancelled waiter and a change of event loop."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

from lattice_site.channel_layer import CancelSafeChannelLock


async def _cancel_a_waiter(locks: CancelSafeChannelLock) -> None:
    """Hold the channel's lock, let a second reader wait for it, cancel the reader (its socket
    closed), release: as a consumer does when a socket closes mid-read."""
    await locks.acquire("specific.abc!")
    waiter = asyncio.ensure_future(locks.acquire("specific.abc!"))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    locks.release("specific.abc!")


async def _contend(locks: CancelSafeChannelLock) -> list[str]:
    """Two readers of one channel in turn, the second waiting for the first."""
    order: list[str] = []

    async def read(name: str) -> None:
        await locks.acquire("specific.abc!")
        order.append(name)
        await asyncio.sleep(0.01)
        locks.release("specific.abc!")

    await asyncio.gather(read("first"), read("second"))
    return order


def test_a_cancelled_waiter_leaves_no_lock_behind_for_the_next_event_loop():
    locks = CancelSafeChannelLock()
    asyncio.run(_cancel_a_waiter(locks))
    assert dict(locks.locks) == {} and dict(locks.wait_counts) == {}
    # a later event loop in the same process (a test, a command's async_to_sync) contends freely
    assert asyncio.run(_contend(locks)) == ["first", "second"]
    assert dict(locks.locks) == {}


def test_a_waiter_cancelled_while_the_lock_is_held_keeps_the_holders_count():
    locks = CancelSafeChannelLock()

    async def scenario() -> tuple[bool, int]:
        await locks.acquire("c")
        waiter = asyncio.ensure_future(locks.acquire("c"))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        held = (locks.locked("c"), locks.wait_counts["c"])
        locks.release("c")
        return held

    assert asyncio.run(scenario()) == (True, 1)
    assert dict(locks.locks) == {}


@pytest.mark.redis
def test_the_configured_redis_layer_uses_the_cancel_safe_locks():
    layer = get_channel_layer()
    assert isinstance(layer.receive_clean_locks, CancelSafeChannelLock)
