"""Pending work in the order the group's policy kind gives it, and what each last heard."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db.models import (
    BooleanField,
    Case,
    F,
    FloatField,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling.models import Allocation, PreemptionDecision, ResourceGroup
from scheduling.passes.fairshare import Standing, standing_by_tenant
from scheduling.passes.holds import holds_of
from scheduling.passes.ordering import queue_key
from scheduling.passes.score import SCORED_WINDOW, QueueScorer
from scheduling.passes.snapshot import ALLOCATION_FIELDS
from scheduling.states import HOLDING, State

# The database's order, so the limit cuts the queue where ordering.queue_key would: the rows
# fetched are then sorted by that key (the one the replay uses too). No session type sorts last.
QUEUE_ORDER: dict[str, list[Any]] = {
    "class_cost": ["-preemption_class", "-priority", "submitted_at", "id"],
    "priority": ["-priority", "submitted_at", "id"],
    "queue": [F("session_type__priority").desc(nulls_last=True), "-priority", "submitted_at", "id"],
    # a request's own rank when it carries one (Symphony), else its session type's
    "rank": [Coalesce("rank", "session_type__rank").desc(nulls_last=True), "submitted_at", "id"],
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
                  standing: dict[int, Standing] | None = None, scorer: QueueScorer | None = None) -> list[dict]:
    """Pending work in the policy's order; submission time is kept across requeues.
    Preemptors already holding nodes (``held``, read here if not given) come first: their nodes
    are being freed for them. A fair_share pass gives ``standing`` (its tenants' tracked shares);
    elsewhere the tracked rows are read. A class_cost queue given a ``scorer`` is ordered by the
    Lattice score (passes/score.py) over its first ``SCORED_WINDOW`` requests in class order.
    Held work, work waiting on a dependency and array tasks past their array's throttle are left
    out: the pass never considers them."""
    if held is None:
        held = set(holds_of(group))
    take = limit + len(held)
    scored = kind == "class_cost" and scorer is not None
    qs = within_throttle(schedulable(group), held)
    if kind == "fair_share":
        standing = standing if standing is not None else standing_by_tenant(group, timezone.now())
        qs = _by_deficit(qs, standing)
    rows = list(qs.order_by(*QUEUE_ORDER[kind]).values(
        *ALLOCATION_FIELDS, "tenant_id", "session_type__priority", "session_type__rank")[
        : max(take, SCORED_WINDOW) if scored else take])
    if scored:
        assert scorer is not None
        rows = scorer.order(rows)
        return ([r for r in rows if r["id"] in held] + [r for r in rows if r["id"] not in held])[:take]
    standing = standing or {}
    return sorted(rows, key=lambda r: (r["id"] not in held, row_key(kind, r, standing)))


def row_key(kind: str, row: dict, standing: dict[int, Standing]) -> tuple:
    """``ordering.queue_key`` of one queue row."""
    mine = standing.get(row["tenant_id"])
    return queue_key(kind, preemption_class=row["preemption_class"], priority=row["priority"],
                     submitted_at=row["submitted_at"], ident=row["id"],
                     session_priority=row["session_type__priority"], rank=row["rank"],
                     session_rank=row["session_type__rank"], starving=bool(mine and mine.starving),
                     deficit=mine.deficit if mine else 0.0)


def schedulable(group: ResourceGroup) -> QuerySet[Allocation]:
    """The group's pending work the pass may consider: not held, no dependency still to be met."""
    return Allocation.objects.filter(resource_group=group, state=State.PENDING, held=False, dependency="")


def within_throttle(qs: QuerySet[Allocation], held: set[int]) -> QuerySet[Allocation]:
    """Tasks of a throttled array (``%N``) only as many as may still start: N less its tasks
    holding nodes now, the first by index (a task already holding nodes being freed for it takes
    its slot first). The pass holds the group's lock and the array's tasks all live in one group,
    so no other pass starts one meanwhile."""
    arrays = dict(qs.filter(array__throttle__isnull=False).values_list("array_id", "array__throttle").distinct())
    if not arrays:
        return qs
    running = Counter(Allocation.objects.filter(array_id__in=list(arrays), state__in=list(HOLDING))
                      .values_list("array_id", flat=True))
    allowed: list[int] = []
    for array_id, throttle in arrays.items():
        slots = throttle - running[array_id]
        if slots <= 0:
            continue
        tasks = list(qs.filter(array_id=array_id, id__in=held).values_list("id", flat=True)[:slots]) if held else []
        tasks += qs.filter(array_id=array_id).exclude(id__in=held).order_by("array_index").values_list(
            "id", flat=True)[:slots - len(tasks)]
        allowed += tasks
    return qs.filter(Q(array__isnull=True) | Q(array__throttle__isnull=True) | Q(id__in=allowed))


def ordered_pending(group: ResourceGroup, kind: str, standing: dict[int, Standing] | None = None) -> Any:
    """The group's pending allocations in the policy's database order (before preemptors holding
    nodes are moved to the front), as the queue view shows them. The pass also leaves out held,
    dependency-waiting and throttled work (``pending_queue``) and, in a class_cost group, orders
    its first requests by the Lattice score."""
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
