"""What the pages chart from the stored usage series (static/js/charts.js draws them with uPlot):
per chart its id, kind, title, the series' URL (the range is added by the script) and the lines
it compares against (a tenant's fair share, quota or monthly budget, in GPUs or GPU-hours)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from nodes.models import Node
from scheduling.models import Quota, ResourceGroup, Tenant, TenantShare
from scheduling.models.usage import UsageSample, UsageScope
from scheduling.passes.budget import budget_period, gpu_hours
from scheduling.usage import UP_STATES
from scheduling.usage_series import RANGES as SERIES_RANGES

RANGES = [("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d"), ("30d", "30 d")]


def chart(kind: str, title: str, key: str, **query: str) -> dict[str, Any]:
    return {"id": f"chart-{kind}-{key}", "kind": kind, "title": title, "attrs": {},
            "src": reverse("api:usage-series") + "?" + urlencode(query)}


def group_charts(group: ResourceGroup) -> list[dict[str, Any]]:
    """A group's utilisation, queue depth and preemptions per hour by reason."""
    q = {"scope": "group", "name": group.name}
    return [chart("utilisation", f"{group.name}: GPUs", group.name, **q),
            chart("queue", f"{group.name}: queue depth", group.name, **q),
            chart("preemptions", f"{group.name}: preemptions per hour by reason", group.name, **q)]


def _capacity(group: ResourceGroup) -> int:
    return int(Node.objects.filter(resource_group=group, state__in=UP_STATES).aggregate(g=Sum("gpu"))["g"] or 0)


def members_charts(group: ResourceGroup) -> list[dict[str, Any]]:
    """The group's vClusters (GPUs in use, borrowed) and its tenants' use against their fair share
    (the share tracked in this group, else the tenant's quota, times the GPUs of nodes not down)."""
    out = [chart("vcluster", f"vCluster {v.name}: GPUs", f"{group.name}-{v.name}", scope="vcluster", name=v.name,
                 resource_group=group.name) for v in group.vclusters.order_by("name")]
    tracked = dict(TenantShare.objects.filter(resource_group=group).values_list("tenant_id", "fair_share"))
    # Tenants with samples within the widest range a chart shows (not every sample kept for a year).
    widest = max(span for span, _step in SERIES_RANGES.values())
    recent = UsageSample.objects.filter(resource_group_id=group.pk, scope=UsageScope.TENANT,
                                        start__gte=timezone.now() - widest)
    ids = set(tracked) | set(recent.values_list("scope_id", flat=True).distinct())
    quotas = dict(Quota.objects.filter(tenant_id__in=ids).values_list("tenant_id", "fair_share"))
    capacity = _capacity(group)
    for tenant in Tenant.objects.filter(pk__in=ids).order_by("name"):
        share = tracked.get(tenant.pk, quotas.get(tenant.pk, 0.0))
        c = chart("share", f"{tenant.name}: GPUs in use against its fair share", f"{group.name}-{tenant.name}",
                  scope="tenant", name=tenant.name, resource_group=group.name)
        c["attrs"] = {"fair-share": round(share * capacity, 3)}
        out.append(c)
    return out


def tenant_charts(tenants: list[Tenant], now: datetime | None = None) -> list[dict[str, Any]]:
    """A tenant's GPUs in use against its quota, and its GPU-hours against its monthly budget
    (with this month's GPU-hours so far, from the accounting)."""
    now = now or timezone.now()
    month, _ = budget_period(now)
    used = gpu_hours([t.pk for t in tenants], month, now)  # the budget penalty's own count
    quotas = {q.tenant_id: q for q in Quota.objects.filter(tenant__in=tenants)}
    out = []
    for tenant in tenants:
        quota = quotas.get(tenant.pk)
        month_hours = used.get(tenant.pk, 0.0)
        q = chart("quota", f"{tenant.name}: GPUs in use against quota", tenant.name, scope="tenant", name=tenant.name)
        q["attrs"] = {"quota": quota.max_gpus if quota else 0}
        b = chart("budget", f"{tenant.name}: GPU-hours used in the range", tenant.name, scope="tenant",
                  name=tenant.name)
        budget = quota.gpu_hours_budget if quota else None
        b["attrs"] = {"budget": budget} if budget is not None else {}
        b["month"] = {"used": round(month_hours, 2), "budget": budget, "since": month}
        out += [q, b]
    return out
