"""GPU-hours and node-hours from the allocation history: the one place they are computed.

An allocation is billed for every second it holds its nodes: from each event that moves it
into a holding state (running, checkpointing, terminating: a victim saving its checkpoint
still occupies its GPUs) to the next event that moves it out (suspended, pending again after a
requeue, completed, failed, cancelled, preempted). Work of several nodes whose process is gone
on one of them frees that node alone (its event, in the same state, is marked ``node_freed``):
from then on that node is not billed. Suspended and pending time is free. A requeued copy is
an allocation of its own and billed for its own runs. Each interval is split at midnight UTC,
so a day's figure is exactly what ran within that day, and an interval still open is counted
up to ``until`` (or now).

Sums are kept in integer microseconds, so the totals are exact and do not depend on the order
they are added in. Nothing here writes: budgets, the usage API, the CSV and the usage series
all read these functions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from scheduling.models import Allocation, AllocationEvent, ResourceGroup, Tenant, VCluster
from scheduling.states import HOLDING

GROUP_BY_FIELDS = ("tenant", "user", "vcluster", "resource_group", "day")
MICRO = 1_000_000


@dataclass(frozen=True)
class Interval:
    """One stretch of time an allocation held ``gpus`` GPUs on ``nodes`` nodes."""

    allocation_id: int
    tenant_id: int
    user_id: int
    vcluster_id: int | None
    resource_group_id: int
    gpus: int
    nodes: int
    start: datetime
    end: datetime
    cpus: int = 0
    memory: int = 0


def micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * MICRO + delta.microseconds


def split_at_midnight(start: datetime, end: datetime) -> Iterator[tuple[date, datetime, datetime]]:
    """``[start, end)`` cut into pieces that each lie within one UTC day."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), time.min, tzinfo=UTC)
        piece_end = min(end, midnight)
        yield start.date(), start, piece_end
        start = piece_end


def holding_spans(events: Iterable[tuple[str, datetime]], *, until: datetime,
                  states: Collection[str] = HOLDING) -> list[tuple[datetime, datetime]]:
    """The spans in which an allocation was in ``states`` (held nodes), from its events (to_state, at) in order."""
    spans: list[tuple[datetime, datetime]] = []
    since: datetime | None = None
    for to_state, at in events:
        if to_state in states:
            if since is None:
                since = at
        elif since is not None:
            spans.append((since, min(at, until)))
            since = None
    if since is not None:
        spans.append((since, until))
    return [(s, e) for s, e in spans if e > s]


def holding_pieces(events: Iterable[tuple[str, datetime, bool]], *, until: datetime, nodes: int,
                   states: Collection[str] = HOLDING) -> list[tuple[datetime, datetime, int]]:
    """The spans of ``holding_spans`` with the number of nodes held in each, from events (to_state,
    at, whether it freed one node): work of several nodes frees each node as its process there is
    gone (nodes/partial_exits.py), and is not billed for a node once it is free."""
    pieces: list[tuple[datetime, datetime, int]] = []
    since: datetime | None = None
    held = nodes
    for to_state, at, freed in events:
        if to_state in states:
            if since is None:
                since, held = at, nodes
            elif freed and held > 1:
                pieces.append((since, min(at, until), held))
                since, held = at, held - 1
        elif since is not None:
            pieces.append((since, min(at, until), held))
            since = None
    if since is not None:
        pieces.append((since, until, held))
    return [(s, e, n) for s, e, n in pieces if e > s]


IDS_PER_QUERY = 20_000


def _candidates(since: datetime, tenant_ids: Sequence[int] | None, states: Collection[str]) -> list[dict[str, Any]]:
    # Its last change before ``since`` and not in ``states`` now: it was never in them in the window.
    # No recorded change time (a row written without a transition) proves nothing: its events decide.
    rows = Allocation.objects.filter(Q(state_changed_at__gte=since) | Q(state_changed_at__isnull=True)
                                     | Q(state__in=list(states)))
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=list(tenant_ids))
    return list(rows.values("id", "tenant_id", "user_id", "vcluster_id", "resource_group_id",
                            "node_count", "per_node_gpu", "per_node_cpu", "per_node_memory"))


def intervals(*, since: datetime, until: datetime | None = None, tenant_ids: Sequence[int] | None = None,
              states: Collection[str] = HOLDING) -> list[Interval]:
    """Every holding interval (or interval in ``states``) that overlaps ``[since, until)``, clipped to it."""
    until = min(until or timezone.now(), timezone.now())
    allocs = {row["id"]: row for row in _candidates(since, tenant_ids, states)}
    if not allocs:
        return []
    history: dict[int, list[tuple[str, datetime, bool]]] = defaultdict(list)
    ids = sorted(allocs)
    for lo in range(0, len(ids), IDS_PER_QUERY):  # PostgreSQL takes at most 65,535 parameters
        events = (AllocationEvent.objects.filter(allocation_id__in=ids[lo:lo + IDS_PER_QUERY], created_at__lt=until)
                  .order_by("allocation_id", "created_at", "id")
                  .values_list("allocation_id", "to_state", "created_at", "node_freed"))
        for alloc_id, to_state, at, freed in events.iterator(chunk_size=5000):
            history[alloc_id].append((to_state, at, freed))
    out: list[Interval] = []
    for alloc_id, evs in history.items():
        row = allocs[alloc_id]
        for start, end, nodes in holding_pieces(evs, until=until, nodes=row["node_count"], states=states):
            start, end = max(start, since), min(end, until)
            if end > start:
                out.append(Interval(alloc_id, row["tenant_id"], row["user_id"], row["vcluster_id"],
                                    row["resource_group_id"], nodes * row["per_node_gpu"], nodes, start, end,
                                    nodes * row["per_node_cpu"], nodes * row["per_node_memory"]))
    return out


def _key(interval: Interval, day: date, group_by: Sequence[str]) -> tuple[Any, ...]:
    values = {"tenant": interval.tenant_id, "user": interval.user_id, "vcluster": interval.vcluster_id,
              "resource_group": interval.resource_group_id, "day": day}
    return tuple(values[field] for field in group_by)


def totals(spans: Iterable[Interval], group_by: Sequence[str]) -> dict[tuple[Any, ...], tuple[int, int]]:
    """(GPU-microseconds, node-microseconds) per key of ``group_by``, each interval split by day."""
    sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    for interval in spans:
        for day, start, end in split_at_midnight(interval.start, interval.end):
            length = micros(end - start)
            entry = sums[_key(interval, day, group_by)]
            entry[0] += length * interval.gpus
            entry[1] += length * interval.nodes
    return {key: (gpu, node) for key, (gpu, node) in sums.items()}


def gpu_hours(*, since: datetime, until: datetime | None = None, tenant_ids: Sequence[int] | None = None,
              group_by: Sequence[str] = ("tenant",)) -> dict[tuple[Any, ...], float]:
    """GPU-hours per key of ``group_by`` (the budget's question: how much has a tenant used)."""
    return {key: gpu / MICRO / 3600 for key, (gpu, _node) in
            totals(intervals(since=since, until=until, tenant_ids=tenant_ids), group_by).items()}


def _names(model: Any, ids: set[Any], field: str) -> dict[Any, str]:
    ids.discard(None)
    return dict(model.objects.filter(pk__in=ids).values_list("pk", field)) if ids else {}


def report(*, since: datetime, until: datetime, tenant_ids: Sequence[int] | None = None,
           group_by: Sequence[str] = ("tenant", "day")) -> list[dict[str, Any]]:
    """The usage API's rows: one per key of ``group_by``, named, sorted, with GPU- and node-hours.

    ``gpu_seconds`` is exact (an integer count of GPU-seconds, rounded down from microseconds);
    the hours are rounded to six places, a few milliseconds of one GPU.
    """
    sums = totals(intervals(since=since, until=until, tenant_ids=tenant_ids), group_by)
    columns = {field: {key[i] for key in sums} for i, field in enumerate(group_by)}
    names = {
        "tenant": _names(Tenant, columns.get("tenant", set()), "name"),
        "user": _names(get_user_model(), columns.get("user", set()), "username"),
        "vcluster": _names(VCluster, columns.get("vcluster", set()), "name"),
        "resource_group": _names(ResourceGroup, columns.get("resource_group", set()), "name"),
    }
    rows = []
    for key, (gpu, node) in sums.items():
        row: dict[str, Any] = {}
        for field, value in zip(group_by, key, strict=True):
            row[field] = value.isoformat() if field == "day" else names[field].get(value, "")
        row.update(gpu_seconds=gpu // MICRO, gpu_hours=round(gpu / MICRO / 3600, 6),
                   node_hours=round(node / MICRO / 3600, 6))
        rows.append(row)
    rows.sort(key=lambda r: tuple(str(r[field]) for field in group_by))
    return rows
