"""The rest of an allocation's life: its exit, requeues, deadlines of victims, the sweep.

Each function is one short transaction; agent commands, events and deadline tasks go out after
commit. Every step is idempotent: re-running it after a crash, or receiving the same report
twice, reaches the same end state.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Value,
)
from django.db.models.functions import Cast
from django.utils import timezone

from nodes.protocol import NOT_STARTED, SIGNALLED, TERMINATE_GRACE_S
from scheduling.actions.allocations import allocation_transition
from scheduling.actions.release import allocation_release, allocation_signal, give_back_borrowed
from scheduling.dispatch import DEADLINES, event_on_commit, task_on_commit
from scheduling.engine.model import effective_mode
from scheduling.models import Allocation, AllocationEvent, Placement, ResourceGroup
from scheduling.passes.snapshot import policy_of
from scheduling.states import (
    CANCELLING,
    FAILED_ON_A_NODE,
    FAILING,
    FINAL,
    HOLDING,
    ONE_NODE_EXITED,
    Leaving,
    State,
)

HOLD_MARGIN_S = 60
# How long a terminating allocation has to report its exit before it is killed and counted gone.
LEAVE_GRACE_S = TERMINATE_GRACE_S + 5
WALLTIME_EXCEEDED = "walltime exceeded"  # the start of the reason of work stopped at its walltime
# The start of the reason of checkpointing work whose process failed on one of its nodes.
CHECKPOINT_FAILED_ON = f"checkpoint failed: {ONE_NODE_EXITED}"


def failed_on_a_node(alloc: Allocation) -> bool:
    """Whether ``alloc`` is being stopped as its process failed on one of its nodes: the work
    failed, so the others' exit 0 does not make it completed."""
    return alloc.leaving in FAILED_ON_A_NODE


def mode_of(alloc: Allocation) -> str:
    return effective_mode((alloc.resource_group.policy or {}).get("mode"),
                          alloc.session_type.mode if alloc.session_type_id else "")


def requeue(alloc: Allocation, *, reason: str, resume: bool, now: datetime, **extra: Any) -> None:
    allocation_transition(allocation=alloc, to=State.PENDING, reason=reason, now=now, fields={
        "preempted_count": alloc.preempted_count + 1, "resume_from_checkpoint": resume, "started_at": None,
        "deadline_at": None, "leaving": Leaving.NONE, **extra})


def allocation_exited(*, allocation: Allocation, exit_code: int | None, reason: str,
                      now: datetime | None = None) -> Allocation:
    """The process is gone. Idempotent: an exit for an ended allocation changes nothing."""
    moment = now or timezone.now()
    with transaction.atomic():
        # Only the allocation's row: locking the joined group row too made every exit in a
        # resource group wait for every other.
        alloc = (Allocation.objects.select_for_update(of=("self",)).select_related("resource_group")
                 .get(pk=allocation.pk))
        if alloc.state in FINAL or alloc.state in (State.PENDING, State.SUSPENDED):
            return alloc
        if reason in SIGNALLED and alloc.state in (State.RUNNING, State.CHECKPOINTING):
            # Lattice signals a run only as it takes it out of these states (preempted, cancelled,
            # checkpointed, timed out), so this is the exit of an earlier run of the allocation,
            # reported after it was already requeued and started again: the current run goes on.
            AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                           reason=f"late exit of an earlier run ignored: {reason} ({exit_code})")
            return alloc
        if reason == NOT_STARTED and alloc.state == State.CHECKPOINTING:
            requeue_never_started(alloc, moment)
            return alloc
        mode = mode_of(alloc)
        fields = {"exit_code": exit_code}
        done = reason == "completed" and exit_code == 0
        if done and alloc.state in (State.CHECKPOINTING, State.TERMINATING) and not failed_on_a_node(alloc):
            # It finished on its own before it could be stopped (its report may come late, after a
            # reconnect): its work is done, so it is completed, neither failed nor run again.
            allocation_transition(allocation=alloc, to=State.COMPLETED, now=moment,
                                  reason=f"exited: completed (0) while {alloc.state}",
                                  fields={**fields, "ended_at": moment, "deadline_at": None})
            allocation_release(allocation=alloc)
        elif alloc.state == State.TERMINATING and alloc.leaving in CANCELLING:
            stopped_cancelled(alloc, f"exited: {reason} ({exit_code})", moment, fields=fields)
        elif alloc.state == State.TERMINATING and alloc.leaving in FAILING:
            # A process failed on another node: its exit code is the work's (kept), not this one's.
            stopped_failed(alloc, f"exited: {reason} ({exit_code})", moment,
                           fields={} if failed_on_a_node(alloc) else fields)
        elif alloc.state == State.TERMINATING:
            stopped_to_the_queue(alloc, mode, moment, fields, as_it_was=reason == NOT_STARTED)
        elif alloc.state == State.CHECKPOINTING:
            victim_failed(alloc, f"checkpoint failed: exited while checkpointing ({exit_code})", moment,
                           fields=fields)
        else:
            allocation_transition(allocation=alloc, to=State.COMPLETED if done else State.FAILED,
                                  reason=f"exited: {reason} ({exit_code})", now=moment,
                                  fields={**fields, "ended_at": moment})
            allocation_release(allocation=alloc)
            if not done and alloc.requeue_policy == "always":
                requeue_failed(alloc)
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def stopped_to_the_queue(alloc: Allocation, mode: str, moment: datetime, fields: dict[str, Any], *,
                         as_it_was: bool = False, after_grace: bool = False) -> None:
    """Preempted (or requeued) work whose process is gone (its exit, or ``after_grace``: killed, and
    counted gone) goes back to the queue, or ends ``preempted`` in terminate mode. ``as_it_was`` (its
    run never started here), or a run that never started on another of its nodes
    (``Leaving.NOT_STARTED``): it resumes from the checkpoint it had."""
    resume = (as_it_was or alloc.leaving == Leaving.NOT_STARTED) and alloc.resume_from_checkpoint
    how = " (killed after grace)" if after_grace else ""
    if alloc.leaving == Leaving.REQUEUE:  # an operator's requeue: back to the queue whatever the mode
        requeue(alloc, reason=f"requeued by an operator{how}", resume=resume, now=moment, **fields)
    elif mode == "terminate" and alloc.leaving != Leaving.NOT_STARTED:
        allocation_transition(allocation=alloc, to=State.PREEMPTED, now=moment, fields={**fields, "ended_at": moment},
                              reason="killed after grace" if after_grace else "preempted (terminate mode)")
    else:
        requeue(alloc, reason=f"requeued after preemption{how}", resume=resume, now=moment, **fields)
    # After it left terminating: the decision sees it gone.
    allocation_release(allocation=alloc, command="kill" if after_grace else None)


def requeue_never_started(alloc: Allocation, moment: datetime) -> None:
    """Asked to checkpoint before its run began (its start waited for a stopping process to leave
    its GPUs), the agent dropped the start (``not_started``): nothing ran, so the work goes back to
    the queue to resume as it would have, from the checkpoint it had (or from the start)."""
    allocation_transition(allocation=alloc, to=State.SUSPENDED, now=moment,
                          reason=f"its run {alloc.run} was stopped before it started: nothing to checkpoint")
    requeue(alloc, reason="requeued after preemption", resume=alloc.resume_from_checkpoint, now=moment)
    allocation_release(allocation=alloc)
    event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)


def victim_failed(alloc: Allocation, reason: str, moment: datetime, *, command: str | None = None,
                   fields: dict[str, Any] | None = None, node_failure: bool = False) -> None:
    """Work that ends failed now, its process gone (it exited, or its node was lost): its nodes
    are released and it is requeued if its policy allows (``always``; ``on_node_failure`` too when
    a node failure ended it). A checkpoint's failure has a reason starting with "checkpoint",
    which the failed-checkpoint metric counts."""
    allocation_transition(allocation=alloc, to=State.FAILED, reason=reason[:255], now=moment,
                          fields={**(fields or {}), "ended_at": moment, "deadline_at": None})
    allocation_release(allocation=alloc, command=command)
    if alloc.requeue_policy == "always" or (node_failure and alloc.requeue_policy == "on_node_failure"):
        requeue_failed(alloc)


def victim_stopping(alloc: Allocation, reason: str, moment: datetime, *, command: str, leaving: str) -> None:
    """Work that must end failed while its process may still run (its checkpoint timed out or
    failed, a node of it was lost): it becomes terminating, ``command`` ("terminate" or "kill")
    goes to its agents, and it keeps its nodes until it reports its exit or the grace passes
    (then it is killed and counted gone), so no one starts on them while it still runs. It
    then ends failed with ``reason`` (``stopped_failed``), by the failure ``leaving`` says;
    work being cancelled still ends cancelled."""
    fields: dict[str, Any] = {"fail_reason": reason[:255]}
    if alloc.leaving not in CANCELLING:
        fields["leaving"] = leaving
    stopping(alloc, reason, moment, command=command, fields=fields)


def stopping(alloc: Allocation, reason: str, moment: datetime, *, command: str, fields: dict[str, Any]) -> None:
    """Work whose processes must go while they may still run: terminating with ``fields`` (why it
    leaves), ``command`` sent to its agents, its nodes kept until it reports its exit or the grace
    passes (``allocation_deadline``)."""
    fields = {**fields, "deadline_at": moment + timedelta(seconds=LEAVE_GRACE_S)}
    if alloc.state == State.TERMINATING:  # already leaving: now for this
        Allocation.objects.filter(pk=alloc.pk).update(**fields)
        for key, value in fields.items():
            setattr(alloc, key, value)
    else:
        allocation_transition(allocation=alloc, to=State.TERMINATING, reason=f"{reason}: stopping"[:255],
                              now=moment, fields=fields)
    allocation_signal(allocation=alloc, command=command)
    task_on_commit(DEADLINES, [alloc.pk], countdown=LEAVE_GRACE_S + 1)


def stopped_failed(alloc: Allocation, how: str, moment: datetime, *, command: str | None = None,
                   fields: dict[str, Any] | None = None) -> None:
    """A terminating allocation stopped for a failure is gone (``how``: its exit, the kill after
    the grace, its node lost): it ends failed with its reason and frees its nodes. A node's loss
    may requeue it under ``on_node_failure``; a checkpoint's failure, its walltime or a process
    failed on one of its nodes, only under ``always``."""
    victim_failed(alloc, f"{alloc.fail_reason}; {how}", moment, command=command, fields=fields,
                  node_failure=alloc.leaving == Leaving.NODE_LOST)


def cancel_stopping(alloc: Allocation, actor: Any, reason: str, moment: datetime) -> None:
    """A cancel of work whose process may still run (running, checkpointing, or already leaving
    for a preemption or a failure): it becomes (or stays) terminating, its agents are told to
    terminate it, and it keeps its nodes until its exit or the kill after the grace, so nothing
    starts on its GPUs while it still runs; then it ends cancelled (``stopped_cancelled``), never
    requeued. Work that completes meanwhile ends completed, unless its process had failed on one
    of its nodes (the work failed: it ends cancelled)."""
    deadline = moment + timedelta(seconds=LEAVE_GRACE_S)
    leaving = Leaving.RANK_FAILED_CANCEL if alloc.leaving == Leaving.RANK_FAILED else Leaving.CANCEL
    if alloc.state == State.TERMINATING:  # already leaving: it now ends cancelled, and is asked again
        # within the grace it already has, so a preemptor waiting for it waits no longer for a cancel
        deadline = min(deadline, alloc.deadline_at or deadline)
        Allocation.objects.filter(pk=alloc.pk).update(leaving=leaving, deadline_at=deadline)
        alloc.leaving, alloc.deadline_at = leaving, deadline
        AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state, actor=actor,
                                       reason=f"{reason} while terminating: it ends cancelled"[:255])
    else:
        allocation_transition(allocation=alloc, to=State.TERMINATING, reason=f"{reason}: stopping"[:255], actor=actor,
                              now=moment, fields={"leaving": leaving, "deadline_at": deadline})
    allocation_signal(allocation=alloc, command="terminate")
    task_on_commit(DEADLINES, [alloc.pk], countdown=LEAVE_GRACE_S + 1)


def stopped_cancelled(alloc: Allocation, how: str, moment: datetime, *, command: str | None = None,
                      fields: dict[str, Any] | None = None) -> None:
    """Terminating work that was cancelled is gone (``how``: its exit, the kill after the grace,
    its node lost): cancelled, and its nodes free."""
    allocation_transition(allocation=alloc, to=State.CANCELLED, reason=f"cancelled; {how}"[:255], now=moment,
                          fields={**(fields or {}), "ended_at": moment, "deadline_at": None})
    allocation_release(allocation=alloc, command=command)


def requeue_failed(alloc: Allocation) -> Allocation | None:
    """A failed allocation is final; by its requeue policy a fresh copy goes back in the queue."""
    if alloc.requeue_count >= alloc.max_requeue:
        return None
    copy = Allocation.objects.get(pk=alloc.pk)
    copy.pk = None
    copy.state = State.PENDING
    copy.requeue_count = alloc.requeue_count + 1
    copy.requeued_from = alloc
    copy.started_at = copy.ended_at = copy.exit_code = copy.deadline_at = copy.preempted_by = None
    copy.ran_on = []  # it has run nowhere: no agent may report about it until it starts (nodes/actions.py)
    copy.fail_reason = ""
    copy.leaving = Leaving.NONE
    copy.run = 0  # its own runs: it has had none
    copy.save()
    AllocationEvent.objects.create(allocation=copy, from_state="", to_state=State.PENDING,
                                   reason=f"requeued from {alloc.pk} ({copy.requeue_count}/{alloc.max_requeue})")
    return copy


def allocation_deadline(*, allocation: Allocation, now: datetime | None = None) -> Allocation:
    """A victim's deadline passed: extend once if responsive, else stop it. Idempotent."""
    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.deadline_at is None or alloc.deadline_at > moment or alloc.state not in (
                State.CHECKPOINTING, State.TERMINATING):
            return alloc
        if alloc.state == State.CHECKPOINTING:
            responsive = alloc.checkpoint_progress_at is not None
            # Deferrals are granted up to the policy's maximum, "then force": an application that
            # used them all gets no extension on top.
            deferred_all = 0 < max_deferral_s(alloc.resource_group_id) <= alloc.deferred_seconds
            if responsive and not alloc.deadline_extended and not deferred_all:
                started = alloc.checkpoint_started_at or moment
                extra = (alloc.deadline_at - started - timedelta(seconds=alloc.deferred_seconds)) * 0.5
                alloc.deadline_at += extra
                alloc.deadline_extended = True
                alloc.save(update_fields=["deadline_at", "deadline_extended"])
                AllocationEvent.objects.create(
                    allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                    reason=f"checkpoint deadline extended by {extra.total_seconds():.1f}s (responsive, once)")
                task_on_commit(DEADLINES, [alloc.pk], countdown=extra.total_seconds() + 1)
                return alloc
            reason = ("checkpoint timed out after the maximum deferral" if deferred_all
                      else "checkpoint timed out")
            victim_stopping(alloc, reason, moment, command="terminate", leaving=Leaving.CHECKPOINT_FAILED)
        elif alloc.leaving in CANCELLING:
            stopped_cancelled(alloc, "killed after grace", moment, command="kill")
        elif alloc.leaving in FAILING:
            stopped_failed(alloc, "killed after grace", moment, command="kill")
        else:
            # The agent never reported the exit within the grace: kill, and count it as exited.
            stopped_to_the_queue(alloc, mode_of(alloc), moment, {}, after_grace=True)
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def max_deferral_s(group_id: int) -> int:
    """The most a checkpoint may be deferred in total, in whole seconds: the group policy's
    ``max_deferral_minutes`` (5 by default)."""
    return int(policy_of(ResourceGroup.objects.get(pk=group_id)).max_deferral_minutes * 60)


def holds_expired(now: datetime) -> list[int]:
    """Preemptors whose victims all passed their deadlines plus a margin but never released."""
    stale = []
    for alloc_id in Placement.objects.filter(kind="held").values_list("allocation_id", flat=True).distinct():
        leaving = Allocation.objects.filter(preempted_by__preemptor_id=alloc_id, state__in=HOLDING)
        latest = max((a.deadline_at for a in leaving if a.deadline_at), default=None)
        if latest is not None and latest + timedelta(seconds=HOLD_MARGIN_S) < now:
            stale.append(alloc_id)
    return stale


def walltime_overdue(moment: datetime) -> list[int]:
    """Running work whose run has lasted its walltime (each run counts from its own start)."""
    # The walltime (minutes, a float) as a duration: an interval on PostgreSQL; on SQLite, where
    # Django keeps durations as whole microseconds, that integer.
    if connection.vendor == "postgresql":
        walltime: Any = F("walltime_minutes") * Value(timedelta(minutes=1))
    else:
        walltime = Cast(F("walltime_minutes") * Value(60_000_000), output_field=BigIntegerField())
    ends = ExpressionWrapper(F("started_at") + ExpressionWrapper(walltime, output_field=DurationField()),
                             output_field=DateTimeField())
    return list(Allocation.objects.filter(state=State.RUNNING, walltime_minutes__isnull=False,
                                          started_at__isnull=False).alias(ends=ends).filter(ends__lte=moment)
                .order_by("pk").values_list("pk", flat=True))


def allocation_walltime(*, allocation_id: int, now: datetime | None = None) -> None:
    """Running work past its walltime is stopped as Slurm stops a job at its time limit: SIGTERM,
    its nodes kept until it is gone (the kill after the grace), then failed with the reason, and
    requeued only under ``requeue_policy: always``. Without it, work past its walltime would also
    stay protected as near completion for ever. Idempotent."""
    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation_id)
        if alloc.state != State.RUNNING or alloc.walltime_minutes is None or alloc.started_at is None:
            return
        if alloc.started_at + timedelta(minutes=alloc.walltime_minutes) > moment:
            return
        victim_stopping(alloc, f"{WALLTIME_EXCEEDED} ({alloc.walltime_minutes:g} min)", moment, command="terminate",
                        leaving=Leaving.WALLTIME)
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)


def sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Re-derive from the database what must happen; safe to run any time, any number of times."""
    moment = now or timezone.now()
    done = {"deadlines": 0, "holds_released": 0, "walltime": 0}
    for alloc_id in walltime_overdue(moment):
        allocation_walltime(allocation_id=alloc_id, now=moment)
        done["walltime"] += 1
    for alloc in Allocation.objects.filter(state__in=[State.CHECKPOINTING, State.TERMINATING],
                                           deadline_at__lte=moment):
        allocation_deadline(allocation=alloc, now=moment)
        done["deadlines"] += 1
    for alloc_id in holds_expired(moment):
        with transaction.atomic():
            held = Placement.objects.filter(allocation_id=alloc_id, kind="held")
            nodes = list(held.values_list("node_id", flat=True))
            removed, _ = held.delete()
            give_back_borrowed(nodes)
            if removed:
                AllocationEvent.objects.create(allocation_id=alloc_id, from_state=State.PENDING,
                                               to_state=State.PENDING, reason="hold released: victims never left")
                done["holds_released"] += 1
    return done
