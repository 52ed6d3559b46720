"""What a policy change would do on the current state, computed by the engine (nothing stored)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling.engine import decide
from scheduling.engine.eligibility import _protections
from scheduling.engine.parse import parse_policy
from scheduling.models import ResourceGroup
from scheduling.scheduler import pending_queue
from scheduling.snapshot import engine_allocation, load_snapshot

PENDING_SHOWN = 50


def policy_preview(group: ResourceGroup, policy: dict[str, Any]) -> dict[str, Any]:
    """Running allocations that become or stop being preemptible, and pending requests whose
    decision changes or that would preempt now, under ``policy`` instead of the group's own."""
    snap = load_snapshot(group)
    now = datetime.now().timestamp()
    old, new = snap.policy, parse_policy({**policy, "paused": group.paused})
    cluster = snap.cluster
    before = _protections(cluster, old, now, False)
    after = _protections(cluster, new, now, False)
    changed = []
    for slot in range(cluster.slots):
        if before[slot] < 0 or (before[slot] == 0) == (after[slot] == 0):
            continue
        changed.append({"id": str(cluster.a_ids[slot]), "now": "protected" if before[slot] else "preemptible",
                        "after": "protected" if after[slot] else "preemptible"})
    pending = []
    for row in pending_queue(group, new.kind, PENDING_SHOWN):
        req = engine_allocation(row)
        a, b = decide(cluster, old, req, now), decide(cluster, new, req, now)
        if (a.outcome, a.code) != (b.outcome, b.code) or b.outcome == "preempt":
            pending.append({"id": row["id"], "now": f"{a.outcome} {a.code}", "after": f"{b.outcome} {b.code}",
                            "victims": [v.id for v in b.victims]})
    return {"changed": changed, "pending": pending}
