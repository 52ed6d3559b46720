"""Pending work in the order the group's policy kind gives it, and what each last heard."""

from __future__ import annotations

from django.db.models import Max

from scheduling.models import Allocation, PreemptionDecision, Quota, ResourceGroup
from scheduling.passes.holds import holds_of
from scheduling.passes.score import SCORED_WINDOW, QueueScorer
from scheduling.passes.snapshot import ALLOCATION_FIELDS
from scheduling.states import State

QUEUE_ORDER = {
    "class_cost": ["-preemption_class", "-priority", "submitted_at", "id"],
    "priority": ["-priority", "submitted_at", "id"],
    "queue": ["-session_type__priority", "-priority", "submitted_at", "id"],
    "rank": ["-session_type__rank", "submitted_at", "id"],
    "fair_share": ["submitted_at", "id"],
}


def pending_queue(group: ResourceGroup, kind: str, limit: int, held: set[int] | None = None,
                  scorer: QueueScorer | None = None) -> list[dict]:
    """Pending work in the policy's order; submission time is kept across requeues.
    Preemptors already holding nodes (``held``, read here if not given) come first: their nodes
    are being freed for them. A class_cost queue given a ``scorer`` is ordered by the Lattice
    score (passes/score.py) over its first ``SCORED_WINDOW`` requests in class order."""
    if held is None:
        held = set(holds_of(group))
    take = limit + len(held)
    scored = kind == "class_cost" and scorer is not None
    rows = list(Allocation.objects.filter(resource_group=group, state=State.PENDING)
                .order_by(*QUEUE_ORDER[kind]).values(*ALLOCATION_FIELDS, "tenant_id")[: max(take, SCORED_WINDOW)
                                                                                       if scored else take])
    if kind == "fair_share":
        rows = _by_deficit(rows)
    elif scored:
        assert scorer is not None
        rows = scorer.order(rows)
        rows = ([r for r in rows if r["id"] in held] + [r for r in rows if r["id"] not in held])[:take]
    return sorted(rows, key=lambda r: r["id"] not in held)


def _by_deficit(rows: list[dict]) -> list[dict]:
    fair = dict(Quota.objects.values_list("tenant__name", "fair_share"))
    return sorted(rows, key=lambda r: (-(fair.get(r["tenant__name"]) or 0.0), r["submitted_at"], r["id"]))


def last_codes(alloc_ids: list[int]) -> dict[int, str]:
    """Each request's latest decision code, in one query for the whole queue: a waiting request's
    decision is stored when its reason changes, not on every pass."""
    latest = PreemptionDecision.objects.filter(preemptor_id__in=alloc_ids).values("preemptor_id").annotate(
        last=Max("id")).values("last")
    return dict(PreemptionDecision.objects.filter(id__in=latest).values_list("preemptor_id", "code"))
