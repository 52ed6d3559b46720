"""Downsampling and retention of the usage series: minutes become 15 minutes after 2 days, those
become days after 60 days, and days are dropped after a year (run by ``scheduling.sample_usage``).

A coarse bucket's gauge is the time-weighted average of its finer samples (a missing vCluster or
tenant sample counts as zero); its counters are their sums. A bucket is folded only once it is
wholly past the age, so each is folded once, and the fine rows go in the same transaction.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.models.usage import UsageSample
from scheduling.usage import COUNTERS, GAUGES, floor_to

FOLDS = ((60, 900, timedelta(days=2)), (900, 86400, timedelta(days=60)))
KEEP = timedelta(days=365)
MAX_PER_CALL = timedelta(days=1)  # of fine rows folded per call; the next call goes on


def merge(target: dict[str, Any], row: dict[str, Any], weight: float) -> None:
    """Add one finer sample into a coarse bucket being built."""
    for field in GAUGES:
        target[field] = target.get(field, 0.0) + row[field] * weight
    for field in COUNTERS:
        target[field] = target.get(field, 0.0) + row[field]
    by_reason = target.setdefault("preemptions", {})
    for reason, n in (row["preemptions"] or {}).items():
        by_reason[reason] = by_reason.get(reason, 0) + n


FIELDS = ("scope", "scope_id", "resource_group_id", "start", "preemptions", *GAUGES, *COUNTERS)


def fold_once(fine: int, coarse: int, cutoff: datetime) -> int:
    """Fold the oldest day (at most) of ``fine`` rows that lie wholly before ``cutoff``."""
    oldest = (UsageSample.objects.filter(resolution=fine, start__lt=cutoff).order_by("start")
              .values_list("start", flat=True).first())
    if oldest is None:
        return 0
    upto = min(cutoff, floor_to(oldest, coarse) + max(MAX_PER_CALL, timedelta(seconds=coarse)))
    with transaction.atomic():
        rows = UsageSample.objects.select_for_update().filter(resolution=fine, start__lt=upto)
        built: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(dict)
        count = 0
        for row in rows.values(*FIELDS).iterator(chunk_size=5000):
            bucket = floor_to(row["start"], coarse)
            merge(built[(row["scope"], row["scope_id"], row["resource_group_id"], bucket)], row, fine / coarse)
            count += 1
        existing = UsageSample.objects.filter(resolution=coarse, start__gte=floor_to(oldest, coarse), start__lt=upto)
        for row in existing.values(*FIELDS):  # a bucket folded into before (never, unless interrupted)
            merge(built[(row["scope"], row["scope_id"], row["resource_group_id"], row["start"])], row, 1.0)
        existing.delete()
        UsageSample.objects.bulk_create(
            [UsageSample(resolution=coarse, scope=scope, scope_id=scope_id, resource_group_id=rg, start=start,
                         **values) for (scope, scope_id, rg, start), values in built.items()], batch_size=2000)
        rows.delete()
    return count


def fold(now: datetime | None = None) -> int:
    """One round of downsampling and retention; returns how many rows were folded or dropped."""
    now = now or timezone.now()
    done = 0
    for fine, coarse, age in FOLDS:
        done += fold_once(fine, coarse, floor_to(now - age, coarse))
    dropped, _ = UsageSample.objects.filter(resolution=86400, start__lt=now - KEEP).delete()
    return done + dropped
