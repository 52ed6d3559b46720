"""A resource group's snapshot kept between passes (PostgreSQL), reloaded only when it went stale.

Loading the snapshot costs about a second at 10,000 allocations, and most passes
follow only their own previous writes. So a pass keeps its snapshot when it ends
cleanly, with the database snapshot (``pg_current_snapshot()``) it was loaded
from in a REPEATABLE READ transaction and a writer tag. Every write to what the
snapshot holds (running allocations, their placements, the group's nodes, and
what every group reads) leaves a row in SnapshotChange through triggers, with
the writing transaction's id and its tag (and, for allocations and placements,
which allocations). The next pass looks for rows both invisible to that database
snapshot (committed after the load, or in flight then) and written by someone
else: a late commit is never missed, since visibility, not an id order, decides.
If those rows name only allocations of the group (an agent's report, a cancel),
the pass reloads just those allocations into the kept snapshot, under a new
database snapshot that becomes the baseline; any other change (a node, a
vCluster, a tenant) reloads the whole snapshot. The pass's own writes carry its
tag and are already applied to the snapshot in memory. Anything unusual (a lost
race, a reload for borrowing, an exception, ten minutes of age) drops it.
SQLite (the embedded mode) reloads every pass.

The tenants' quota use (QuotaBook) is kept the same way, except that it spans
every group: a change by someone else to a holding allocation of another group,
or to a quota, reloads the book alone. Each check returns the database snapshot
it ran under, which becomes the baseline for the next one: whatever that
snapshot shows was just checked, and whatever it does not will be seen by the
next check. So a check reads the changes since the previous pass, not since the
load.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from scheduling.models import ResourceGroup, SnapshotChange
from scheduling.passes.quota_book import QuotaBook
from scheduling.passes.snapshot import Snapshot, holding, load_snapshot, policy_of

MAX_AGE_S = 600.0
# Beyond this many allocations changed by others, a full reload is simpler than patching.
PATCH_LIMIT = 5000
KEEP_CHANGES = timedelta(hours=1)  # well past MAX_AGE_S: no kept snapshot predates a deleted change


_kept: dict[int, Snapshot] = {}


def take(group: ResourceGroup) -> Snapshot:
    """The snapshot for a pass over ``group``, with the quota book: the kept ones if nothing
    changed, else fresh ones."""
    kept = _kept.pop(group.pk, None)  # popped: a pass that fails leaves nothing behind
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        snap = load_snapshot(group)  # no consistent database snapshot to compare with later
        snap.quotas = QuotaBook.load()
        return snap
    if kept is not None and time.monotonic() - kept.kept_since < MAX_AGE_S and _still_valid(group.pk, kept):
        kept.group, kept.policy, kept.dirty = group, policy_of(group), False
        return kept
    with transaction.atomic():
        pg_snapshot = _repeatable_read()
        snap = load_snapshot(group)  # every query sees exactly that database snapshot
        snap.quotas = QuotaBook.load()
    snap.writer = f"pass:{uuid.uuid4().hex[:20]}"
    snap.pg_snapshot = pg_snapshot
    snap.kept_since = time.monotonic()
    return snap


def _repeatable_read() -> str:
    """Make the current (new) transaction REPEATABLE READ; returns its database snapshot."""
    with connection.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SELECT pg_current_snapshot()::text")
        return str(cur.fetchone()[0])


def _still_valid(group_id: int, kept: Snapshot) -> bool:
    """Whether the kept snapshot matches the database, once brought up to date: the allocations
    others changed in this group are reloaded into it, and the quota book is reloaded when any
    holding allocation or quota changed. False when something else changed (nodes, vClusters,
    tenants...) or too much did. Moves the baseline on."""
    now, here, anywhere = _changes(group_id, kept)
    if anywhere:
        with transaction.atomic():
            now = _repeatable_read()  # the patch and the book read exactly this database snapshot
            if here or _changes(group_id, kept)[1]:
                ids = _changed_allocations(group_id, kept)
                if ids is None or len(ids) > PATCH_LIMIT:
                    return False
                if not _patch(kept, ids):
                    return False
            kept.quotas = QuotaBook.load()
    kept.pg_snapshot = now
    return True


def _changed_allocations(group_id: int, kept: Snapshot) -> list[int] | None:
    """The allocations of this group that others changed since the baseline; None if a change
    was not about allocations (or was for every group)."""
    ids: set[int] = set()
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT allocations FROM scheduling_snapshotchange WHERE {_BY_OTHERS_SINCE} "
            "AND (group_id = %s OR group_id IS NULL)",
            [kept.pg_snapshot, kept.pg_snapshot, kept.writer, group_id])
        for (allocations,) in cur.fetchall():
            if allocations is None:
                return None
            ids.update(json.loads(allocations))  # a raw cursor reads jsonb as text
    return sorted(ids)


def _patch(kept: Snapshot, ids: list[int]) -> bool:
    """Reload these allocations into the kept snapshot: those that no longer hold capacity leave
    it, the others come back as the database has them. False, changing nothing, if one is placed
    on a node the snapshot does not know (the caller then reloads)."""
    fresh = holding(kept.group, ids)
    cluster = kept.cluster
    if any(name not in cluster.node_index for alloc in fresh.values() for name in alloc.placement):
        return False
    for pk in ids:
        cluster.remove(str(pk))
        if pk in fresh:
            cluster.add(fresh[pk])
    return True


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


# Change rows the kept baseline does not show (committed after it, or in flight then), written by
# someone else; parameters: the baseline twice, then the pass's writer tag.
_BY_OTHERS_SINCE = ("xid >= pg_snapshot_xmin(%s::pg_snapshot)::text::bigint "
                    "AND NOT pg_visible_in_snapshot(xid::text::xid8, %s::pg_snapshot) AND writer <> %s")


def _changes(group_id: int, kept: Snapshot) -> tuple[str, bool, bool]:
    """Changes by others that the kept baseline does not show: (the database snapshot this check
    ran under, any for this group or every group, any at all)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_current_snapshot()::text, coalesce(bool_or(group_id = %s OR group_id IS NULL), false), "
            f"count(*) > 0 FROM scheduling_snapshotchange WHERE {_BY_OTHERS_SINCE}",
            [group_id, kept.pg_snapshot, kept.pg_snapshot, kept.writer])
        now, here, anywhere = cur.fetchone()
        return str(now), bool(here), bool(anywhere)


def prune() -> int:
    """Delete change rows no kept snapshot can need any more (called by the periodic sweep)."""
    return SnapshotChange.objects.filter(created_at__lt=timezone.now() - KEEP_CHANGES).delete()[0]
