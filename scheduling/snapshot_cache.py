"""A resource group's snapshot kept between passes (PostgreSQL), reloaded only when it went stale.

Loading the snapshot costs about a second at 10,000 allocations, and most passes
follow only their own previous writes. So a pass keeps its snapshot when it ends
cleanly, with the database snapshot (``pg_current_snapshot()``) it was loaded
from in a REPEATABLE READ transaction and a writer tag. Every write to what the
snapshot holds (running allocations, their placements, the group's nodes, and
what every group reads) leaves a row in SnapshotChange through triggers, with
the writing transaction's id and its tag. The next pass reuses the snapshot only
if no such row is both invisible to that database snapshot (committed after the
load, or in flight then) and written by someone else: a late commit is never
missed, since visibility, not an id order, decides. The pass's own writes carry
its tag and are already applied to the snapshot in memory. Anything unusual (a
lost race, a reload for borrowing, an exception, ten minutes of age) drops it.
SQLite (the embedded mode) reloads every pass.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from scheduling.models import ResourceGroup, SnapshotChange
from scheduling.snapshot import Snapshot, load_snapshot, policy_of

MAX_AGE_S = 600.0
KEEP_CHANGES = timedelta(hours=1)  # well past MAX_AGE_S: no kept snapshot predates a deleted change


_kept: dict[int, Snapshot] = {}


def take(group: ResourceGroup) -> Snapshot:
    """The snapshot for a pass over ``group``: the kept one if nothing changed, else a fresh one."""
    kept = _kept.pop(group.pk, None)  # popped: a pass that fails leaves nothing behind
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return load_snapshot(group)  # no consistent database snapshot to compare with later
    if kept is not None and time.monotonic() - kept.kept_since < MAX_AGE_S and not _changed(group.pk, kept):
        kept.group, kept.policy, kept.dirty = group, policy_of(group), False
        return kept
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT pg_current_snapshot()::text")
            pg_snapshot = cur.fetchone()[0]
        snap = load_snapshot(group)  # every query sees exactly that database snapshot
    snap.writer = f"pass:{uuid.uuid4().hex[:20]}"
    snap.pg_snapshot = pg_snapshot
    snap.kept_since = time.monotonic()
    return snap


def keep(snap: Snapshot) -> None:
    """After a clean pass (its own reservations removed): keep the snapshot for the next one."""
    if snap.writer and not snap.dirty:
        _kept[snap.group.pk] = snap


def tag_writes(snap: Snapshot) -> None:
    """Mark the current transaction's writes as this pass's own (call inside the transaction)."""
    if snap.writer:
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('lattice.writer', %s, true)", [snap.writer])


def forget(group_id: int | None = None) -> None:
    """Drop kept snapshots (one group's, or all)."""
    if group_id is None:
        _kept.clear()
    else:
        _kept.pop(group_id, None)


def _changed(group_id: int, kept: Snapshot) -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM scheduling_snapshotchange WHERE (group_id = %s OR group_id IS NULL) "
            "AND xid >= pg_snapshot_xmin(%s::pg_snapshot)::text::bigint "
            "AND NOT pg_visible_in_snapshot(xid::text::xid8, %s::pg_snapshot) AND writer <> %s)",
            [group_id, kept.pg_snapshot, kept.pg_snapshot, kept.writer])
        return bool(cur.fetchone()[0])


def prune() -> int:
    """Delete change rows no kept snapshot can need any more (called by the periodic sweep)."""
    return SnapshotChange.objects.filter(created_at__lt=timezone.now() - KEEP_CHANGES).delete()[0]
