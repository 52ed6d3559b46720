"""Reports that arrive late: those of an earlier run of the allocation, and the exit of work that
ended while its agent was out of touch, reported after it was declared lost.

An agent names the run (its start frame's ``run``) each report is about. A report of an earlier
run than the allocation's current one changes nothing: it was requeued and started again since, and
that old process's exit, start or checkpoint says nothing of the run now under way (whose nodes it
may share). Agents that name no run (older ones) are judged by state, as before.

A node's work is declared lost when its agent's hello no longer lists it, or when
the node went Down; it is failed and, by its requeue policy, a fresh copy is
queued. If the agent's report that the work had in fact exited arrives after
that, the record is corrected: completed when it completed (else failed with its
exit code), and the copy queued for the loss is cancelled while it is still
pending, unless the policy would have requeued this failure too.

This is the one change out of a final state, and it can only follow a loss
declared for the node that reports the exit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from nodes.models import Node
from nodes.partial_exits import exited_on_one_node
from nodes.protocol import NOT_STARTED, Exited, Report, encode
from scheduling.actions.admission import allocation_cancel
from scheduling.actions.lifecycle import allocation_exited
from scheduling.actions.starts import start_again
from scheduling.dispatch import event_on_commit
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.states import HOLDING, State


def of_an_earlier_run(*, allocation: Allocation, node_name: str, frame: Report) -> bool:
    """Whether ``frame`` is about an earlier run than ``allocation``'s own; an exit of one is
    written to the history (its process is gone) and changes nothing else."""
    if not frame.run:
        return False
    # Read under the row's lock, which the report's action takes next anyway: no start of another
    # run can commit between this comparison and that action.
    allocation.run, allocation.state = (Allocation.objects.select_for_update().values_list("run", "state")
                                        .get(pk=allocation.pk))
    if not allocation.run or frame.run == allocation.run:
        return False
    if isinstance(frame, Exited):
        AllocationEvent.objects.create(
            allocation=allocation, from_state=allocation.state, to_state=allocation.state,
            reason=f"exit of run {frame.run} on {node_name} ignored: {frame.reason} ({frame.exit_code}); "
                   f"run {allocation.run} is its own"[:255])
    return True


def lost_at_hello(node_name: str) -> str:
    return f"not running on {node_name} after reconnect"


def lost_node_down(node_name: str) -> str:
    return f"node {node_name} is down"


def allocation_late_exit(*, allocation: Allocation, node_name: str, exit_code: int | None, reason: str,
                         now: datetime) -> bool:
    """Correct ``allocation`` by an exit reported from ``node_name`` if its failure was a loss
    declared for that node. Returns whether it did (else the exit is handled as usual)."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.FAILED:
            return False
        failure = (AllocationEvent.objects.filter(allocation=alloc, to_state=State.FAILED)
                   .exclude(from_state=State.FAILED).order_by("-id").first())
        if (failure is None or failure.from_state not in HOLDING
                or failure.reason not in (lost_at_hello(node_name), lost_node_down(node_name))
                or AllocationEvent.objects.filter(allocation=alloc, id__gt=failure.pk,
                                                  from_state=State.FAILED).exists()):
            return False  # failed for another reason, or corrected already
        done = reason == "completed" and exit_code == 0
        to = State.COMPLETED if done else State.FAILED
        Allocation.objects.filter(pk=alloc.pk, state=State.FAILED).update(state=to, exit_code=exit_code,
                                                                          state_changed_at=now)
        AllocationEvent.objects.create(allocation=alloc, from_state=State.FAILED, to_state=to,
                                       reason=f"corrected: exited {reason} ({exit_code}) on {node_name} "
                                              f"while out of touch"[:255])
        if done or alloc.requeue_policy != "always":
            for copy in Allocation.objects.select_for_update().filter(requeued_from=alloc, state=State.PENDING):
                allocation_cancel(allocation=copy, actor=cast(AbstractBaseUser, AnonymousUser()),
                                  reason=f"not needed: {alloc.pk} {to} before it was lost"[:255])
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": to}, alloc.tenant_id)
    return True


def only_an_earlier_run_here(*, placement: Placement, node: Node, now: datetime) -> list[dict[str, Any]]:
    """A hello lists only an earlier run of the work placed on ``node`` (its process still
    alive: the hello kills it). The agent starts a run only once the earlier one is gone, so the
    run now placed here never started: running work gets its start again (frames to send); work
    asked to checkpoint has nothing to save there (``not_started``); work being stopped is gone
    from there. Before, the two last were declared lost and failed.

    The hello read the placement before it came to judge it: read again under the row's lock, as
    another node's report or a pass may have moved the work on meanwhile (a later run placed here
    since must not be judged as the one the agent never started)."""
    seen = placement.allocation
    alloc = Allocation.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=seen.pk)
    if (alloc.run != seen.run or alloc.state not in HOLDING
            or not Placement.objects.filter(pk=placement.pk).exists()):
        return []  # moved on, or left this node: the next hello judges what is placed here then
    if alloc.state == State.RUNNING:
        return [encode(start_again(alloc, node.name, placement.pk))]
    AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                   reason=f"run {alloc.run} never started on {node.name}: its agent "
                                          f"still ran an earlier run at reconnect"[:255])
    if not exited_on_one_node(allocation=alloc, node=node, exit_code=None, reason=NOT_STARTED, now=now):
        allocation_exited(allocation=alloc, exit_code=None, reason=NOT_STARTED, now=now)
    return []
