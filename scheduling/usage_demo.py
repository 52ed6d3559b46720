"""The demo's past: a week of usage samples made up for ``manage.py seed_demo``, so the charts
have history from the first minute (the sampler then adds a minute at a time from the records).

Only for the demo, and only when no sample is stored yet: a day-long rhythm around each group's
capacity (busier in the working day), split among its vClusters by their nodes and among the
tenants by their fair share, a queue that grows when the group is full, and now and then a
preemption. Minute rows for the last 2 days and 15-minute rows before, as the folding keeps them;
the sampler's mark is set where the made-up history ends, so it goes on from there.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Sum

from nodes.models import Node
from scheduling.models import MetricRollup, Quota, ResourceGroup
from scheduling.models.usage import UsageSample, UsageScope
from scheduling.usage import HORIZON, MARK, floor_to
from scheduling.usage_fold import FOLDS

DAYS = 7
REASONS = {"class_cost": ["priority", "reclaim"], "rank": ["fair_share", "sensitive"], "fair_share": ["fair_share"]}


def _load(moment: datetime, rnd: random.Random) -> float:
    """The share of a group's GPUs in use at ``moment``: high in the working day, lower at night."""
    hour = moment.hour + moment.minute / 60
    return min(1.0, max(0.05, 0.62 + 0.3 * math.sin((hour - 9) / 24 * 2 * math.pi) + rnd.gauss(0, 0.04)))


def _rows(group: ResourceGroup, start: datetime, resolution: int, capacity: float, vclusters: dict[int, float],
          shares: dict[int, float], rnd: random.Random) -> list[UsageSample]:
    load = _load(start, rnd)
    used = round(capacity * load, 2)
    held = 8.0 if load > 0.85 and rnd.random() < 0.2 else 0.0
    full = max(0.0, load - 0.75) / 0.25
    pending = round(full * 12 + rnd.random() * 2, 2)
    by_reason: dict[str, int] = {}
    if load > 0.8 and rnd.random() < 0.05 * resolution / 60:
        reason = rnd.choice(REASONS.get(group.policy_kind, ["priority"]))
        by_reason[reason] = 1 + int(rnd.random() * 2 * resolution / 60)
    common = {"resolution": resolution, "start": start, "resource_group_id": group.pk}
    rows = [UsageSample(scope=UsageScope.GROUP, scope_id=group.pk, gpu_used=used, cpu_used=used * 8,
                        memory_used=used * 64, gpu_held=held, gpu_free=max(0.0, capacity - used - held),
                        pending=pending, pending_gpus=pending * 8, preemptions=by_reason,
                        checkpoint_seconds=30.0 * sum(by_reason.values()), **common)]
    for vc, part in vclusters.items():
        rows.append(UsageSample(scope=UsageScope.VCLUSTER, scope_id=vc, gpu_used=round(used * part, 2),
                                gpu_borrowed=round(used * part * 0.05, 2), **common))
    for tenant, share in shares.items():
        jitter = max(0.0, share * 0.8 * (1 + rnd.gauss(0, 0.2)))  # within its quota
        rows.append(UsageSample(scope=UsageScope.TENANT, scope_id=tenant, gpu_used=round(used * jitter, 2),
                                pending=round(pending * share, 2), pending_gpus=round(pending * share * 8, 2),
                                **common))
    return rows


def seed_history(now: datetime, days: int = DAYS, seed: int = 25) -> int:
    """Write the made-up week unless samples exist; returns how many rows were written."""
    if UsageSample.objects.exists():
        return 0
    rnd = random.Random(seed)
    end = floor_to(now, 60)
    fine_from = floor_to(end - HORIZON, FOLDS[0][1])
    shares = dict(Quota.objects.values_list("tenant_id", "fair_share"))
    total = sum(shares.values()) or 1.0
    rows: list[UsageSample] = []
    for group in ResourceGroup.objects.order_by("pk"):
        nodes = Node.objects.filter(resource_group=group)
        capacity = float(nodes.aggregate(g=Sum("gpu"))["g"] or 0)
        per_vc: dict[int, Any] = dict(nodes.exclude(vcluster=None).values("vcluster_id").annotate(n=Count("id"))
                                      .values_list("vcluster_id", "n"))
        count = sum(per_vc.values()) or 1
        vclusters = {vc: n / count for vc, n in per_vc.items()}
        tenant_shares = {t: s / total for t, s in shares.items()}
        moment = floor_to(end - timedelta(days=days), 900)
        while moment < end:
            resolution = 60 if moment >= fine_from else 900
            rows += _rows(group, moment, resolution, capacity, vclusters, tenant_shares, rnd)
            moment += timedelta(seconds=resolution)
    UsageSample.objects.bulk_create(rows, batch_size=2000)
    MetricRollup.objects.update_or_create(key=MARK, defaults={"value": end.timestamp()})
    return len(rows)
