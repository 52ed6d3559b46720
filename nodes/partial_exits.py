"""The exit of one node's process of stopped work that runs on several nodes.

Work being stopped (``terminating``: cancelled, preempted, requeued by an operator, failed, past
its walltime) keeps its nodes until its process is gone. A multi-node allocation has a process on
each of its nodes, and each agent reports its own exit: the first report must free only the node
it comes from, while the other nodes' processes may still be leaving. The allocation ends (and its
last nodes are freed) with the last node's exit, the kill after the grace, or the loss of the
nodes still holding it. Running work is the same: a node whose process completed is freed while
the others run on; a node whose process failed fails the work, whose other processes are then
stopped as above (before, the first exit ended the work and freed every node, the other
processes still running there, and no one told them to stop).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from nodes.models import Node, NodeState
from nodes.protocol import NOT_STARTED, SIGNALLED
from scheduling.actions.lifecycle import (
    CHECKPOINT_FAILED_ON,
    ONE_NODE_EXITED,
    stopping,
    victim_stopping,
)
from scheduling.actions.release import give_back_borrowed
from scheduling.dispatch import event_on_commit
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.pass_asks import request_pass_on_commit
from scheduling.states import Leaving, State


def exited_on_one_node(*, allocation: Allocation, node: Node, exit_code: int | None, reason: str,
                       now: datetime) -> bool:
    """If ``allocation`` runs or is leaving on other live nodes too, free ``node`` alone (its process
    is gone) and return True: the allocation goes on, or waits for the others. Running work whose
    process failed on this node is failed as a whole: its other processes are told to terminate and
    it ends failed once they are gone. Else False: the exit ends the allocation as usual
    (lifecycle.allocation_exited)."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update(of=("self",)).get(pk=allocation.pk)
        if alloc.state not in (State.RUNNING, State.CHECKPOINTING, State.TERMINATING):
            return False
        if alloc.state != State.TERMINATING and reason in SIGNALLED:
            return False  # an earlier run's exit, reported late: allocation_exited ignores it
        others = (Placement.objects.filter(allocation=alloc, kind="assigned").exclude(node=node)
                  .exclude(node__state=NodeState.DOWN).count())
        if not others:
            return False
        removed, _ = Placement.objects.filter(allocation=alloc, node=node).delete()
        if not removed:
            return True  # this node's exit was applied before
        give_back_borrowed([node.pk])
        request_pass_on_commit(alloc.resource_group_id)  # the freed node may take waiting work now
        going_on = {State.RUNNING: "still running", State.CHECKPOINTING: "still checkpointing"}.get(
            alloc.state, "still leaving")
        AllocationEvent.objects.create(
            allocation=alloc, from_state=alloc.state, to_state=alloc.state,
            reason=f"{ONE_NODE_EXITED}{node.name}: {reason} ({exit_code}); {others} more node(s) {going_on}"[:255],
            node_freed=True)
        if alloc.state == State.TERMINATING or (reason == "completed" and exit_code == 0):
            return True
        if reason == NOT_STARTED and alloc.state == State.CHECKPOINTING:
            # Its run never started here, so the processes that did could not go past its last
            # checkpoint (a rank was missing, and a gang waits for it): they are stopped, and it is
            # requeued to resume as it would have once they are gone (a checkpoint of theirs would
            # be of a run that never was whole).
            never_started_elsewhere(alloc, node.name, now)
            return True
        # The work failed: its exit code is this one, whatever the other processes exit with.
        Allocation.objects.filter(pk=alloc.pk).update(exit_code=exit_code)
        alloc.exit_code = exit_code
        if alloc.state == State.RUNNING:
            victim_stopping(alloc, f"{ONE_NODE_EXITED}{node.name}: {reason} ({exit_code})", now, command="terminate",
                            leaving=Leaving.RANK_FAILED)
        else:  # checkpointing: its checkpoint failed with it, the other processes are killed (as for a failed one)
            victim_stopping(alloc, f"{CHECKPOINT_FAILED_ON}{node.name}: {reason} ({exit_code})", now, command="kill",
                            leaving=Leaving.RANK_FAILED)
        # Now terminating: watchers hear it, as for every other way into it.
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
        return True


def never_started_elsewhere(alloc: Allocation, node_name: str, now: datetime) -> None:
    """Stop the processes of a checkpointing run that never started on ``node_name``; it keeps its
    other nodes until they are gone (their exit, or the kill after the grace), then is requeued."""
    stopping(alloc, f"run {alloc.run} never started on {node_name}", now, command="terminate",
             fields={"leaving": Leaving.NOT_STARTED})
    event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
