"""Batch verbs: hold and release pending work, requeue running work (operators), and the same
verbs on a whole array. Each is one transaction, audited with its reason (a ``PolicyChange``
row) and written into the job's history.

A held job is never considered by the pass (so it neither starts nor preempts); nodes already
held for it as a preemptor are given back. Its tenant may release its own holds; an operator's
hold only an operator releases. An operator's requeue stops running work through the terminate
path, as a preemption does: it is ``terminating`` and keeps its nodes until its process is gone,
then goes back to pending with its submission time (lifecycle.allocation_exited).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from scheduling.actions.admission import allocation_cancel
from scheduling.actions.policies import policy_change_record
from scheduling.actions.preemption import allocations_preempt
from scheduling.actions.release import give_back_borrowed
from scheduling.dispatch import event_on_commit
from scheduling.errors import Conflict, DomainError
from scheduling.models import Allocation, AllocationEvent, JobArray
from scheduling.models.allocations import HeldBy
from scheduling.pass_asks import request_pass_on_commit
from scheduling.states import FINAL, Leaving, State

HOLDABLE = (State.PENDING, State.SUSPENDED)


def _audit(alloc: Allocation, action: str, actor: Any, reason: str, before: dict[str, Any],
           after: dict[str, Any], event: str) -> None:
    policy_change_record(actor=actor, action=action, target=alloc, before=before, after=after, reason=reason)
    AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                   reason=f"{event}: {reason}"[:255],
                                   actor=actor if actor is not None and actor.is_authenticated else None)
    event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state, action: True},
                    alloc.tenant_id)


def allocation_hold(*, allocation: Allocation, actor: Any, reason: str, operator: bool) -> Allocation:
    """Hold pending work: the pass skips it until it is released. An operator's hold replaces its
    tenant's (so the tenant can no longer release it)."""
    by = HeldBy.OPERATOR if operator else HeldBy.USER
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state not in HOLDABLE:
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}: only pending (or suspended) work can be held")
        if alloc.held and (alloc.held_by == by or alloc.held_by == HeldBy.OPERATOR):
            raise Conflict(f"allocation {alloc.pk} is already held (by {alloc.held_by or 'its tenant'})")
        before = {"held": alloc.held, "held_by": alloc.held_by}
        alloc.held, alloc.held_by = True, by
        alloc.save(update_fields=["held", "held_by"])
        held = alloc.placements.filter(kind="held")  # nodes being freed for it as a preemptor
        nodes = list(held.values_list("node_id", flat=True))
        held.delete()
        give_back_borrowed(nodes)
        _audit(alloc, "hold", actor, reason, before, {"held": True, "held_by": by}, f"held by {by}")
        request_pass_on_commit(alloc.resource_group_id)
    return alloc


def allocation_release_hold(*, allocation: Allocation, actor: Any, reason: str, operator: bool) -> Allocation:
    """Release a hold: the pass considers the work again. A tenant may not release an operator's."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state not in HOLDABLE:  # ended work keeps its flag; there is nothing to release
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}: only pending work can be released")
        if not alloc.held:
            raise Conflict(f"allocation {alloc.pk} is not held")
        if alloc.held_by == HeldBy.OPERATOR and not operator:
            raise DomainError("an operator held this job; only an operator may release it", field="held")
        before = {"held": True, "held_by": alloc.held_by}
        alloc.held, alloc.held_by = False, HeldBy.NONE
        alloc.save(update_fields=["held", "held_by"])
        _audit(alloc, "release", actor, reason, before, {"held": False, "held_by": ""},
               f"released ({'operator' if operator else 'user'})")
        request_pass_on_commit(alloc.resource_group_id)
    return alloc


def allocation_requeue(*, allocation: Allocation, actor: Any, reason: str) -> Allocation:
    """An operator sends running work back to the queue: stopped through the terminate path (it
    keeps its nodes until gone), then pending again with its submission time."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.RUNNING:
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}: only running work can be requeued")
        allocations_preempt(victims=[(alloc.pk, "terminate")], decision=None, checkpoint_timeout_s=0)
        # Not a preemption's leave: once its process is gone it is pending again, whatever the mode.
        Allocation.objects.filter(pk=alloc.pk).update(leaving=Leaving.REQUEUE)
        alloc.refresh_from_db()
        _audit(alloc, "requeue", actor, reason, {"state": State.RUNNING}, {"state": alloc.state, "requeue": True},
               "requeue asked by an operator")
    return alloc


def array_apply(*, array: JobArray, verb: str, actor: Any, reason: str, operator: bool) -> dict[str, list[int]]:
    """``cancel``, ``hold`` or ``release`` every task of ``array`` it applies to (ended tasks, and
    tasks already in the asked state, are skipped). Returns the ids done and skipped."""
    done: list[int] = []
    skipped: list[int] = []
    for task in Allocation.objects.filter(array=array).exclude(state__in=FINAL).order_by("array_index"):
        try:
            if verb == "cancel":
                allocation_cancel(allocation=task, actor=actor, reason=f"cancelled with its array: {reason}"[:255])
            elif verb == "hold":
                allocation_hold(allocation=task, actor=actor, reason=reason, operator=operator)
            else:
                allocation_release_hold(allocation=task, actor=actor, reason=reason, operator=operator)
        except DomainError:
            skipped.append(task.pk)
        else:
            done.append(task.pk)
    return {"done": done, "skipped": skipped}
