"""Nodes held for waiting preemptors: read from the database, reserved in a pass's snapshot.
(``PassReservations`` lives with the pure parts of the pass, which the replay shares.)"""

from __future__ import annotations

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

