"""Where pending work stands: each request's position in its group's queue, how many are ahead,
its ordering key in parts, and which part puts each one ahead.

The order is the pass's own (``passes/queue.py``'s ``pass_order``: the pass's ``pending_queue``,
with the Lattice score in a class_cost group), so position 1 is the request the next pass decides
first. Work the pass leaves out (held, waiting on a dependency, an array task past its throttle)
is listed after the queue without a position; its reason says why. Operators read every request;
a tenant member reads only its tenants' requests, with the others counted in ``queued``,
``ahead`` and ``ahead_by``, never shown.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q

from scheduling.engine.score import explain_score
from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.queue import KEY_PARTS, pass_order
from scheduling.passes.snapshot import policy_of
from scheduling.permissions import is_operator
from scheduling.queue_terms import term_words
from scheduling.selectors import tenant_ids
from scheduling.states import State

FIELDS = ("name", "array_id", "array_index")
ASIDE_FIELDS = ("id", "tenant_id", "tenant__name", "user__username", "name", "vcluster__name", "preemption_class",
                "priority", "node_count", "per_node_gpu", "submitted_at", "array_id", "array_index")


class GroupQueue:
    """A group's queue as ``user`` may read it: every request for an operator, the user's tenants'
    requests for a member (no user: every request, redacted as for a member; ``visible``: first the positioned ones, by position, then those set
    aside). Entries are built a page at a time (``page``): ``ahead_by`` looks at every request ahead."""

    def __init__(self, group: ResourceGroup, user: Any, now: datetime | None = None) -> None:
        self.kind = policy_of(group).kind
        self.rows = pass_order(group, self.kind, FIELDS, now)
        self.aside = aside_rows(group, {r["id"] for r in self.rows})
        self.operator = is_operator(user)
        every = [*self.rows, *self.aside]
        mine = set(tenant_ids(user)) if user is not None else {row["tenant_id"] for row in every}
        self.visible = [i for i, row in enumerate(every) if self.operator or row["tenant_id"] in mine]

    def page(self, start: int, stop: int) -> list[dict[str, Any]]:
        return [self.entry(i) for i in self.visible[start:stop]]

    def entry(self, i: int) -> dict[str, Any]:
        if i < len(self.rows):
            return _entry(self.rows, i, self.kind, self.operator)
        return _aside(self.aside[i - len(self.rows)], len(self.rows), self.operator)

    def find(self, alloc_id: int) -> dict[str, Any] | None:
        for i, row in enumerate([*self.rows, *self.aside]):
            if row["id"] == alloc_id:
                return {**self.entry(i), "kind": self.kind}
        return None


def aside_rows(group: ResourceGroup, queued: set[int]) -> list[dict[str, Any]]:
    """Pending work the pass leaves out: held, waiting on a dependency, throttled array tasks."""
    qs = Allocation.objects.filter(resource_group=group, state=State.PENDING).filter(
        Q(held=True) | ~Q(dependency="") | Q(array__throttle__isnull=False))
    return [r for r in qs.order_by("submitted_at", "id").values(*ASIDE_FIELDS) if r["id"] not in queued]


def position_of(alloc: Allocation) -> dict[str, Any] | None:
    """A pending allocation's place in its group's queue (its tenant may read all of it), or its
    entry without a position when the pass leaves it out."""
    return GroupQueue(alloc.resource_group, None).find(alloc.pk)


def _shown(kind: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of the key as a reader sees them (the class, not its negation), ``id`` left out."""
    values = {"holds_nodes": row["holds_nodes"], "class": row["preemption_class"], "priority": row["priority"],
              "score": None if row["q_score"] is None else round(row["q_score"], 4),
              "queue_priority": row["session_type__priority"],
              "rank": row["rank"] if row["rank"] is not None else row["session_type__rank"],
              "starving": row["q_starving"], "deficit": round(row["q_deficit"], 4),
              "submitted_at": row["submitted_at"]}
    return [{"term": name, "value": values[name]} for name in ("holds_nodes", *KEY_PARTS[kind]) if name != "id"]


def in_words(place: dict[str, Any] | None) -> dict[str, Any] | None:
    """A place as the job page shows it: each part of the key and each ``ahead_by`` part named in
    words, yes or no for a flag (``order`` as (words, value, is_time), ``ahead_by`` as (words, n))."""
    if place is None:
        return None
    order = [(term_words(t["term"]),
              ("yes" if t["value"] else "no") if isinstance(t["value"], bool) else t["value"],
              t["term"] == "submitted_at") for t in place["order"]]
    ahead = [(term_words(term), n) for term, n in place["ahead_by"].items()]
    return {**place, "order": order, "ahead_by": ahead}


def _entry(rows: list[dict[str, Any]], i: int, kind: str, operator: bool) -> dict[str, Any]:
    """Row ``i`` with its position (1 first), the number ahead, its key, and for the rows ahead the
    part of the key that puts each first, counted (``ahead_by``): the first part where the key the
    pass sorted by differs."""
    row = rows[i]
    names = ("holds_nodes", *KEY_PARTS[kind])
    key = (not row["holds_nodes"], *row["q_key"])
    ahead_by: dict[str, int] = {}
    for other in rows[:i]:
        theirs = (not other["holds_nodes"], *other["q_key"])
        for name, mine, them in zip(names, key, theirs, strict=True):
            if mine != them:
                ahead_by[name] = ahead_by.get(name, 0) + 1
                break
    return {**_common(row, operator), "position": i + 1, "ahead": i, "queued": len(rows),
            "order": _shown(kind, row), "ahead_by": ahead_by, "score": row["q_score"],
            "score_detail": explain_score(row.get("q_score_detail"))}


def _aside(row: dict[str, Any], queued: int, operator: bool) -> dict[str, Any]:
    return {**_common(row, operator), "position": None, "ahead": None, "queued": queued, "order": [],
            "ahead_by": {}, "score": None, "score_detail": None}


def _common(row: dict[str, Any], operator: bool) -> dict[str, Any]:
    out = {"id": row["id"], "name": row["name"], "vcluster": row["vcluster__name"],
           "preemption_class": row["preemption_class"], "priority": row["priority"], "nodes": row["node_count"],
           "gpus_per_node": row["per_node_gpu"], "array": row["array_id"], "array_index": row["array_index"]}
    if operator:
        out.update(tenant=row["tenant__name"], user=row["user__username"])
    return out
