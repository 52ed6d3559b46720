"""The cluster's metrics at /metrics: GPUs by state, and each tenant's GPU-hours as a counter.

Both read the database, as the rest of /metrics does (scheduling/metrics.py), so what the
worker's passes and every Daphne process did is counted whichever process answers the scrape.

``lattice_tenant_gpu_hours_total`` does not read the whole allocation history at each scrape:
GPU-seconds of the history older than a mark (settled: no transaction still writing it) are kept
per tenant in MetricRollup, and each scrape only integrates what happened since the mark (the
accounting's intervals, scheduling/accounting.py, the one place GPU-hours are computed), open
intervals of running work counted up to now. The mark moves forward as history settles. A
counter must never go down, even when an event committed late ends an interval before the time
an earlier scrape counted it up to: the last value reported per tenant is kept too, and a scrape
reports the larger.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from nodes.models import Node
from scheduling import accounting
from scheduling.models import MetricRollup, Placement, Tenant

UP_STATES = ("ready", "degraded", "draining")  # nodes whose GPUs count as capacity (as the usage series)
GPU_STATES = ("in_use", "borrowed", "held", "free")
GPU_HOURS_MARK = "gpuh:until"
GPU_SECONDS = "gpuh:t:"   # + tenant id: GPU-seconds of the history before the mark
REPORTED = "gpuh:seen:"   # + tenant id: the last value reported, in GPU-seconds
SETTLED = timedelta(minutes=5)  # as scheduling/metrics.py: older records are committed
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def gpus_by_state() -> dict[str, dict[str, float]]:
    """Per resource group, its up nodes' GPUs in four states that add up to them all: ``in_use``
    by work on nodes not lent out, ``borrowed`` in use on nodes another vCluster borrowed,
    ``held`` free of work but reserved for a preemptor waiting for its victims to leave, and
    ``free``. Nodes down, drained or never seen are not capacity and are left out."""
    nodes = list(Node.objects.filter(state__in=UP_STATES).values_list(
        "id", "resource_group__name", "gpu", "borrowed_by_id"))
    used = dict(Placement.objects.filter(kind="assigned", node__state__in=UP_STATES)
                .values("node_id").annotate(g=Sum("gpu")).values_list("node_id", "g"))
    # A hold reserves the preemptor's share of the node (its placement row names no GPUs).
    held = dict(Placement.objects.filter(kind="held", node__state__in=UP_STATES)
                .values("node_id").annotate(g=Sum("allocation__per_node_gpu")).values_list("node_id", "g"))
    out: dict[str, dict[str, float]] = {}
    for node_id, group, gpus, borrowed_by in nodes:
        row = out.setdefault(group, dict.fromkeys(GPU_STATES, 0.0))
        busy = min(float(used.get(node_id) or 0), float(gpus))
        reserved = min(float(held.get(node_id) or 0), gpus - busy)
        row["borrowed" if borrowed_by is not None else "in_use"] += busy
        row["held"] += reserved
        row["free"] += gpus - busy - reserved
    return out


def _per_tenant(since: datetime, until: datetime) -> dict[int, float]:
    """GPU-seconds per tenant id held in ``[since, until)``."""
    sums = accounting.totals(accounting.intervals(since=since, until=until), ("tenant",))
    return {key[0]: gpu / accounting.MICRO for key, (gpu, _node) in sums.items()}


def tenant_gpu_seconds(now: datetime | None = None) -> dict[int, float]:
    """Each tenant's GPU-seconds ever held, never less than a scrape reported before. One scrape
    at a time moves the mark (its row is locked); the history since the mark is read, not all."""
    now = now or timezone.now()
    cutoff = now - SETTLED
    MetricRollup.objects.get_or_create(key=GPU_HOURS_MARK, defaults={"value": EPOCH.timestamp()})
    with transaction.atomic():
        mark_row = MetricRollup.objects.select_for_update().get(key=GPU_HOURS_MARK)
        mark = datetime.fromtimestamp(mark_row.value, UTC)
        rows = {r.key: r for r in MetricRollup.objects.filter(key__startswith="gpuh:")}
        if cutoff > mark:
            for tenant_id, seconds in _per_tenant(mark, cutoff).items():
                _add(rows, f"{GPU_SECONDS}{tenant_id}", seconds)
            mark_row.value, mark = cutoff.timestamp(), cutoff
            mark_row.save(update_fields=["value"])
        totals: dict[int, float] = defaultdict(float)
        for key, row in rows.items():
            if key.startswith(GPU_SECONDS):
                totals[int(key.removeprefix(GPU_SECONDS))] += row.value
        for tenant_id, seconds in _per_tenant(mark, now).items():
            totals[tenant_id] += seconds
        for tenant_id in list(totals):
            seen = rows.get(f"{REPORTED}{tenant_id}")
            if seen is not None and seen.value >= totals[tenant_id]:
                totals[tenant_id] = seen.value
            else:
                _set(rows, f"{REPORTED}{tenant_id}", totals[tenant_id])
    return dict(totals)


def _add(rows: dict[str, MetricRollup], key: str, value: float) -> None:
    row = rows.get(key)
    if row is None:
        rows[key] = MetricRollup.objects.create(key=key, value=value)
    else:
        row.value += value
        row.save(update_fields=["value"])


def _set(rows: dict[str, MetricRollup], key: str, value: float) -> None:
    row = rows.get(key)
    if row is None:
        rows[key] = MetricRollup.objects.create(key=key, value=value)
    else:
        MetricRollup.objects.filter(pk=row.pk).update(value=value)
        row.value = value


def cluster_metrics() -> Iterator[object]:
    gpus = GaugeMetricFamily("lattice_gpus", "GPUs of the group's up nodes by state: in_use, borrowed (in use "
                             "on a lent node), held (reserved for a preemptor), free", labels=["resource_group", "state"])
    for group, states in sorted(gpus_by_state().items()):
        for state in GPU_STATES:
            gpus.add_metric([group, state], states[state])
    yield gpus

    hours = CounterMetricFamily("lattice_tenant_gpu_hours", "GPU-hours the tenant's work has held (accounting)",
                                labels=["tenant"])
    names = dict(Tenant.objects.values_list("pk", "name"))
    seconds = tenant_gpu_seconds()
    for tenant_id, name in sorted(names.items(), key=lambda item: item[1]):
        hours.add_metric([name], seconds.get(tenant_id, 0.0) / 3600)
    yield hours
