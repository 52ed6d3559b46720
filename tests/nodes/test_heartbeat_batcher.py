"""The heartbeat batcher belongs to one event loop and never outlives it."""

from __future__ import annotations

import asyncio
import gc

from nodes import heartbeats


def test_a_closed_loops_batcher_is_forgotten_with_its_loop():
    # A write was in flight when its loop closed: that batcher stays "writing" for ever. Were it
    # kept under the loop's id, a later loop given the same id (Python reuses them) would wait on
    # it and no heartbeat of that loop would ever be written.
    gc.collect()
    before = len(heartbeats._batchers)

    async def leave_stuck() -> None:
        heartbeats.batcher().writing = True

    for _ in range(5):
        asyncio.run(leave_stuck())
    gc.collect()
    assert len(heartbeats._batchers) == before

    async def fresh() -> bool:
        return heartbeats.batcher().writing

    assert asyncio.run(fresh()) is False
