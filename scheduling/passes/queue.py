"""Pending work in the order the group's policy kind gives it, and what each last heard."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from django.db.models import (
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
from scheduling.passes import fairshare
from scheduling.passes.fairshare import Standing, standing_by_tenant
from scheduling.passes.holds import holds_of
from scheduling.passes.ordering import queue_key
from scheduling.passes.score import SCORED_WINDOW, QueueScorer
from scheduling.passes.snapshot import ALLOCATION_FIELDS, Snapshot, load_snapshot
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


# The parts of each kind's key as a reader sees them, in the order of ``pass_order``'s ``q_key``
# (a class_cost group's is the scorer's). Ties then go to the earlier submission, then the lower id.
KEY_PARTS: dict[str, tuple[str, ...]] = {
    "class_cost": ("score", "class", "priority", "submitted_at", "id"),
    "priority": ("priority", "submitted_at", "id"),
    "queue": ("queue_priority", "priority", "submitted_at", "id"),
    "rank": ("rank", "submitted_at", "id"),
    "fair_share": ("starving", "deficit", "submitted_at", "id"),
}
_LAST = float("inf")  # an unscored row's score part: after every scored one


def pending_queue(group: ResourceGroup, kind: str, limit: int, held: set[int] | None = None,
                  standing: dict[int, Standing] | None = None, scorer: QueueScorer | None = None,
                  fields: tuple[str, ...] = ()) -> list[dict]:
    """Pending work in the policy's order; submission time is kept across requeues.
    Preemptors already holding nodes (``held``, read here if not given) come first: their nodes
    are being freed for them. A fair_share pass gives ``standing`` (its tenants' tracked shares);
    elsewhere the tracked rows are read. A class_cost queue given a ``scorer`` is ordered by the
    Lattice score (passes/score.py) over its first ``SCORED_WINDOW`` requests in class order.
    Held work, work waiting on a dependency and array tasks past their array's throttle are left
    out: the pass never considers them. ``fields``: more columns for each row (the queue view's)."""
    if held is None:
        held = set(holds_of(group))
    take = limit + len(held)
    scored = kind == "class_cost" and scorer is not None
    qs = within_throttle(schedulable(group), held)
    if kind == "fair_share":
        standing = standing if standing is not None else standing_by_tenant(group, timezone.now())
        qs = _by_deficit(qs, standing)
    rows = list(qs.order_by(*QUEUE_ORDER[kind]).values(*queue_fields(fields))[
        : max(take, SCORED_WINDOW) if scored else take])
    if scored:
        assert scorer is not None
        rows = scorer.order(rows)
        return ([r for r in rows if r["id"] in held] + [r for r in rows if r["id"] not in held])[:take]
    standing = standing or {}
    return sorted(rows, key=lambda r: (r["id"] not in held, row_key(kind, r, standing)))


def queue_fields(fields: tuple[str, ...] = ()) -> list[str]:
    """The columns of a queue row: what the engine, the key and the score read, then ``fields``."""
    return list(dict.fromkeys((*ALLOCATION_FIELDS, "tenant_id", "session_type__priority", "session_type__rank",
                               *fields)))


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


def pass_order(group: ResourceGroup, kind: str, fields: tuple[str, ...] = (),
               now: datetime | None = None, snap: Snapshot | None = None) -> list[dict]:
    """Every request the pass considers, in the order the next pass takes them: ``pending_queue``
    itself, with the pass's scorer in a class_cost group over as many rows as a pass scores
    (``SCORED_WINDOW``; any past those follow in class order, as they would reach a pass). Each
    row carries ``holds_nodes`` and ``q_key``, the key it was sorted by after that (the scorer's in
    a class_cost group, else ``row_key``), ``q_score`` (the Lattice score, or None) with
    ``q_score_detail`` (its terms and weights, ``Score.to_dict()``), ``q_starving``
    and ``q_deficit`` (fair_share). Held work, work waiting on a dependency and array tasks past
    their throttle are not among them, as in the pass. ``snap``: the group's snapshot when the
    caller has loaded it (it is loaded here otherwise, where the order needs it)."""
    now = now or timezone.now()
    held = set(holds_of(group))
    # The standings the pass would measure now (not the last stored ones), so the order shown is
    # the order the next pass starts work in.
    if kind not in ("fair_share", "class_cost"):
        snap = None
    elif snap is None:
        snap = load_snapshot(group)
    tracked = fairshare.track(snap, now, write=False) if snap is not None else {}
    standing = tracked if kind == "fair_share" else {}
    if snap is not None and kind == "class_cost":
        scorer = QueueScorer(snap, now, tracked)
        rows = pending_queue(group, kind, max(SCORED_WINDOW - len(held), 1), held, scorer=scorer, fields=fields)
        if len(rows) >= SCORED_WINDOW:
            seen = {r["id"] for r in rows}
            rows += [r for r in within_throttle(schedulable(group), held).order_by(*QUEUE_ORDER[kind])
                     .values(*queue_fields(fields)) if r["id"] not in seen]
        for r in rows:
            scored = scorer.scores.get(r["id"])
            r["q_score"] = scored.total if scored is not None else None
            r["q_score_detail"] = scored.to_dict() if scored is not None else None
            r["q_key"] = scorer.key(r) if scored is not None else (_LAST, *row_key(kind, r, standing))
    else:
        count = schedulable(group).count()
        rows = pending_queue(group, kind, count, held, standing=standing, fields=fields)
        for r in rows:
            r["q_key"], r["q_score"] = row_key(kind, r, standing), None
    for r in rows:
        r["holds_nodes"] = r["id"] in held
        mine = standing.get(r["tenant_id"])
        r["q_starving"], r["q_deficit"] = bool(mine and mine.starving), mine.deficit if mine else 0.0
    return rows


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
    return dict(_latest(alloc_ids).values_list("preemptor_id", "code"))


def last_codes_and_scores(alloc_ids: list[int]) -> tuple[dict[int, str], dict[int, float]]:
    """``last_codes`` and, for a scored queue, the score each latest record holds (none: not
    scored), read together in one query."""
    codes: dict[int, str] = {}
    scores: dict[int, float] = {}
    for alloc_id, code, scored in _latest(alloc_ids).values_list("preemptor_id", "code", "queue_score"):
        codes[alloc_id] = code
        if isinstance(scored, dict) and isinstance(scored.get("score"), (int, float)):
            scores[alloc_id] = float(scored["score"])
    return codes, scores


def _latest(alloc_ids: list[int]) -> Any:
    """The latest decision record of each of these requests."""
    latest = PreemptionDecision.objects.filter(preemptor_id__in=alloc_ids).values("preemptor_id").annotate(
        last=Max("id")).values("last")
    return PreemptionDecision.objects.filter(id__in=latest)
