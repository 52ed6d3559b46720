"""Nodes held for waiting preemptors: read from the database, reserved in a pass's snapshot."""

from __future__ import annotations

from scheduling.engine import Decision
from scheduling.models import Placement, ResourceGroup
from scheduling.passes.ordering import reserve_free
from scheduling.passes.snapshot import Snapshot
from scheduling.states import State


def holds_of(group: ResourceGroup) -> dict[int, list[str]]:
    """The nodes held for each waiting preemptor of the group."""
    out: dict[int, list[str]] = {}
    for alloc_id, name in Placement.objects.filter(allocation__resource_group=group, kind="held",
                                                   allocation__state=State.PENDING).values_list(
            "allocation_id", "node__name"):
        out.setdefault(alloc_id, []).append(name)
    return out


def reserve_holds(snap: Snapshot, holds: dict[int, list[str]]) -> None:
    """Free capacity on held nodes is kept for their preemptor: others see it as taken."""
    for alloc_id, names in holds.items():
        reserve_free(snap.cluster, f"hold:{alloc_id}", names)


def release_reservation(snap: Snapshot, alloc_id: int) -> None:
    snap.cluster.remove(f"hold:{alloc_id}")


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
