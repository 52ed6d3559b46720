"""Reading the usage series for charts: one scope over a range, at a step that suits it.

The stored rows of every resolution at or finer than the step are re-bucketed to the step
(finer rows not yet folded count with their share of it), so a range that spans the folding
age reads the same whichever rows hold it. Tenants' series add up their rows of every group.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from scheduling.models.usage import UsageSample, UsageScope
from scheduling.usage import COUNTERS, GAUGES, floor_to
from scheduling.usage_fold import merge

RANGES = {"1h": (timedelta(hours=1), 60), "24h": (timedelta(hours=24), 900), "7d": (timedelta(days=7), 3600),
          "30d": (timedelta(days=30), 4 * 3600)}


def series(*, scope: str, scope_id: int, range_name: str, resource_group_id: int | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """{"step", "t": bucket starts (epoch seconds), one list per field, "preemptions": {reason: list}}."""
    span, step = RANGES[range_name]
    end = floor_to(now or timezone.now(), 60)
    begin = floor_to(end - span, step)
    starts = []
    moment = begin
    while moment < end:
        starts.append(moment)
        moment += timedelta(seconds=step)
    rows = UsageSample.objects.filter(scope=scope, scope_id=scope_id, start__gte=begin, start__lt=end,
                                      resolution__lte=step)
    if resource_group_id is not None:
        rows = rows.filter(resource_group_id=resource_group_id)
    built: dict[datetime, dict[str, Any]] = {}
    for row in rows.values("resolution", "start", "preemptions", *GAUGES, *COUNTERS).iterator(chunk_size=5000):
        merge(built.setdefault(floor_to(row["start"], step), {}), row, row["resolution"] / step)
    out: dict[str, Any] = {"range": range_name, "step": step, "t": [int(s.timestamp()) for s in starts]}
    for field in (*GAUGES, *COUNTERS):
        out[field] = [round(built.get(s, {}).get(field, 0.0), 4) for s in starts]
    reasons = sorted({r for cell in built.values() for r in cell.get("preemptions", {})})
    out["preemptions"] = {r: [built.get(s, {}).get("preemptions", {}).get(r, 0) for s in starts] for r in reasons}
    return out


SCOPES = {"group": UsageScope.GROUP.value, "vcluster": UsageScope.VCLUSTER.value, "tenant": UsageScope.TENANT.value}
