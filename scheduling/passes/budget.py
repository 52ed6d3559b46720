"""GPU-hours from the allocation history, and how much of its budget a tenant has used.

A tenant's ``Quota.gpu_hours_budget`` is per calendar month (UTC): the budget period runs from
the first of the month, 00:00 UTC, to the first of the next. An allocation uses GPUs while it
holds its nodes: from each event that moves it into a holding state (running) to the event that
moves it out (suspended, pending after a requeue, completed, failed, cancelled, preempted);
checkpointing and terminating still hold them. Its GPUs are ``node_count x per_node_gpu``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import F, Q

from scheduling.models import AllocationEvent
from scheduling.states import HOLDING

# A pass reads the tenants' use at most this often (GPU-hours move slowly; the history query
# reads every run of the month).
USE_TTL_S = 60.0
_use_cache: dict[tuple[int, datetime], tuple[float, float]] = {}


def budget_period(moment: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding ``moment``: [first day 00:00, next month's first day)."""
    at = moment.astimezone(UTC)
    start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def gpu_hours(tenant_ids: list[int], since: datetime, until: datetime) -> dict[int, float]:
    """GPU-hours each tenant's allocations used within [since, until), in one query.

    Runs still holding their nodes count up to ``until``; pass ``now`` (not a future period end)
    for the use so far."""
    out: dict[int, float] = {t: 0.0 for t in tenant_ids}
    if not tenant_ids or until <= since:
        return out
    rows = (AllocationEvent.objects
            .filter(allocation__tenant_id__in=tenant_ids, allocation__per_node_gpu__gt=0, created_at__lt=until)
            .filter(Q(allocation__ended_at__isnull=True) | Q(allocation__ended_at__gte=since))
            .filter(Q(to_state__in=HOLDING) | Q(from_state__in=HOLDING)).exclude(from_state=F("to_state"))
            .order_by("allocation_id", "created_at", "id")
            .values_list("allocation_id", "allocation__tenant_id", "from_state", "to_state", "created_at",
                         "allocation__node_count", "allocation__per_node_gpu"))
    opened: dict[int, datetime] = {}
    last: dict[int, tuple[int, int]] = {}
    for alloc_id, tenant_id, from_state, to_state, at, nodes, gpus in rows.iterator(chunk_size=2000):
        last[alloc_id] = (tenant_id, nodes * gpus)
        if to_state in HOLDING and from_state not in HOLDING:
            opened.setdefault(alloc_id, at)
        elif from_state in HOLDING and to_state not in HOLDING and alloc_id in opened:
            out[tenant_id] += _overlap(opened.pop(alloc_id), at, since, until) * nodes * gpus
    for alloc_id, began in opened.items():  # still holding its nodes
        tenant_id, count = last[alloc_id]
        out[tenant_id] += _overlap(began, until, since, until) * count
    return out


def tenant_gpu_hours(tenant_id: int, since: datetime, until: datetime) -> float:
    """One tenant's GPU-hours within [since, until)."""
    return gpu_hours([tenant_id], since, until)[tenant_id]


def _overlap(start: datetime, end: datetime, since: datetime, until: datetime) -> float:
    return max(0.0, (min(end, until) - max(start, since)).total_seconds()) / 3600.0


def month_use(tenant_ids: list[int], now: datetime) -> dict[int, float]:
    """GPU-hours used this budget period so far, each tenant's figure at most ``USE_TTL_S`` old."""
    start, _ = budget_period(now)
    clock = time.monotonic()
    stale = [t for t in tenant_ids if (t, start) not in _use_cache or clock - _use_cache[(t, start)][1] > USE_TTL_S]
    if stale:
        for tenant_id, hours in gpu_hours(stale, start, now).items():
            _use_cache[(tenant_id, start)] = (hours, clock)
    return {t: _use_cache[(t, start)][0] for t in tenant_ids}


def forget_use() -> None:
    """Drop the kept figures (tests; an operator's correction of the history)."""
    _use_cache.clear()


def used_by_tenant(budgets: dict[int, float | None], now: datetime) -> dict[int, float]:
    """GPU-hours this period of the tenants that have a budget (the others are not read)."""
    with_budget = sorted(t for t, b in budgets.items() if b is not None)
    return defaultdict(float, month_use(with_budget, now)) if with_budget else {}
