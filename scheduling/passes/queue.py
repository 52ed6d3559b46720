"""Pending work in the order the group's policy kind gives it, and what each last heard."""

from __future__ import annotations

from typing import Any

from django.db.models import BooleanField, Case, FloatField, IntegerField, Max, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling.models import Allocation, PreemptionDecision, ResourceGroup
from scheduling.passes.fairshare import Standing, standing_by_tenant
from scheduling.passes.holds import holds_of
from scheduling.passes.snapshot import ALLOCATION_FIELDS
from scheduling.states import State

QUEUE_ORDER: dict[str, list[Any]] = {
    "class_cost": ["-preemption_class", "-priority", "submitted_at", "id"],
    "priority": ["-priority", "submitted_at", "id"],
    "queue": ["-session_type__priority", "-priority", "submitted_at", "id"],
    # a request's own rank when it carries one (Symphony), else its session type's
    "rank": [Coalesce("rank", "session_type__rank").desc(), "submitted_at", "id"],
    # Starving tenants first, then the furthest below their fair share (see _by_deficit).
    "fair_share": ["fs_starving", "-fs_deficit", "submitted_at", "id"],
}


# The parts of each kind's order, as a reader sees them: (name, column of ``ordered_pending``'s
# rows, whether higher comes first). Ties then go to the earlier submission, then the lower id.
ORDER_TERMS: dict[str, list[tuple[str, str, bool]]] = {
    "class_cost": [("class", "preemption_class", True), ("priority", "priority", True)],
    "priority": [("priority", "priority", True)],
    "queue": [("queue_priority", "session_type__priority", True), ("priority", "priority", True)],
    "rank": [("rank", "q_rank", True)],
    "fair_share": [("starving", "q_starving", True), ("deficit", "fs_deficit", True)],
}


def pending_queue(group: ResourceGroup, kind: str, limit: int, held: set[int] | None = None,
                  standing: dict[int, Standing] | None = None) -> list[dict]:
    """Pending work in the policy's order; submission time is kept across requeues.
    Preemptors already holding nodes (``held``, read here if not given) come first: their nodes
    are being freed for them. A fair_share pass gives ``standing`` (its tenants' tracked shares);
    elsewhere the tracked rows are read."""
    if held is None:
        held = set(holds_of(group))
    qs = ordered_pending(group, kind, standing)
    rows = list(qs.values(*ALLOCATION_FIELDS, "tenant_id")[: limit + len(held)])
    return sorted(rows, key=lambda r: r["id"] not in held)


def ordered_pending(group: ResourceGroup, kind: str, standing: dict[int, Standing] | None = None) -> Any:
    """The group's pending allocations in the policy's order (before preemptors holding nodes are
    moved to the front): the one ordering the pass and the queue view share."""
    qs = Allocation.objects.filter(resource_group=group, state=State.PENDING)
    if kind == "fair_share":
        qs = _by_deficit(qs, standing if standing is not None else standing_by_tenant(group, timezone.now()))
    return qs.order_by(*QUEUE_ORDER[kind])


def queue_rows(group: ResourceGroup, kind: str, fields: tuple[str, ...]) -> list[dict]:
    """Every pending allocation of the group as the pass orders it, with ``fields``, each row's
    ordering terms (``ORDER_TERMS``), ``submitted_at`` and ``holds_nodes``."""
    held = set(holds_of(group))
    qs = ordered_pending(group, kind)
    if kind == "rank":
        qs = qs.annotate(q_rank=Coalesce("rank", "session_type__rank"))
    if kind == "fair_share":
        qs = qs.annotate(q_starving=Case(When(fs_starving=0, then=Value(True)), default=Value(False),
                                         output_field=BooleanField()))
    terms = tuple(column for _, column, _ in ORDER_TERMS[kind])
    rows = list(qs.values(*dict.fromkeys(("id", "submitted_at", *terms, *fields))))
    for row in rows:
        row["holds_nodes"] = row["id"] in held
    return sorted(rows, key=lambda r: not r["holds_nodes"])


def _by_deficit(qs: Any, standing: dict[int, Standing]) -> Any:
    """Ordered in the database, so a starving tenant's request is never cut off by the limit:
    starving tenants' work first, then by deficit (fair share minus share; an untracked tenant
    counts 0), then submission time."""
    starving = [t for t, s in standing.items() if s.starving]
    return qs.annotate(
        fs_starving=Case(When(tenant_id__in=starving, then=Value(0)), default=Value(1), output_field=IntegerField()),
        fs_deficit=Case(*[When(tenant_id=t, then=Value(s.deficit)) for t, s in standing.items()],
                        default=Value(0.0), output_field=FloatField()))


def last_codes(alloc_ids: list[int]) -> dict[int, str]:
    """Each request's latest decision code, in one query for the whole queue: a waiting request's
    decision is stored when its reason changes, not on every pass."""
    latest = PreemptionDecision.objects.filter(preemptor_id__in=alloc_ids).values("preemptor_id").annotate(
        last=Max("id")).values("last")
    return dict(PreemptionDecision.objects.filter(id__in=latest).values_list("preemptor_id", "code"))
