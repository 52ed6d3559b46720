"""The exit of one node's process of stopped work that runs on several nodes.

Work being stopped (``terminating``: cancelled, preempted, requeued by an operator, failed, past
its walltime) keeps its nodes until its process is gone. A multi-node allocation has a process on
each of its nodes, and each agent reports its own exit: the first report must free only the node
it comes from, while the other nodes' processes may still be leaving. The allocation ends (and its
last nodes are freed) with the last node's exit, the kill after the grace, or the loss of the
nodes still holding it.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from nodes.models import Node, NodeState
from scheduling.actions.release import give_back_borrowed
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.states import State


def exited_on_one_node(*, allocation: Allocation, node: Node, exit_code: int | None, reason: str,
                       now: datetime) -> bool:
    """If ``allocation`` is terminating and still placed on other live nodes, free ``node`` alone
    (its process is gone) and return True: the allocation waits for the others. Else False: the
    exit ends the allocation as usual (lifecycle.allocation_exited)."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update(of=("self",)).get(pk=allocation.pk)
        if alloc.state != State.TERMINATING:
            return False
        others = (Placement.objects.filter(allocation=alloc, kind="assigned").exclude(node=node)
                  .exclude(node__state=NodeState.DOWN).count())
        if not others:
            return False
        removed, _ = Placement.objects.filter(allocation=alloc, node=node).delete()
        if removed:
            give_back_borrowed([node.pk])
            AllocationEvent.objects.create(
                allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                reason=f"exited on {node.name}: {reason} ({exit_code}); {others} more node(s) still leaving"[:255])
        return True
