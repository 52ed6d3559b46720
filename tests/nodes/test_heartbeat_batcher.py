"""The heartbeat batcher belongs to one event loop and never outlives it, nor does the database
connection it writes on."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

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


def _writer_connections() -> int:
    from django.db import connection

    try:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = %s", [heartbeats.APPLICATION_NAME])
            return int(cur.fetchone()[0])
    finally:
        connection.close()  # (called from a thread of its own too)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_loops_own_connection_writes_and_is_closed_when_the_loop_ends(node_gpu_a):
    from nodes.models import Node

    async def beat() -> tuple[list[bool], int]:
        batcher = heartbeats.batcher()
        accepted = list(await asyncio.gather(batcher.submit(node_gpu_a.pk, 3), batcher.submit(node_gpu_a.pk, 2)))
        return accepted, await asyncio.to_thread(_writer_connections)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accepted, open_meanwhile = asyncio.run(beat())
        gc.collect()
    assert accepted == [True, False] and open_meanwhile == 1
    assert Node.objects.get(pk=node_gpu_a.pk).last_seq == 3
    assert _writer_connections() == 0  # none left behind on the database
    # closed by the writer as its loop ended, not dropped open for the garbage collector to find
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)
                and "AsyncConnection" in str(w.message)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_broken_connection_fails_its_batch_and_the_next_one_connects_again(node_gpu_a):
    from django.db import connection

    from nodes.models import Node

    async def scenario() -> tuple[BaseException | None, bool]:
        batcher = heartbeats.batcher()
        assert await batcher.submit(node_gpu_a.pk, 1)

        def terminate() -> None:
            try:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = current_database() AND application_name = %s",
                                [heartbeats.APPLICATION_NAME])
            finally:
                connection.close()

        await asyncio.to_thread(terminate)
        failed: BaseException | None = None
        try:
            await batcher.submit(node_gpu_a.pk, 2)
        except Exception as exc:  # the batch in flight when its connection died
            failed = exc
        return failed, await batcher.submit(node_gpu_a.pk, 3)

    failed, later = asyncio.run(scenario())
    assert failed is not None and later is True
    assert Node.objects.get(pk=node_gpu_a.pk).last_seq == 3
