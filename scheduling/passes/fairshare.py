"""Fair-share starvation (the YTsaurus model): each tenant's standing in a resource group.

Every pass of a ``fair_share`` group (and so every periodic sweep, which runs a pass on every
group) measures each tenant's dominant usage share from the snapshot it already holds in memory
(the largest of used / capacity over gpu, cpu and memory, counting what runs and what is still
leaving), and keeps one ``TenantShare`` row per (tenant, group): ``below_since`` is set when the
share drops below ``fair_share x tolerance`` while the tenant has work pending in the group, and
cleared when it recovers or asks for nothing more (as in YTsaurus, where a fair share never
exceeds demand, a tenant asking for nothing is not starved). The engine's gate reads
it as the tenant's ``below_fair_share_since``; starving and aggressively starving are derived from
it and the policy's timeouts wherever they are shown. Rows are written only when something moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Max

from scheduling.engine import model as em
from scheduling.engine.cluster import EPS
from scheduling.models import Allocation, PreemptionDecision, ResourceGroup, Tenant, TenantShare
from scheduling.models.records import Execution
from scheduling.passes.ordering import below_since
from scheduling.passes.snapshot import Snapshot, policy_of, ts
from scheduling.states import State

STATUSES = ("normal", "below_fair_share", "starving", "aggressively_starving")


@dataclass(frozen=True)
class Standing:
    """A tenant's standing in a group as last tracked."""

    tenant: str
    share: float
    fair_share: float
    below_since: datetime | None
    status: str
    updated_at: datetime | None = None

    @property
    def deficit(self) -> float:
        return self.fair_share - self.share

    @property
    def status_text(self) -> str:
        """The status in words, as the group page shows it ("below fair share")."""
        return self.status.replace("_", " ")

    @property
    def starving(self) -> bool:
        return self.status in ("starving", "aggressively_starving")

    def to_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "share": round(self.share, 6), "fair_share": self.fair_share,
                "status": self.status, "starving": self.starving,
                "below_since": self.below_since.isoformat() if self.below_since else None,
                "updated_at": self.updated_at.isoformat() if self.updated_at else None}


def status_of(below_since: datetime | None, policy: em.Policy, now: datetime) -> str:
    """normal, below_fair_share, starving or aggressively_starving, as the engine's gate would
    judge at ``now`` (aggressive only where the policy enables it)."""
    if below_since is None:
        return "normal"
    waited = (now - below_since).total_seconds()
    if waited < policy.starvation_timeout_s - EPS:
        return "below_fair_share"
    if policy.enable_aggressive and waited >= policy.aggressive_starvation_timeout_s - EPS:
        return "aggressively_starving"
    return "starving"


def track(snap: Snapshot, now: datetime, write: bool = True) -> dict[int, Standing]:
    """Measure every tenant's share on ``snap``, write what moved, give the engine each tenant's
    ``below_fair_share_since`` and answer the standings by tenant id (for the queue's order, and
    a class_cost queue's fair-share term). Only a fair_share group starves: elsewhere the share is
    kept with no ``below_since`` (status normal) and no preemption backoff is read. With
    ``write=False`` nothing is stored nor set on the snapshot: the standings a pass would use now
    (the queue's view reads them, so the order it shows is the order the pass starts work in)."""
    cluster, policy, group = snap.cluster, snap.policy, snap.group
    starvation = policy.kind == "fair_share"
    shares = cluster.tenant_shares()
    if snap.tenant_ids is None:  # kept with the snapshot: a change to tenants reloads it
        snap.tenant_ids = dict(Tenant.objects.values_list("name", "id"))
    rows = {r.tenant_id: r for r in TenantShare.objects.filter(resource_group=group)}
    demand = set(Allocation.objects.filter(resource_group=group, state=State.PENDING)
                 .values_list("tenant_id", flat=True).distinct()) if starvation else set()
    out: dict[int, Standing] = {}
    changed: list[TenantShare] = []
    for name, tenant in cluster.tenants.items():
        tenant_id = snap.tenant_ids.get(name)
        idx = cluster.tenant_index.get(name)
        share = float(shares[idx]) if idx is not None and idx < len(shares) else 0.0
        row = rows.get(tenant_id) if tenant_id is not None else None
        if tenant_id is None or (row is None and tenant.fair_share <= 0 and share <= 0):
            continue
        since = below_since(share, tenant.fair_share, policy.tolerance, starvation and tenant_id in demand,
                            row.below_since if row is not None else None, now)
        if row is None:
            row = TenantShare(tenant_id=tenant_id, resource_group=group, below_since=None, updated_at=now)
            rows[tenant_id] = row
        if (row.pk is None or row.below_since != since or abs(row.share - share) > 1e-9
                or row.fair_share != tenant.fair_share):
            row.share, row.fair_share, row.below_since, row.updated_at = share, tenant.fair_share, since, now
            changed.append(row)
        if write:
            cluster.set_below_since(name, ts(since))
        out[tenant_id] = Standing(name, share, tenant.fair_share, since, status_of(since, policy, now), row.updated_at)
    if not write:
        return out
    _write(changed)
    if starvation:
        cluster.last_preemption_at = last_preemption_at(group, policy, now)
    return out


def _write(rows: list[TenantShare]) -> None:
    new = [r for r in rows if r.pk is None]
    old = [r for r in rows if r.pk is not None]
    if new:
        TenantShare.objects.bulk_create(new, ignore_conflicts=True)
    if old:
        TenantShare.objects.bulk_update(old, ["share", "fair_share", "below_since", "updated_at"])


def last_preemption_at(group: ResourceGroup, policy: em.Policy, now: datetime) -> float | None:
    """When the group last started work by preemption, if within the backoff window (YTsaurus's
    ``preemptive_scheduling_backoff``: at most one such start per window). Bounded by the
    records' time index, so it reads only the last few seconds."""
    window = now - timedelta(seconds=policy.preemptive_scheduling_backoff_s)
    last = PreemptionDecision.objects.filter(
        resource_group=group, result="preempt", outcome=Execution.EXECUTED, created_at__gte=window,
    ).aggregate(last=Max("decided_for"))["last"]
    return ts(last)


def noted_preemption(snap: Snapshot, moment: datetime) -> None:
    """A pass that just started work by preemption: later requests of the pass see the backoff."""
    snap.cluster.last_preemption_at = moment.timestamp()


def standings(group: ResourceGroup, now: datetime, policy: em.Policy | None = None) -> list[Standing]:
    """What the group's page, the API and the metrics show: the tracked rows, by tenant name."""
    policy = policy or policy_of(group)
    return [Standing(r.tenant.name, r.share, r.fair_share, r.below_since, status_of(r.below_since, policy, now),
                     r.updated_at)
            for r in TenantShare.objects.filter(resource_group=group).select_related("tenant").order_by("tenant__name")]


def standing_by_tenant(group: ResourceGroup, now: datetime) -> dict[int, Standing]:
    """The tracked standings keyed by tenant id (for the queue's order outside a pass)."""
    policy = policy_of(group)
    return {r.tenant_id: Standing(r.tenant.name, r.share, r.fair_share, r.below_since,
                                  status_of(r.below_since, policy, now), r.updated_at)
            for r in TenantShare.objects.filter(resource_group=group).select_related("tenant")}
