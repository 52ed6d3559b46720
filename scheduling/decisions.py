"""Decisions computed for reading, never carried out: what a request would get now (what-if),
and what a policy or configuration change would do on the current state (preview). The engine
decides; nothing here is stored."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.engine import Cluster, decide
from scheduling.engine import model as em
from scheduling.engine.eligibility import protections
from scheduling.engine.model import Policy
from scheduling.engine.parse import parse_policy
from scheduling.models import Allocation, ResourceGroup, SessionType, Tenant, VCluster
from scheduling.passes.queue import pending_queue
from scheduling.passes.snapshot import engine_allocation, load_snapshot, load_with_edit

PENDING_SHOWN = 50


def policy_preview(group: ResourceGroup, policy: dict[str, Any]) -> dict[str, Any]:
    """Running allocations that become or stop being preemptible, and pending requests whose
    decision changes or that would preempt now, under ``policy`` instead of the group's own."""
    snap = load_snapshot(group)
    return _compare(group, snap.cluster, snap.policy, snap.cluster,
                    parse_policy({**policy, "paused": group.paused}))


def config_preview(group: ResourceGroup, edited: VCluster | SessionType) -> dict[str, Any]:
    """The same, for an unsaved change to one of the group's vClusters or session types."""
    stored, changed = load_with_edit(group, edited)
    return _compare(group, stored.cluster, stored.policy, changed.cluster, stored.policy)


def _compare(group: ResourceGroup, old_cluster: Cluster, old: Policy, new_cluster: Cluster,
             new: Policy) -> dict[str, Any]:
    now = datetime.now().timestamp()
    before = _preemptible(old_cluster, old, now)
    after = _preemptible(new_cluster, new, now)
    changed = [{"id": ident, "now": "preemptible" if was else "protected",
                "after": "preemptible" if after[ident] else "protected"}
               for ident, was in sorted(before.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)
               if ident in after and after[ident] != was]
    pending = []
    for row in pending_queue(group, new.kind, PENDING_SHOWN):
        req = engine_allocation(row)
        a, b = decide(old_cluster, old, req, now), decide(new_cluster, new, req, now)
        if (a.outcome, a.code) != (b.outcome, b.code) or b.outcome == "preempt":
            pending.append({"id": row["id"], "now": f"{a.outcome} {a.code}", "after": f"{b.outcome} {b.code}",
                            "victims": [v.id for v in b.victims]})
    return {"changed": changed, "pending": pending}


def _preemptible(cluster: Cluster, policy: Policy, now: float) -> dict[str, bool]:
    """Each running allocation's id: whether no protection keeps it from being preempted."""
    codes = protections(cluster, policy, now, False)
    return {str(cluster.a_ids[slot]): codes[slot] == 0 for slot in range(cluster.slots) if codes[slot] >= 0}


def what_if(group: ResourceGroup, tenant: Tenant, fields: dict[str, Any], username: str) -> dict[str, Any]:
    """The decision a valid request (the model's fields) would get now, as its tenant may see it."""
    snap = load_snapshot(group)
    req = _request(fields, tenant.name, username)
    answer = decide(snap.cluster, snap.policy, req, timezone.now().timestamp()).to_dict()
    # The engine names the request by its id; this one has none yet.
    answer["explanation"] = "This request" + answer["explanation"].removeprefix(req.id)
    return _visible(answer, tenant.pk)


def _request(fields: dict[str, Any], tenant: str, user: str) -> em.Allocation:
    constraints = fields["constraints"] or {}
    return em.Allocation(
        id="what-if", tenant=tenant, user=user,
        vcluster=fields["vcluster"].name if fields["vcluster"] else None,
        session_type=fields["session_type"].name if fields["session_type"] else None,
        preemption_class=fields["preemption_class"], priority=fields["priority"], checkpoint=fields["checkpoint"],
        checkpoint_minutes=fields["checkpoint_minutes"], walltime_minutes=fields["walltime_minutes"],
        sensitive=fields["sensitive"], preemptible=fields["preemptible"], exclusive=fields["exclusive"],
        nodes=fields["node_count"],
        per_node={r: float(fields[f"per_node_{r}"]) for r in ("gpu", "cpu", "memory") if fields[f"per_node_{r}"]},
        labels=dict(constraints.get("labels") or {}), same=constraints.get("same"), value=fields["value"],
        preemptive=fields["preemptive"], rank=fields.get("rank"),
    )


def _visible(decision: dict[str, Any], tenant_id: int) -> dict[str, Any]:
    """A what-if answer for a tenant: its own allocations by id, others only counted."""
    own = {str(i) for i in Allocation.objects.filter(
        tenant_id=tenant_id, pk__in=[int(c["id"]) for c in decision["candidates"] if c["id"].isdigit()]
    ).values_list("pk", flat=True)}
    victims = [v if v["id"] in own else {"id": None, "tenant": "another tenant", "reason": v["reason"],
                                         "action": v["action"]} for v in decision["victims"]]
    return {**decision, "victims": victims, "candidates": [c for c in decision["candidates"] if c["id"] in own],
            "other_candidates": sum(1 for c in decision["candidates"] if c["id"] not in own)}
