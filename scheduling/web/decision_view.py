"""A decision record as people read it (the console's decision page): its outcome said once in the
title, victims and candidates in id order with each one's tenant, class or priority, size, nodes,
runtime at the decision and cost rounded. The page is the operators'; tenants read decisions
redacted through their jobs' pages and the API (scheduling/selectors.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery

from scheduling.models import Allocation, AllocationEvent, PreemptionDecision
from scheduling.selectors import candidate_allocation

# Which of an allocation's fields orders it under each policy kind: (column heading, field).
STANDING = {"class_cost": ("class", "preemption_class"), "priority": ("priority", "priority"),
            "queue": ("priority", "priority"), "rank": ("rank", "rank"), "fair_share": ("priority", "priority")}


def decision_title(d: PreemptionDecision) -> str:
    """``#12 preempts 2 jobs``, ``#12 fits``, ``#12 waits``: the outcome, once."""
    who = f"#{d.preemptor_id}" if d.preemptor_id else "A request"
    if d.result == "preempt":
        n = len(d.victims or [])
        verb = "would preempt" if d.outcome == "shadow" else "preempts"
        return f"{who} {verb} {n} job{'s' if n != 1 else ''}"
    return f"{who} {'fits' if d.result == 'fits' else 'waits'}"


def _runtime(started: datetime | None, at: datetime) -> str:
    if started is None or started > at:
        return "-"
    minutes = int((at - started).total_seconds() // 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def _state_at(at: datetime) -> dict[str, Subquery]:
    """Each allocation's state at ``at`` (its latest transition at or before it) and when it last
    started running before it (an agent's running-to-running report of where it started is not a
    start)."""
    then = AllocationEvent.objects.filter(allocation=OuterRef("pk"), created_at__lte=at).order_by("-created_at", "-id")
    started = then.filter(to_state="running").exclude(from_state="running")
    return {"state_then": Subquery(then.values("to_state")[:1]), "since_then": Subquery(started.values("created_at")[:1])}


def _as_at(row: dict[str, Any], at: datetime) -> dict[str, Any]:
    """An allocation's facts as at the decision: running then since its latest start before it
    (it may have been preempted and started again since, elsewhere); its nodes only where the run
    it is on now (or last was) is that same run, else unknown here."""
    if row["state_then"] is None:  # no transition recorded before it: the allocation as it is now
        return row
    running = row["state_then"] == "running" and row["since_then"] is not None
    same_run = running and row["started_at"] is not None and row["started_at"] <= at
    return {**row, "started_at": row["started_at"] if same_run else row["since_then"] if running else None,
            "ran_on": row["ran_on"] if same_run else None}


def _rows(entries: list[dict[str, Any]], facts: dict[int, dict[str, Any]], field: str,
          at: datetime) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        if "summary" in e:
            continue
        pk = candidate_allocation(e.get("id"))
        f = facts.get(pk) if pk is not None else None
        rows.append({**e, "pk": pk if str(e.get("id", "")).isdigit() else None, "held_for": pk if (
            pk is not None and not str(e.get("id", "")).isdigit()) else None,
            "tenant": f["tenant__name"] if f else "", "standing": f[field] if f else None,
            "size": f"{f['node_count']} × {f['per_node_gpu']} GPU" if f else "",
            "nodes": ", ".join(f["ran_on"] or []) if f else "", "runtime": _runtime(f["started_at"], at) if f else "-",
            "cost": round(float(e["cost"]), 2) if isinstance(e.get("cost"), (int, float)) else None})
    rows.sort(key=lambda r: (candidate_allocation(r.get("id")) is None, candidate_allocation(r.get("id")) or 0,
                             str(r.get("id"))))
    return rows


def readable_candidates(d: PreemptionDecision) -> dict[str, Any]:
    """The victims and candidates in id order, with their allocations' facts (one query)."""
    kind = (d.policy_snapshot or {}).get("kind", "class_cost")
    heading, field = STANDING.get(kind, STANDING["class_cost"])
    entries = list(d.victims or []) + list(d.candidates or [])
    ids = {pk for e in entries if (pk := candidate_allocation(e.get("id"))) is not None}
    facts = {row["id"]: _as_at(row, d.decided_for) for row in Allocation.objects.filter(pk__in=ids).annotate(
        **_state_at(d.decided_for)).values(
        "id", "tenant__name", "preemption_class", "priority", "rank", "node_count", "per_node_gpu", "ran_on",
        "started_at", "state_then", "since_then")}
    return {"standing": heading, "victims": _rows(list(d.victims or []), facts, field, d.decided_for),
            "candidates": _rows(list(d.candidates or []), facts, field, d.decided_for),
            "others": [e["summary"] for e in d.candidates or [] if "summary" in e]}
