"""The heartbeat batcher belongs to one event loop and never outlives it, nor does the database
connection it writes on."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync

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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_loops_that_wrote_are_not_kept_alive_by_their_batchers(node_gpu_a):
    # As the tests and hypothesis's examples do, each call runs a loop of its own. A batcher refers
    # to its loop (tasks, futures); kept in the table after its loop ended, it would keep that loop,
    # and every loop that ever wrote a heartbeat would stay in memory with it.
    gc.collect()
    before = len(heartbeats._batchers)
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    for seq in range(1, 6):
        async def beat(seq: int = seq) -> bool:
            loops.append(weakref.ref(asyncio.get_running_loop()))
            return await heartbeats.batcher().submit(node_gpu_a.pk, seq)

        assert async_to_sync(beat)()
    gc.collect()
    assert len(heartbeats._batchers) == before
    assert [ref() for ref in loops] == [None] * 5
    assert _writer_connections() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_loops_running_at_once_in_two_threads_each_write_on_their_own(node_gpu_a):
    from nodes.models import Node

    node_gpu_b = Node.objects.create(name="gpu-b", resource_group=node_gpu_a.resource_group,
                                     vcluster=node_gpu_a.vcluster, gpu=8, cpu=64, memory=512, state="ready")
    # Nothing of one loop may serve another: each gets its own batcher, futures and connection.
    start = threading.Barrier(2)

    async def beat(node_id: int) -> tuple[int, list[bool]]:
        found = heartbeats.batcher()
        await asyncio.to_thread(start.wait, 10)  # both loops are running and hold their batchers
        accepted = [await found.submit(node_id, seq) for seq in (1, 2, 2)]
        return id(found), accepted

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda node: asyncio.run(beat(node.pk)), [node_gpu_a, node_gpu_b])
    assert a[0] != b[0]
    assert a[1] == b[1] == [True, True, False]
    assert {n.name: n.last_seq for n in Node.objects.filter(pk__in=[node_gpu_a.pk, node_gpu_b.pk])} == {
        "gpu-a": 2, "gpu-b": 2}
    assert _writer_connections() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_loop_closed_without_ending_its_tasks_leaves_no_connection_or_batcher(node_gpu_a):
    # run_until_complete then close, with no cancelling of what is left: the batcher's guard never
    # ran, so the next loop to want a batcher forgets it and closes its connection.
    async def first() -> bool:
        return await heartbeats.batcher().submit(node_gpu_a.pk, 1)

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(first())
    finally:
        loop.close()
    assert _writer_connections() == 1
    closed = weakref.ref(loop)
    del loop

    async def beat() -> bool:
        return await heartbeats.batcher().submit(node_gpu_a.pk, 2)

    assert asyncio.run(beat())
    gc.collect()
    assert closed() is None
    assert _writer_connections() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("state", "health_reason", "last_seq", "batch_seqs"), [
    ("ready", "", 5, [6]), ("ready", "", 5, [5]), ("ready", "", 5, [4, 7, 6]), ("unknown", "", 0, [1]),
    ("degraded", "", 3, [9]), ("degraded", "GPU 2: ECC", 3, [9]), ("unknown", "", 8, [2]), ("draining", "", 1, [2]),
])
def test_a_one_node_batch_is_written_as_a_batch_of_many_nodes_would_be(two_nodes, state, health_reason, last_seq,
                                                                        batch_seqs):
    """The loop writer's plain statement for one node against the arrays' statement for many: the
    same node, twice over (one alone, one beside another node), ends the same and is judged the same."""
    from django.utils import timezone

    from nodes.models import Node

    one, other = two_nodes
    Node.objects.filter(pk__in=[one.pk, other.pk]).update(state=state, health_reason=health_reason,
                                                          last_seq=last_seq)
    now = timezone.now()

    async def write(batch: list[tuple[int, int]]) -> list[bool]:
        writer = heartbeats.LoopWriter()
        try:
            return await writer.persist(batch, now)
        finally:
            await writer.close()

    alone = asyncio.run(write([(one.pk, s) for s in batch_seqs]))
    beside = asyncio.run(write([(other.pk, s) for s in batch_seqs] + [(one.pk, 1)]))[: len(batch_seqs)]
    expected = []  # by hand: each greater than the last accepted one
    last = last_seq
    for s in batch_seqs:
        expected.append(s > last)
        last = max(last, s) if s > last else last
    assert alone == beside == expected
    rows = {n.pk: (n.state, n.last_seq, n.last_heartbeat_at == now) for n in Node.objects.filter(
        pk__in=[one.pk, other.pk])}
    assert rows[one.pk] == rows[other.pk]
    revived = "ready" if state in ("degraded", "unknown") and not health_reason and any(expected) else state
    assert rows[one.pk] == (revived, max([last_seq, *batch_seqs]) if any(expected) else last_seq, any(expected))


@pytest.mark.django_db(transaction=True)
def test_heartbeats_arriving_while_a_write_waits_share_its_statement(monkeypatch, two_nodes):
    # The window is widened so that the second heartbeat, sent well after the first, still lands
    # in it on a busy machine; with no window the first would be written alone.
    from nodes.models import Node

    monkeypatch.setattr(heartbeats, "COLLECT_S", 0.5)
    a, b = two_nodes
    batches: list[list[tuple[int, int]]] = []

    async def scenario() -> list[bool]:
        batcher = heartbeats.batcher()
        written = batcher._flush

        async def spy(batch):
            batches.append([(n, s) for n, s, _ in batch])
            await written(batch)

        monkeypatch.setattr(batcher, "_flush", spy)
        first = asyncio.ensure_future(batcher.submit(a.pk, 5))
        await asyncio.sleep(0.05)
        return [*await asyncio.gather(first, batcher.submit(b.pk, 7))]

    assert asyncio.run(scenario()) == [True, True]
    assert batches == [[(a.pk, 5), (b.pk, 7)]]
    assert {n.pk: n.last_seq for n in Node.objects.filter(pk__in=[a.pk, b.pk])} == {a.pk: 5, b.pk: 7}
