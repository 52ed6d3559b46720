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

from scheduling import accounting

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
    """GPU-hours each tenant's allocations used within [since, until), as the accounting counts
    them (scheduling/accounting.py, the one place GPU-hours are computed from the history).

    Runs still holding their nodes count up to ``until``; pass ``now`` (not a future period end)
    for the use so far."""
    out: dict[int, float] = {t: 0.0 for t in tenant_ids}
    if not tenant_ids or until <= since:
        return out
    for (tenant_id,), hours in accounting.gpu_hours(since=since, until=until, tenant_ids=tenant_ids).items():
        out[tenant_id] += hours
    return out


def tenant_gpu_hours(tenant_id: int, since: datetime, until: datetime) -> float:
    """One tenant's GPU-hours within [since, until)."""
    return gpu_hours([tenant_id], since, until)[tenant_id]


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
