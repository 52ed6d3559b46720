"""Hard quotas at placement, counted in memory by the scheduler pass.

Admission already counts every active allocation against the tenant's quota
under a row lock; the pass checks again where capacity is consumed. The usage
of every tenant is one aggregate over all holding allocations, which grows with
the cluster, so the book is kept with the pass's snapshot (snapshot_cache) and
reloaded only when someone else changed a holding allocation or a quota.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Sum

from scheduling.models import Allocation, Quota
from scheduling.states import HOLDING


def _want(row: dict[str, Any]) -> tuple[int, int, int]:
    return 1, row["node_count"], row["node_count"] * row["per_node_gpu"]


class QuotaBook:
    """Per tenant: the limits (allocations, nodes, GPUs) and what holding allocations use."""

    def __init__(self, limits: dict[int, tuple[int, int, int]], used: dict[int, list[int]]) -> None:
        self.limits = limits
        self.used = used

    @classmethod
    def load(cls) -> QuotaBook:
        """Two queries: the limits, and the usage of every tenant."""
        limits = {q["tenant_id"]: (q["max_concurrent_allocations"], q["max_nodes"], q["max_gpus"])
                  for q in Quota.objects.values("tenant_id", "max_concurrent_allocations", "max_nodes", "max_gpus")}
        used = {r["tenant_id"]: [r["n"], r["nodes"] or 0, r["gpus"] or 0]
                for r in Allocation.objects.filter(state__in=HOLDING).values("tenant_id").annotate(
                    n=Count("id"), nodes=Sum("node_count"), gpus=Sum(F("node_count") * F("per_node_gpu")))}
        return cls(limits, used)

    def take(self, row: dict[str, Any]) -> bool:
        """Count ``row`` (an allocation about to start) if its tenant's limits allow it."""
        limit = self.limits.get(row["tenant_id"])
        mine = self.used.setdefault(row["tenant_id"], [0, 0, 0])
        want = _want(row)
        if limit is not None and any(u + w > lim for u, w, lim in zip(mine, want, limit, strict=True)):
            return False
        for i, w in enumerate(want):
            mine[i] += w
        return True

    def give_back(self, row: dict[str, Any]) -> None:
        """Undo ``take`` for an allocation that did not start after all."""
        mine = self.used.get(row["tenant_id"])
        if mine is not None:
            for i, w in enumerate(_want(row)):
                mine[i] -= w
