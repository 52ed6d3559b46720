"""Giving nodes back: an allocation's placements freed, borrowed nodes returned home, a decision
marked released once its victims are gone. The lowest layer of the lifecycle (preemption,
lifecycle and admission all end work through here)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from nodes.models import Node
from nodes.protocol import Kill, Terminate
from scheduling.dispatch import agent_command_on_commit
from scheduling.models import Allocation, Placement, PreemptionDecision
from scheduling.pass_asks import request_pass_on_commit
from scheduling.states import State


def allocation_release(*, allocation: Allocation, command: str | None = None) -> None:
    """Free an allocation's nodes (it left holding states); give borrowed nodes back when empty.
    ``command``: "terminate" or "kill" sends that to its agents too."""
    placements = list(allocation.placements.select_related("node"))
    if command is not None:
        allocation_signal(allocation=allocation, command=command, placements=placements)
    allocation.placements.all().delete()
    give_back_borrowed([p.node_id for p in placements if p.node.borrowed_by_id is not None])
    if allocation.preempted_by_id:
        _maybe_released(allocation.preempted_by_id)
    request_pass_on_commit(allocation.resource_group_id)


def allocation_signal(*, allocation: Allocation, command: str, placements: list[Placement] | None = None) -> None:
    """Send "terminate" or "kill" to the agents of the nodes the allocation runs on, after commit."""
    for p in placements if placements is not None else allocation.placements.select_related("node"):
        if p.kind != "assigned":
            continue
        frame = Terminate(allocation=str(allocation.pk)) if command == "terminate" else Kill(allocation=str(allocation.pk))
        agent_command_on_commit(p.node.name, frame)


def give_back_borrowed(node_ids: list[int]) -> None:
    """Borrowed nodes among these go back to their home vCluster once no allocation of the
    borrower runs or holds a place there (the home's own work, even its holds, keeps nothing
    borrowed). Call after deleting placements. The borrowed nodes' rows are locked first (as
    placing on a borrowed node locks them): two borrowers leaving at once would otherwise each
    see the other still there, and a new borrower arriving meanwhile could be left on a node
    marked not borrowed."""
    if not node_ids:
        return
    with transaction.atomic():
        borrowed = list(Node.objects.select_for_update().filter(pk__in=sorted(set(node_ids)),
                                                                borrowed_by__isnull=False)
                        .order_by("pk").values_list("pk", flat=True))
        if not borrowed:
            return
        borrower_there = Placement.objects.filter(node_id=OuterRef("pk"),
                                                  allocation__vcluster_id=OuterRef("borrowed_by_id"))
        Node.objects.filter(pk__in=borrowed).exclude(Exists(borrower_there)).update(borrowed_by=None)


def _maybe_released(decision_id: int) -> None:
    """Mark the decision released once none of its victims is still leaving for it. The decision's
    row is locked first: two victims leaving at once (two agents' reports in two transactions)
    would otherwise each see the other still leaving, and neither would mark it."""
    with transaction.atomic():
        decision = PreemptionDecision.objects.select_for_update().filter(
            pk=decision_id, released_at__isnull=True).first()
        if decision is None:
            return
        # Still leaving for this decision: a victim requeued and started again since is not.
        if not decision.victim_allocations.filter(state__in=(State.CHECKPOINTING, State.TERMINATING),
                                                  preempted_by_id=decision_id).exists():
            decision.released_at = timezone.now()
            decision.save(update_fields=["released_at"])
