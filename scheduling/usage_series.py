"""Reading the usage series for charts: one scope over a range, at a step that suits it.

The stored rows of every resolution at or finer than the step are re-bucketed to the step
(finer rows not yet folded count with their share of it), so a range that spans the folding
age reads the same whichever rows hold it. Tenants' series add up their rows of every group.

On PostgreSQL the re-bucketing is one grouped query (a 30-day range returns some 180 buckets,
not the 5,000 minute and 15-minute rows behind them) and the preemptions, a JSON object per
row, are read only from the rows that have any; elsewhere (SQLite, the embedded demo) the rows
are merged here. Both give the same numbers (tests/scheduling/test_usage_series.py).

``series_json`` serves a chart its answer encoded, from Django's cache (Redis when ``REDIS_URL``
is set, else each process's memory) while it is still exact: the key holds the minute the range
ends at and the series' generation, which every write to the stored rows sets in the same
transaction (a statement trigger, migration 0021: the sampler, the folding, anything else),
for ``LATTICE_USAGE_SERIES_CACHE_SECONDS`` at most (0: never cached). The
generation is read before the rows, so an answer is never kept under a generation older than
the rows it was read from; a sample written since is in the next answer at once. Each process
also keeps its latest answers by the same keys in its memory, in front of the shared cache.
Callers check who may read the scope before asking (the cached answer is per scope, not per
reader). SQLite has no trigger and reads afresh each time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from scheduling.models import MetricRollup
from scheduling.models.usage import UsageSample, UsageScope
from scheduling.usage import COUNTERS, GAUGES, MARK, floor_to
from scheduling.usage_fold import merge

GENERATION = "usage:generation"  # the MetricRollup key the trigger sets (migration 0021)
# This process's latest answers, by the same keys: the key alone says an answer is still exact,
# so a hit skips the shared cache's round trip (and Django building a Redis client per call).
_recent: dict[str, bytes] = {}
RECENT = 64
RANGES = {"1h": (timedelta(hours=1), 60), "24h": (timedelta(hours=24), 900), "7d": (timedelta(days=7), 3600),
          "30d": (timedelta(days=30), 4 * 3600)}


def _filters(scope: str, scope_id: int, begin: datetime, end: datetime, step: int,
             resource_group_id: int | None) -> tuple[str, list[Any]]:
    sql = "scope = %s AND scope_id = %s AND start >= %s AND start < %s AND resolution <= %s"
    params: list[Any] = [scope, scope_id, begin, end, step]
    if resource_group_id is not None:
        sql += " AND resource_group_id = %s"
        params.append(resource_group_id)
    return sql, params


def _built_sql(scope: str, scope_id: int, begin: datetime, end: datetime, step: int,
               resource_group_id: int | None) -> dict[int, dict[str, Any]]:
    """Per bucket start (epoch seconds): the fields summed by PostgreSQL, preemptions merged here."""
    where, params = _filters(scope, scope_id, begin, end, step, resource_group_id)
    table = UsageSample._meta.db_table
    sums = [f"sum({f} * resolution) / {step}" for f in GAUGES] + [f"sum({f})" for f in COUNTERS]
    bucket = f"(floor(extract(epoch from start) / {step}) * {step})::bigint"
    built: dict[int, dict[str, Any]] = {}
    with connection.cursor() as cur:
        cur.execute(f"SELECT {bucket} AS b, {', '.join(sums)} FROM {table} WHERE {where} GROUP BY b", params)
        for b, *values in cur.fetchall():
            built[b] = dict(zip((*GAUGES, *COUNTERS), values, strict=True))
        cur.execute(f"SELECT {bucket}, preemptions FROM {table} WHERE {where} AND preemptions <> '{{}}'::jsonb",
                    params)
        for b, by_reason in cur.fetchall():
            if isinstance(by_reason, str):  # Django leaves jsonb undecoded on its own connections
                by_reason = json.loads(by_reason)
            cell = built.setdefault(b, {}).setdefault("preemptions", {})
            for reason, n in by_reason.items():
                cell[reason] = cell.get(reason, 0) + n
    return built


def _built_orm(scope: str, scope_id: int, begin: datetime, end: datetime, step: int,
               resource_group_id: int | None) -> dict[int, dict[str, Any]]:
    rows = UsageSample.objects.filter(scope=scope, scope_id=scope_id, start__gte=begin, start__lt=end,
                                      resolution__lte=step)
    if resource_group_id is not None:
        rows = rows.filter(resource_group_id=resource_group_id)
    built: dict[int, dict[str, Any]] = {}
    for row in rows.values("resolution", "start", "preemptions", *GAUGES, *COUNTERS).iterator(chunk_size=5000):
        merge(built.setdefault(int(floor_to(row["start"], step).timestamp()), {}), row, row["resolution"] / step)
    return built


def series(*, scope: str, scope_id: int, range_name: str, resource_group_id: int | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """{"step", "t": bucket starts (epoch seconds), one list per field, "preemptions": {reason: list}}."""
    span, step = RANGES[range_name]
    end = floor_to(now or timezone.now(), 60)
    begin = floor_to(end - span, step)
    starts = list(range(int(begin.timestamp()), int(end.timestamp()), step))
    read = _built_sql if connection.vendor == "postgresql" else _built_orm
    built = read(scope, scope_id, begin, end, step, resource_group_id)
    out: dict[str, Any] = {"range": range_name, "step": step, "t": starts}
    # A gauge is its step's mean. The latest step is still filling: its mean is over the part of
    # it sampled so far, not over the whole step (which would draw every chart's last point low).
    until = _sampled_until(end)
    span_of = {s: until - s for s in starts[-2:] if 0 < until - s < step}
    for field in GAUGES:
        out[field] = [round(float(built.get(s, {}).get(field) or 0.0) * step / span_of.get(s, step), 4)
                      for s in starts]
    for field in COUNTERS:
        out[field] = [round(float(built.get(s, {}).get(field) or 0.0), 4) for s in starts]
    reasons = sorted({r for cell in built.values() for r in cell.get("preemptions", {})})
    out["preemptions"] = {r: [built.get(s, {}).get("preemptions", {}).get(r, 0) for s in starts] for r in reasons}
    return out


def _sampled_until(end: datetime) -> int:
    """Epoch seconds up to which minutes are sampled (the sampler's mark), at most ``end``; ``end``
    where nothing has been sampled yet."""
    mark = MetricRollup.objects.filter(key=MARK).values_list("value", flat=True).first()
    limit = int(end.timestamp())
    return limit if mark is None else min(limit, int(mark))


def generation() -> int | None:
    """The number the latest write to the stored series took; None where no trigger keeps it."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cur:
        cur.execute(f"SELECT value FROM {MetricRollup._meta.db_table} WHERE key = %s", [GENERATION])
        row = cur.fetchone()
    return int(row[0]) if row is not None else None


def series_json(*, scope: str, scope_id: int, range_name: str, resource_group_id: int | None,
                encode: Callable[[dict[str, Any]], bytes]) -> bytes:
    """``series()`` for now, encoded by ``encode``: from the cache when nothing was written to the
    series since it was read in this same minute, else read and kept. Check the reader first."""
    keep = settings.LATTICE_USAGE_SERIES_CACHE_SECONDS  # an answer is good for its minute at most anyway
    written = generation() if keep else None  # before the rows: what is read next is at least this new
    end = floor_to(timezone.now(), 60)
    if written is None:
        return encode(series(scope=scope, scope_id=scope_id, range_name=range_name,
                             resource_group_id=resource_group_id, now=end))
    key = (f"usage-series:{written}:{scope}:{scope_id}:{resource_group_id or ''}:{range_name}:"
           f"{int(end.timestamp())}")
    body = _recent.get(key)
    if body is None:
        body = cache.get(key)
        if body is None:
            body = encode(series(scope=scope, scope_id=scope_id, range_name=range_name,
                                 resource_group_id=resource_group_id, now=end))
            cache.set(key, body, keep)
        if len(_recent) >= RECENT:
            _recent.clear()  # their keys name a minute gone or a generation since written over
        _recent[key] = bytes(body)
    return bytes(body)


SCOPES = {"group": UsageScope.GROUP.value, "vcluster": UsageScope.VCLUSTER.value, "tenant": UsageScope.TENANT.value}
