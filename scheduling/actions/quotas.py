"""Hard quotas: what a tenant uses, and whether a request fits within its limits."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.admission_sql import usage_row
from scheduling.errors import QuotaExceeded
from scheduling.models import Allocation, Quota, Tenant
from scheduling.states import FINAL, HOLDING, State

ACTIVE = [s for s in State.values if s not in FINAL]


@dataclass(frozen=True)
class Usage:
    allocations: int
    nodes: int
    gpus: int


def tenant_usage(tenant: Tenant, states: list[str] | None = None) -> Usage:
    return Usage(*usage_row(tenant.pk, states or ACTIVE))  # one statement written out once


def check_quota(quota: Quota, usage: Usage, *, nodes: int, gpus: int, allocations: int = 1) -> None:
    """Raise QuotaExceeded naming current, requested and limit if the request does not fit."""
    for name, what, current, requested, limit in (
        ("max_concurrent_allocations", "allocations at once", usage.allocations, allocations,
         quota.max_concurrent_allocations),
        ("max_nodes", "nodes", usage.nodes, nodes, quota.max_nodes),
        ("max_gpus", "GPUs", usage.gpus, gpus, quota.max_gpus),
    ):
        if current + requested > limit:
            raise QuotaExceeded(
                f"This job would pass your tenant's hard quota on {what} ({name}): the tenant's work uses "
                f"{current}, this job needs {requested} more, and the limit is {limit}.",
                quota=name, current=current, requested=requested, limit=limit)


def check_running_quota(alloc: Allocation) -> None:
    """Hard quotas hold where capacity is consumed, too (admission already counted it)."""
    quota = getattr(alloc.tenant, "quota", None)
    if quota is None:
        return
    usage = tenant_usage(alloc.tenant, states=list(HOLDING))
    check_quota(quota, usage, nodes=alloc.node_count, gpus=alloc.node_count * alloc.per_node_gpu)
