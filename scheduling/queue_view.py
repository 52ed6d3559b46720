"""Where pending work stands: each request's position in its group's queue, how many are ahead,
its ordering key in parts, and which part puts each one ahead.

The order is the pass's own (``passes/queue.py``: preemptors holding nodes first, then the policy
kind's terms, then submission time, then id), so a position is the place the next pass decides it
at. Operators read every request; a tenant member reads only its tenants' requests, with the
others counted in ``ahead`` and ``ahead_by``, never shown.
"""

from __future__ import annotations

from typing import Any

from scheduling.models import Allocation, ResourceGroup
from scheduling.passes.queue import ORDER_TERMS, queue_rows
from scheduling.passes.snapshot import policy_of
from scheduling.permissions import is_operator
from scheduling.selectors import tenant_ids

FIELDS = ("tenant_id", "tenant__name", "user__username", "name", "vcluster__name", "preemption_class", "priority",
          "node_count", "per_node_gpu")


def _terms(kind: str) -> list[tuple[str, str]]:
    """(name, column) of every part of the key, in the order they decide."""
    return [("holds_nodes", "holds_nodes"), *[(name, column) for name, column, _ in ORDER_TERMS[kind]],
            ("submitted_at", "submitted_at"), ("id", "id")]


class GroupQueue:
    """A group's queue as ``user`` may read it: every request for an operator, the user's tenants'
    requests for a member (``visible``: their indexes in the whole queue). Entries are built a page
    at a time (``page``): ``ahead_by`` looks at every request ahead."""

    def __init__(self, group: ResourceGroup, user: Any) -> None:
        self.kind = policy_of(group).kind
        self.rows = queue_rows(group, self.kind, FIELDS)
        self.operator = is_operator(user)
        mine = set(tenant_ids(user))
        self.visible = [i for i, row in enumerate(self.rows) if self.operator or row["tenant_id"] in mine]
        self.terms = _terms(self.kind)

    def page(self, start: int, stop: int) -> list[dict[str, Any]]:
        return [_entry(self.rows, i, self.terms, self.operator) for i in self.visible[start:stop]]


def position_of(alloc: Allocation) -> dict[str, Any] | None:
    """A pending allocation's place in its group's queue (its tenant may read all of it)."""
    kind = policy_of(alloc.resource_group).kind
    rows = queue_rows(alloc.resource_group, kind, FIELDS)
    for i, row in enumerate(rows):
        if row["id"] == alloc.pk:
            return {**_entry(rows, i, _terms(kind), False), "kind": kind}
    return None


def _entry(rows: list[dict[str, Any]], i: int, terms: list[tuple[str, str]], operator: bool) -> dict[str, Any]:
    """Row ``i`` with its position (1 first), the number ahead, its key, and for the rows ahead the
    part of the key that puts each first, counted (``ahead_by``)."""
    row = rows[i]
    ahead_by: dict[str, int] = {}
    for other in rows[:i]:
        for name, column in terms:
            if other[column] != row[column]:
                ahead_by[name] = ahead_by.get(name, 0) + 1
                break
    out = {"id": row["id"], "position": i + 1, "ahead": i, "queued": len(rows),
           "order": [{"term": name, "value": row[column]} for name, column in terms if name != "id"],
           "ahead_by": ahead_by, "name": row["name"], "vcluster": row["vcluster__name"],
           "preemption_class": row["preemption_class"], "priority": row["priority"], "nodes": row["node_count"],
           "gpus_per_node": row["per_node_gpu"]}
    if operator:
        out.update(tenant=row["tenant__name"], user=row["user__username"])
    return out
