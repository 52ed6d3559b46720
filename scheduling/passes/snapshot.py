"""Rows -> engine types: the one loader of a resource group's snapshot.

A fixed number of queries whatever the size (asserted in a test): nodes,
vClusters, session types, tenants with quotas, holding allocations, their
placements.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery

from nodes.models import Node
from scheduling.engine import Cluster
from scheduling.engine import model as em
from scheduling.engine.parse import parse_policy
from scheduling.models import (
    Allocation,
    Placement,
    ResourceGroup,
    SessionType,
    Tenant,
    TenantShare,
    VCluster,
)
from scheduling.passes.quota_book import QuotaBook
from scheduling.states import HOLDING

RES = ("gpu", "cpu", "memory")


def ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def policy_of(group: ResourceGroup) -> em.Policy:
    """The engine policy of a group; the group's own ``paused`` switch wins."""
    raw = {k: v for k, v in (group.policy or {}).items() if k != "paused"}
    raw.setdefault("kind", "class_cost")
    raw["paused"] = group.paused
    return parse_policy(raw)


def _resources(row: dict[str, Any], prefix: str = "") -> dict[str, float]:
    return {r: float(row[prefix + r]) for r in RES if row[prefix + r]}


def engine_allocation(row: dict[str, Any], placement: dict[str, dict[str, float]] | None = None,
                      held: tuple[str, ...] = ()) -> em.Allocation:
    """One allocation row (``values()`` of ALLOCATION_FIELDS) as the engine sees it."""
    return em.Allocation(
        id=str(row["id"]), tenant=row["tenant__name"], user=row["user__username"],
        vcluster=row["vcluster__name"], session_type=row["session_type__name"],
        preemption_class=row["preemption_class"], priority=row["priority"], checkpoint=row["checkpoint"],
        checkpoint_minutes=row["checkpoint_minutes"], last_checkpoint_at=ts(row["last_checkpoint_at"]),
        submitted_at=ts(row["submitted_at"]), started_at=ts(row["started_at"]),
        walltime_minutes=row["walltime_minutes"], sensitive=row["sensitive"], preemptible=row["preemptible"],
        exclusive=row["exclusive"], forced=row["forced"], backfill=row["backfill"],
        protected_until=ts(row["protected_until"]), preempted_count=row["preempted_count"],
        state=row["state"] if row["state"] in ("running", "checkpointing", "terminating") else "running",
        placement=placement or {}, nodes=row["node_count"],
        per_node={r: float(row[f"per_node_{r}"]) for r in RES if row[f"per_node_{r}"]},
        labels=dict((row["constraints"] or {}).get("labels") or {}),
        same=(row["constraints"] or {}).get("same"), value=row["value"], preemptive=row["preemptive"],
        held_nodes=tuple(sorted(held)), rank=row["rank"],
    )


ALLOCATION_FIELDS = (
    "id", "tenant__name", "user__username", "vcluster__name", "session_type__name", "preemption_class",
    "priority", "checkpoint", "checkpoint_minutes", "last_checkpoint_at", "submitted_at", "started_at",
    "walltime_minutes", "sensitive", "preemptible", "exclusive", "forced", "backfill", "protected_until",
    "preempted_count", "state", "node_count", "per_node_gpu", "per_node_cpu", "per_node_memory",
    "constraints", "value", "preemptive", "rank",
)


class Snapshot:
    """The engine cluster of one resource group plus what the scheduler needs around it."""

    def __init__(self, group: ResourceGroup, cluster: Cluster, node_ids: dict[str, int]) -> None:
        self.group = group
        self.cluster = cluster
        self.node_ids = node_ids
        self.node_names = {pk: name for name, pk in node_ids.items()}
        self.policy = policy_of(group)
        # Kept between passes (snapshot_cache): the pass's writer tag, the database snapshot it was
        # loaded from, when, and whether this pass left it different from the database.
        self.writer = ""
        self.pg_snapshot = ""
        self.kept_since = 0.0
        self.dirty = False
        # The tenants' quota use, for a pass (snapshot_cache loads it with the snapshot).
        self.quotas: QuotaBook | None = None
        self.tenant_ids: dict[str, int] | None = None  # tenant name -> id (passes/fairshare.py)


def load_snapshot(group: ResourceGroup) -> Snapshot:
    return _build(group, _read(group))


def load_with_edit(group: ResourceGroup, edited: VCluster | SessionType) -> tuple[Snapshot, Snapshot]:
    """The group's snapshot as stored and as it would be with ``edited`` (an unsaved change to one
    of its vClusters or session types, read under its stored name), from one read of the rows."""
    rows = _read(group)
    return _build(group, rows), _build(group, rows, edited)


@dataclass(frozen=True)
class _Rows:
    nodes: list[dict[str, Any]]
    vclusters: list[VCluster]
    session_types: list[SessionType]
    tenants: list[em.Tenant]
    holding: list[em.Allocation]


def _read(group: ResourceGroup) -> _Rows:
    nodes = list(Node.objects.filter(resource_group=group).values(
        "id", "name", "gpu", "cpu", "memory", "labels", "vcluster__name", "borrowed_by__name", "state",
        "gpu_healthy"))
    for n in nodes:  # fewer healthy GPUs than registered: new work sees only the healthy ones
        if n["gpu_healthy"] is not None:
            n["gpu"] = min(n["gpu"], n["gpu_healthy"])
    # Starvation is tracked per group (passes/fairshare.py): each tenant's row for this group.
    below = TenantShare.objects.filter(tenant=OuterRef("pk"), resource_group=group).values("below_since")[:1]
    tenants = [em.Tenant(name=t["name"], fair_share=t["quota__fair_share"] or 0.0,
                         burst_allowance=t["quota__burst_allowance"], below_fair_share_since=ts(t["below"]))
               for t in Tenant.objects.annotate(below=Subquery(below)).values(
                   "name", "quota__fair_share", "quota__burst_allowance", "below")]
    return _Rows(nodes, list(VCluster.objects.filter(resource_group=group)),
                 list(SessionType.objects.filter(resource_group=group)), tenants, list(holding(group).values()))


def _build(group: ResourceGroup, rows: _Rows, edited: VCluster | SessionType | None = None) -> Snapshot:
    vc_rows, st_rows = list(rows.vclusters), list(rows.session_types)
    if edited is not None:
        stored: list[Any] = vc_rows if isinstance(edited, VCluster) else st_rows
        for i, row in enumerate(stored):
            if row.pk == edited.pk:
                stored[i] = copy.copy(edited)
                stored[i].name = row.name
    vclusters = [em.VCluster(name=v.name, type=v.type, allow_lending=v.allow_lending,
                             allow_borrowing=v.allow_borrowing, max_borrow_pct=v.max_borrow_pct,
                             allow_aggressive_preemption=v.allow_aggressive_preemption) for v in vc_rows]
    engine_nodes = [em.Node(name=n["name"], capacity=_resources(n), labels=n["labels"] or {},
                            vcluster=n["vcluster__name"], borrowed_by=n["borrowed_by__name"], state=n["state"])
                    for n in rows.nodes]
    cluster = Cluster(engine_nodes, rows.holding, rows.tenants, vclusters,
                      [session_type_of(st) for st in st_rows])
    return Snapshot(group, cluster, {n["name"]: n["id"] for n in rows.nodes})


def holding(group: ResourceGroup, ids: list[int] | None = None) -> dict[int, em.Allocation]:
    """The group's allocations that hold capacity (all, or those of ``ids``), with their
    placements, in two queries."""
    rows = Allocation.objects.filter(resource_group=group, state__in=HOLDING)
    places = Placement.objects.filter(allocation__resource_group=group, allocation__state__in=HOLDING,
                                      kind="assigned")
    if ids is not None:
        rows, places = rows.filter(pk__in=ids), places.filter(allocation_id__in=ids)
    placements: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for p in places.values("allocation_id", "node__name", *RES):
        placements[p["allocation_id"]][p["node__name"]] = _resources(p)
    return {r["id"]: engine_allocation(r, placements[r["id"]]) for r in rows.values(*ALLOCATION_FIELDS)
            if placements.get(r["id"])}


def session_type_of(st: SessionType) -> em.SessionType:
    preempts = []
    for entry in st.preempts or []:
        if isinstance(entry, str):
            preempts.append(em.Preempts(queue=entry))
        else:
            preempts.append(em.Preempts(queue=entry["queue"], pref=int(entry.get("pref", 0))))
    return em.SessionType(name=st.name, priority=st.priority, preemptive=st.preemptive,
                          preemptable=st.preemptable, preempts=tuple(preempts), rank=st.rank, scope=st.scope,
                          criteria=st.criteria, mode=st.mode or None,
                          max_preemptions_per_job=st.max_preemptions_per_job)
