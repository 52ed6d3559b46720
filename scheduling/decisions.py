"""What a policy change would do on the current state, computed by the engine (nothing stored)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling.engine import Cluster, decide
from scheduling.engine.eligibility import _protections
from scheduling.engine.model import Policy
from scheduling.engine.parse import parse_policy
from scheduling.models import ResourceGroup, SessionType, VCluster
from scheduling.scheduler import pending_queue
from scheduling.snapshot import engine_allocation, load_snapshot, load_with_edit

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
    codes = _protections(cluster, policy, now, False)
    return {str(cluster.a_ids[slot]): codes[slot] == 0 for slot in range(cluster.slots) if codes[slot] >= 0}
