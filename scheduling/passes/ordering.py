"""The pure parts of the pass, shared with the replay (scheduling/replay/): the pending queue's
order key, fair-share's below-since step, a preemptor's reservation of its held nodes, and the
reservations a pass has made but not yet put into its snapshot.

No Django here: the pass reads rows from the database and the replay keeps them in memory, and
both order and reserve with these functions, so a replay orders work as the pass would.
"""

from __future__ import annotations

from typing import Any

from scheduling.engine import Cluster, Decision
from scheduling.engine import model as em
from scheduling.engine.cluster import EPS

_LAST = float("inf")


def queue_key(kind: str, *, preemption_class: int, priority: int, submitted_at: Any, ident: Any,
              session_priority: int | None = None, rank: int | None = None, session_rank: int | None = None,
              starving: bool = False, deficit: float = 0.0) -> tuple:
    """The sort key of one pending request in a group of policy ``kind`` (docs/decisions.md, "Queue
    order in the pass"): smaller first. A missing session-type priority or rank sorts after every
    present one. ``submitted_at`` is kept across requeues by the caller."""
    if kind == "class_cost":
        return (-preemption_class, -priority, submitted_at, ident)
    if kind == "priority":
        return (-priority, submitted_at, ident)
    if kind == "queue":
        return (_desc(session_priority), -priority, submitted_at, ident)
    if kind == "rank":
        return (_desc(rank if rank is not None else session_rank), submitted_at, ident)
    if kind == "fair_share":
        return (0 if starving else 1, -deficit, submitted_at, ident)
    raise ValueError(f"unknown policy kind {kind!r}")


def _desc(value: int | None) -> float:
    return _LAST if value is None else -value


def below_since(share: float, fair_share: float, tolerance: float, has_demand: bool,
                since: Any, now: Any) -> Any:
    """A tenant's next ``below_fair_share_since``: kept (or started ``now``) while its share is below
    ``fair_share x tolerance`` and it has work pending; cleared otherwise."""
    below = has_demand and share < fair_share * tolerance - EPS
    return (since if since is not None else now) if below else None


def reserve_free(cluster: Cluster, key: str, names: list[str],
                 made: dict[str, em.Allocation] | None = None) -> None:
    """Free capacity on a preemptor's held nodes is kept for it: others see it as taken (an entry
    ``key`` that is not preemptible and already leaving, removed with ``cluster.remove(key)``).
    ``made``: the reservations made before, by key; one that reserves the same is used again
    (it is immutable), and a new one is kept there."""
    placement = {}
    for name in names:
        i = cluster.node_index.get(name)
        if i is None:
            continue
        # Read as Python floats: the same differences as numpy's, without its per-element cost.
        free = zip(cluster.res_names, cluster.cap[i].tolist(), cluster.used[i].tolist(), strict=True)
        placement[name] = {r: v for r, cap, used in free if (v := cap - used) > 0}
    if not placement:
        return
    hold = made.get(key) if made is not None else None
    if hold is None or hold.placement != placement:
        hold = em.Allocation(id=key, state="terminating", placement=placement, preemptible=False)
        if made is not None:
            made[key] = hold
    cluster.add(hold)


class PassReservations:
    """Nodes reserved during a pass for preemptors, not yet put into the snapshot; with the set of
    all their nodes, so checking a decision against them costs its own nodes, not every reservation."""

    def __init__(self) -> None:
        self.nodes_of: dict[int, list[str]] = {}
        self._nodes: set[str] = set()

    def add(self, alloc_id: int, names: list[str]) -> None:
        self.nodes_of[alloc_id] = names
        self._nodes.update(names)

    def clear(self) -> None:
        self.nodes_of.clear()
        self._nodes.clear()

    def touched_by(self, decision: Decision) -> bool:
        """Whether ``decision`` uses a reserved node (so it must be decided again with the
        reservations in place; one that does not use them stands as it is, since taking capacity
        away elsewhere cannot make its choice worse)."""
        nodes = self._nodes
        return bool(nodes) and not (nodes.isdisjoint(decision.nodes) and nodes.isdisjoint(decision.borrowed))

    def reserve(self, cluster: Cluster) -> None:
        """Put every reservation into ``cluster`` (in the order they were made) and forget them."""
        for alloc_id, names in self.nodes_of.items():
            reserve_free(cluster, f"hold:{alloc_id}", names)
        self.clear()
