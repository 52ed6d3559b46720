"""The usage series: one sample a minute per resource group, vCluster and tenant (UsageSample).

Run by the periodic task ``scheduling.sample_usage`` (Celery beat, or the embedded loop), never
inside a scheduler pass or an agent frame. Each call samples every complete minute since the
last one it wrote (a mark in MetricRollup), at most an hour of them per call, so a missed minute
is sampled late and nothing is lost: what was used, pending and checkpointing is integrated from
the allocations' transitions (scheduling/accounting.py), preemptions are counted from the
decision records and lost GPU-hours from the victims' events. What the history does not keep
(GPUs held for preemptors, borrowed GPUs, free capacity) is read from the current rows, so a
minute sampled late carries the values of the moment it was sampled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from nodes.models import Node
from scheduling import accounting
from scheduling.models import (
    Allocation,
    AllocationEvent,
    MetricRollup,
    Placement,
    PreemptionDecision,
    ResourceGroup,
)
from scheduling.models.usage import UsageSample, UsageScope
from scheduling.states import State

MINUTE = 60
MARK = "usage:sampled_until"
MAX_CATCH_UP = timedelta(hours=1)
HORIZON = timedelta(days=2)  # minutes older than this are folded; they are not sampled again
UP_STATES = ("ready", "degraded", "draining")
GAUGES = ("gpu_used", "cpu_used", "memory_used", "gpu_held", "gpu_borrowed", "gpu_free", "pending",
          "pending_gpus")
COUNTERS = ("gpu_hours_lost", "checkpoint_seconds")

Key = tuple[str, int, int]  # scope, scope_id, resource_group_id


def floor_to(moment: datetime, seconds: int) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, UTC)


class Buckets:
    """Per (scope, id, group) and minute: the fields being summed."""

    def __init__(self, begin: datetime, count: int) -> None:
        self.begin, self.count = begin, count
        self.data: dict[Key, list[dict[str, Any]]] = defaultdict(lambda: [{} for _ in range(count)])

    def index(self, moment: datetime) -> int:
        return int((moment - self.begin).total_seconds() // MINUTE)

    def add(self, keys: Iterable[Key], i: int, field: str, value: float) -> None:
        for key in keys:
            cell = self.data[key][i]
            cell[field] = cell.get(field, 0.0) + value

    def spread(self, keys: list[Key], start: datetime, end: datetime, fields: dict[str, float]) -> None:
        """Add ``rate x seconds / 60`` of each field to every minute ``[start, end)`` overlaps."""
        i = max(0, self.index(start))
        while i < self.count:
            lo = self.begin + timedelta(seconds=i * MINUTE)
            hi = lo + timedelta(seconds=MINUTE)
            if lo >= end:
                break
            seconds = (min(hi, end) - max(lo, start)).total_seconds()
            if seconds > 0:
                for field, rate in fields.items():
                    self.add(keys, i, field, rate * (seconds if field == "checkpoint_seconds" else seconds / MINUTE))
            i += 1


def _keys(interval: accounting.Interval) -> list[Key]:
    rg = interval.resource_group_id
    keys = [(UsageScope.GROUP.value, rg, rg), (UsageScope.TENANT.value, interval.tenant_id, rg)]
    if interval.vcluster_id is not None:
        keys.append((UsageScope.VCLUSTER.value, interval.vcluster_id, rg))
    return keys


def _from_transitions(buckets: Buckets, begin: datetime, end: datetime) -> None:
    for iv in accounting.intervals(since=begin, until=end):
        buckets.spread(_keys(iv), iv.start, iv.end,
                       {"gpu_used": iv.gpus, "cpu_used": iv.cpus, "memory_used": iv.memory})
    for iv in accounting.intervals(since=begin, until=end, states=(State.PENDING,)):
        buckets.spread(_keys(iv), iv.start, iv.end, {"pending": 1, "pending_gpus": iv.gpus})
    for iv in accounting.intervals(since=begin, until=end, states=(State.CHECKPOINTING,)):
        buckets.spread(_keys(iv), iv.start, iv.end, {"checkpoint_seconds": 1})


def _victims(begin: datetime, end: datetime) -> dict[int, dict[str, Any]]:
    """The allocations preempted (asked to leave) in the window: their keys and sizes."""
    ids = set(AllocationEvent.objects.filter(created_at__gte=begin, created_at__lt=end, decision__isnull=False,
                                             from_state=State.RUNNING)
              .values_list("allocation_id", flat=True))
    decisions = PreemptionDecision.objects.filter(created_at__gte=begin, created_at__lt=end, outcome="executed")
    for victims, in decisions.values_list("victims"):
        ids.update(int(v["id"]) for v in victims or [] if str(v.get("id", "")).isdigit())
    rows = Allocation.objects.filter(pk__in=ids).values(
        "id", "tenant_id", "vcluster_id", "resource_group_id", "node_count", "per_node_gpu")
    return {row["id"]: row for row in rows}


def _row_keys(row: dict[str, Any]) -> list[Key]:
    rg = row["resource_group_id"]
    keys = [(UsageScope.GROUP.value, rg, rg), (UsageScope.TENANT.value, row["tenant_id"], rg)]
    if row["vcluster_id"] is not None:
        keys.append((UsageScope.VCLUSTER.value, row["vcluster_id"], rg))
    return keys


def _preemptions(buckets: Buckets, begin: datetime, end: datetime) -> None:
    """Victims by reason (decision records), and the work terminated victims lost since their start."""
    victims = _victims(begin, end)
    decisions = PreemptionDecision.objects.filter(created_at__gte=begin, created_at__lt=end, outcome="executed")
    for at, listed in decisions.values_list("created_at", "victims"):
        for v in listed or []:
            row = victims.get(int(v["id"])) if str(v.get("id", "")).isdigit() else None
            if row is not None:
                cells = [buckets.data[key][buckets.index(at)] for key in _row_keys(row)]
                for cell in cells:
                    by_reason = cell.setdefault("preemptions", {})
                    by_reason[v.get("reason", "")] = by_reason.get(v.get("reason", ""), 0) + 1
    stopped = AllocationEvent.objects.filter(created_at__gte=begin, created_at__lt=end, decision__isnull=False,
                                             from_state=State.RUNNING, to_state=State.TERMINATING)
    for alloc_id, at in stopped.values_list("allocation_id", "created_at"):
        row = victims.get(alloc_id)
        started = (AllocationEvent.objects.filter(allocation_id=alloc_id, to_state=State.RUNNING, created_at__lte=at)
                   .order_by("-created_at").values_list("created_at", flat=True).first())
        if row is not None and started is not None:
            lost = row["node_count"] * row["per_node_gpu"] * (at - started).total_seconds() / 3600
            buckets.add(_row_keys(row), buckets.index(at), "gpu_hours_lost", lost)


def _current(buckets: Buckets) -> None:
    """Held, borrowed and free GPUs as they are now, in every minute being sampled."""
    current: dict[Key, dict[str, float]] = defaultdict(dict)
    # A held placement reserves a node for a preemptor and records no resources of its own: what
    # it holds back is the preemptor's GPUs per node.
    held = (Placement.objects.filter(kind="held").values("node__resource_group_id", "allocation__tenant_id",
                                                         "allocation__vcluster_id")
            .annotate(g=Sum("allocation__per_node_gpu")))
    borrowed = (Placement.objects.filter(kind="assigned", node__borrowed_by__isnull=False)
                .values("node__resource_group_id", "allocation__tenant_id", "allocation__vcluster_id")
                .annotate(g=Sum("gpu")))
    for field, rows in (("gpu_held", held), ("gpu_borrowed", borrowed)):
        for row in rows:
            keys = _row_keys({"resource_group_id": row["node__resource_group_id"],
                              "tenant_id": row["allocation__tenant_id"], "vcluster_id": row["allocation__vcluster_id"]})
            for key in keys:
                current[key][field] = current[key].get(field, 0.0) + float(row["g"] or 0)
    capacity = dict(Node.objects.filter(state__in=UP_STATES).values("resource_group_id")
                    .annotate(g=Sum("gpu")).values_list("resource_group_id", "g"))
    for rg in ResourceGroup.objects.values_list("pk", flat=True):
        key = (UsageScope.GROUP.value, rg, rg)
        cells = buckets.data[key]  # every group has a row each minute, zeros included
        for cell in cells:
            cell.update(current.get(key, {}))
            cell["gpu_free"] = max(0.0, float(capacity.get(rg) or 0) - cell.get("gpu_used", 0.0)
                                   - cell.get("gpu_held", 0.0))
        current.pop(key, None)
    for key, values in current.items():
        for cell in buckets.data[key]:
            cell.update(values)


def compute(begin: datetime, count: int) -> list[UsageSample]:
    """The minute samples of ``count`` minutes from ``begin`` (every scope), computed from the records."""
    end = begin + timedelta(seconds=count * MINUTE)
    buckets = Buckets(begin, count)
    _from_transitions(buckets, begin, end)
    _preemptions(buckets, begin, end)
    _current(buckets)
    out = []
    for (scope, scope_id, rg), cells in buckets.data.items():
        for i, cell in enumerate(cells):
            if cell or scope == UsageScope.GROUP.value:
                out.append(UsageSample(resolution=MINUTE, start=begin + timedelta(seconds=i * MINUTE), scope=scope,
                                       scope_id=scope_id, resource_group_id=rg, **cell))
    return out


def sample(now: datetime | None = None) -> int:
    """Write every complete minute not sampled yet (at most an hour of them); returns how many."""
    end = floor_to(now or timezone.now(), MINUTE)
    with transaction.atomic():
        first = (end - timedelta(seconds=MINUTE)).timestamp()
        MetricRollup.objects.get_or_create(key=MARK, defaults={"value": first})
        mark = MetricRollup.objects.select_for_update().get(key=MARK)
        begin = max(datetime.fromtimestamp(mark.value, UTC), end - HORIZON)
        stop = min(end, begin + MAX_CATCH_UP)
        if begin >= stop:
            return 0
        count = int((stop - begin).total_seconds() // MINUTE)
        UsageSample.objects.bulk_create(compute(begin, count), batch_size=2000, ignore_conflicts=True)
        mark.value = stop.timestamp()
        mark.save(update_fields=["value"])
    return count
