"""Heartbeats, persisted in batches: one lock and one UPDATE for many frames.

Each process writes heartbeats as a group commit: in one transaction (on
PostgreSQL one statement) it locks the nodes' rows, accepts each heartbeat whose
seq is greater than the last accepted (in arrival order, so a repeat or an older
seq is STALE_SEQUENCE), and writes them all at once. Every frame is acknowledged
only after that commit. A node Degraded by its GPUs' health (nodes/health.py) stays Degraded:
only silence is undone by a heartbeat.
"""

from __future__ import annotations

import asyncio
import weakref
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from nodes.models import Node, NodeState
from scheduling.dispatch import events_on_commit

FLUSH_AT = 500  # at most this many heartbeats per statement
# A write waits this long for more heartbeats when none is in flight. At one heartbeat per 5 s
# from each of 2,000 agents (400/s) nearly every write was one heartbeat, and its statement was a
# quarter of the server's CPU; in 5 ms about two more arrive to share it. Every ack waits up to
# this much longer (the goal is 25 ms at p99). LATTICE_HEARTBEAT_COLLECT_MS, 5 by default.
COLLECT_S = settings.LATTICE_HEARTBEAT_COLLECT_MS / 1000
APPLICATION_NAME = "lattice-heartbeats"  # the loop writer's connection, as pg_stat_activity shows it
REVIVED = (NodeState.DEGRADED, NodeState.UNKNOWN)  # a heartbeat makes these ready


def nodes_changed(ids: list[int]) -> None:
    """Tell the operators' live feed that these nodes changed state (one query, sent after commit):
    the console's counts and tiles follow."""
    if ids:
        events_on_commit([("node.state", {"node": name, "state": state, "group": group}, None)
                          for name, state, group in Node.objects.filter(pk__in=sorted(set(ids)))
                          .values_list("name", "state", "resource_group__name").order_by("name")])


def persist(batch: list[tuple[int, int]], now: datetime) -> list[bool]:
    """Apply (node id, seq) heartbeats in order; returns, per heartbeat, whether it was accepted."""
    if connection.vendor == "postgresql":
        last, states = _write_postgresql(batch, now)
        accepted = _judge(batch, last)
    else:
        ids = sorted({node_id for node_id, _ in batch})
        with transaction.atomic():  # SQLite (the embedded mode): few agents
            rows = Node.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list(
                "pk", "last_seq", "state", "health_reason")
            states = {pk: _revivable(state, health) for pk, _, state, health in rows}
            last = {pk: seq for pk, seq, _, _ in rows}
            accepted = _judge(batch, last)
            changed = {node_id: last[node_id] for (node_id, _), ok in zip(batch, accepted, strict=True) if ok}
            for node_id, seq in changed.items():
                Node.objects.filter(pk=node_id).update(last_seq=seq, last_heartbeat_at=now)
            Node.objects.filter(pk__in=list(changed), state__in=REVIVED, health_reason="").update(
                state=NodeState.READY)
    nodes_changed(_revived(batch, accepted, states))
    return accepted


def _revived(batch: list[tuple[int, int]], accepted: list[bool], states: dict[int, str | None]) -> list[int]:
    """The nodes an accepted heartbeat of the batch brought back (they were degraded or unknown)."""
    return [node_id for (node_id, _), ok in zip(batch, accepted, strict=True) if ok and states.get(node_id) in REVIVED]


def _revivable(state: str, health_reason: str) -> str | None:
    """The node's state as a heartbeat sees it: one its GPUs' health degraded is not revived."""
    return None if health_reason else state


def _judge(batch: list[tuple[int, int]], last: dict[int, int | None]) -> list[bool]:
    """In arrival order, a heartbeat is accepted when its seq is greater than the last accepted one
    of its node; ``last`` (the nodes' stored seqs; a missing node accepts nothing) is advanced."""
    accepted = []
    for node_id, seq in batch:
        previous = last.get(node_id, seq)
        ok = node_id in last and (previous is None or seq > previous)
        if ok:
            last[node_id] = seq
        accepted.append(ok)
    return accepted


def _newest(batch: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The batch's nodes in id order (the order their rows are locked in) and each one's greatest seq."""
    newest: dict[int, int] = {}
    for node_id, seq in batch:
        newest[node_id] = max(seq, newest.get(node_id, seq))
    ids = sorted(newest)
    return ids, [newest[i] for i in ids]


def _statement(one: bool = False) -> str:
    """One statement, one round trip: lock the batch's nodes in id order, advance each to the
    greatest seq of the batch where that is greater than the stored one, and return the stored
    seq and state as they were before (to judge each heartbeat of the batch in order, and to tell
    which nodes it revived). A node whose every heartbeat is stale is locked and returned, not
    written. The batch goes as two arrays, so the statement's text is the same for any batch: the
    driver converts it once (a VALUES list of one pair per heartbeat was re-parsed for every
    batch, an eighth of the server's time at 4,000 heartbeats per second). With ``one`` (a batch
    of one node, most batches at one heartbeat per 5 s per agent) the pair goes as two plain
    parameters, which the driver sends for about 40 us less CPU than two one-element arrays."""
    table = Node._meta.db_table
    batch = "SELECT %s::bigint, %s::bigint" if one else "SELECT * FROM unnest(%s::bigint[], %s::bigint[])"
    return (
        f"WITH v(id, seq) AS ({batch}), "
        f"old AS (SELECT n.id, n.last_seq, n.state, n.health_reason FROM {table} n WHERE n.id IN (SELECT v.id FROM v) "
        f"ORDER BY n.id FOR UPDATE), "
        f"written AS (UPDATE {table} AS n SET last_seq = v.seq, last_heartbeat_at = %s, "
        f"state = CASE WHEN n.state IN ('degraded', 'unknown') AND n.health_reason = '' THEN 'ready' "
        f"ELSE n.state END "
        f"FROM v JOIN old ON old.id = v.id "
        f"WHERE n.id = old.id AND (old.last_seq IS NULL OR v.seq > old.last_seq) RETURNING n.id) "
        f"SELECT id, last_seq, state, health_reason FROM old")


def _stored(rows: list[tuple[Any, ...]]) -> tuple[dict[int, int | None], dict[int, str | None]]:
    return ({int(node_id): last for node_id, last, _, _ in rows},
            {int(node_id): _revivable(state, health) for node_id, _, state, health in rows})


def _write_postgresql(batch: list[tuple[int, int]], now: datetime) -> tuple[dict[int, int | None], dict[int, str | None]]:
    """The batch in one statement (``_statement``) on Django's connection."""
    ids, seqs = _newest(batch)
    with connection.cursor() as cur:
        cur.execute(_statement(), [ids, seqs, now])
        return _stored(cur.fetchall())


class LoopWriter:
    """PostgreSQL's heartbeat batches written from the event loop itself, on an asynchronous
    connection of the loop's own (psycopg's ``AsyncConnection``, autocommit: the statement is its
    own transaction, as on Django's connection, and a frame is still acknowledged only after it).
    A batch handed to a pool thread cost the thread's wake-up, the GIL's hand-offs and the loop's
    wake-up when it came back, for every batch; at one heartbeat per 5 s per agent most batches
    are one frame. A broken connection fails its batch (every frame gets the error, as before)
    and is opened again for the next. Its batcher closes the connection as the loop ends
    (``_end_with``)."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.sql, self.sql_one = _statement(), _statement(one=True)

    async def persist(self, batch: list[tuple[int, int]], now: datetime) -> list[bool]:
        conn = self.conn if self.conn is not None and not self.conn.closed else await self._connect()
        ids, seqs = _newest(batch)
        try:
            if len(ids) == 1:
                cur = await conn.execute(self.sql_one, [ids[0], seqs[0], now])
            else:
                cur = await conn.execute(self.sql, [ids, seqs, now])
            last, states = _stored(await cur.fetchall())
        except BaseException:
            self.conn = None
            await conn.close()
            raise
        accepted = _judge(batch, last)
        revived = _revived(batch, accepted, states)
        if revived:  # rare (a node back from silence): its event is read and sent from a thread
            await database_sync_to_async(nodes_changed)(revived)
        return accepted

    async def _connect(self) -> Any:
        import psycopg  # (PostgreSQL only)

        self.conn = await psycopg.AsyncConnection.connect(**_async_params(), autocommit=True)
        return self.conn

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            await conn.close()

    def close_from_outside(self) -> None:
        """Close the connection of a loop that was closed without ending its tasks (nothing can
        be awaited on it any more): libpq's own close, which needs no loop."""
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            conn.pgconn.finish()


def _async_params() -> dict[str, Any]:
    """Django's connection parameters for this database (its test database under the tests),
    less what only Django's own cursors use."""
    params = dict(connection.get_connection_params())
    for name in ("cursor_factory", "context"):
        params.pop(name, None)
    params.setdefault("connect_timeout", 10)
    params["application_name"] = APPLICATION_NAME
    return params


class Batcher:
    """Group commit, per event loop: a heartbeat that finds no write in flight starts one after
    ``COLLECT_S``, taking the heartbeats that arrived meanwhile; those arriving during a write go
    together in the next one (one statement for many frames, whether the rate is steady or
    bursts)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int, asyncio.Future[bool]]] = []
        self.writing = False
        self.writer = LoopWriter() if connection.vendor == "postgresql" else None
        self.guard: asyncio.Task[None] | None = None  # _end_with, this batcher's loop's last task

    async def submit(self, node_id: int, seq: int) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((node_id, seq, future))
        if not self.writing:
            self.writing = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            await asyncio.sleep(COLLECT_S)
            while self.pending:
                batch, self.pending = self.pending[:FLUSH_AT], self.pending[FLUSH_AT:]
                await self._flush(batch)
        finally:
            self.writing = False

    async def _flush(self, batch: list[tuple[int, int, asyncio.Future[bool]]]) -> None:
        pairs = [(n, s) for n, s, _ in batch]
        try:
            if self.writer is not None:
                results = await self.writer.persist(pairs, timezone.now())
            else:
                results = await database_sync_to_async(persist)(pairs, timezone.now())
        except Exception as exc:  # nothing was written: every frame of the batch gets the error
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), ok in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(ok)


# Keyed by the loop itself, weakly: a loop's id can be reused once it is gone, and a batcher left
# from a closed loop (a write in flight when it closed) would never drain for its successor. A
# batcher refers to its loop (its guard task, its futures), so it must also leave this table as
# its loop ends (``_end_with``) or once the loop is found closed (``_forget_closed``): a value
# that holds its weak key keeps it, and every loop that ever wrote a heartbeat would stay in
# memory with its batcher and its closed connection.
_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher] = weakref.WeakKeyDictionary()


def batcher() -> Batcher:
    """One batcher per running event loop (a Daphne process has one)."""
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        _forget_closed()
        found = _batchers[loop] = Batcher()
        found.guard = loop.create_task(_end_with(loop, found))
    return found


async def _end_with(loop: asyncio.AbstractEventLoop, found: Batcher) -> None:
    """Wait for the loop to end (its tasks are cancelled as it does: ``asyncio.run``,
    ``async_to_sync``; a Daphne process's loop ends with it), then forget its batcher and close
    its connection."""
    try:
        await loop.create_future()  # never set
    finally:
        if _batchers.get(loop) is found:
            del _batchers[loop]
        found.guard, found.pending = None, []
        if found.writer is not None:
            await found.writer.close()


def _forget_closed() -> None:
    """Batchers of loops closed without cancelling their tasks (so ``_end_with`` never ran)."""
    for loop in [loop for loop in list(_batchers) if loop.is_closed()]:
        found = _batchers.pop(loop, None)
        if found is not None:
            found.guard, found.pending = None, []
            if found.writer is not None:
                found.writer.close_from_outside()
