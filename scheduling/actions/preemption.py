"""Preemption: victims asked to leave, nodes held for their preemptor, and the victims'
checkpoint reports (done, progress, deferral).

Each function is one short transaction; agent commands, events and deadline tasks go out after
commit. Every step is idempotent: re-running it after a crash, or receiving the same report
twice, reaches the same end state.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodes.protocol import Checkpoint, Command, Terminate
from scheduling.actions.allocations import allocation_transition, allocations_transition
from scheduling.actions.lifecycle import LEAVE_GRACE_S, max_deferral_s, requeue, victim_stopping
from scheduling.actions.release import allocation_release, give_back_borrowed
from scheduling.dispatch import (
    DEADLINES,
    agent_commands_on_commit,
    event_on_commit,
    events_on_commit,
    task_on_commit,
)
from scheduling.errors import Conflict
from scheduling.models import Allocation, AllocationEvent, Placement, PreemptionDecision
from scheduling.passes.bulk import insert_rows
from scheduling.states import Leaving, State


def allocation_preempt(*, allocation: Allocation, decision: PreemptionDecision | None, action: str,
                       checkpoint_timeout_s: float, now: datetime | None = None) -> Allocation:
    """Ask one victim to leave: checkpoint (auto/manual in suspend mode) or terminate."""
    allocations_preempt(victims=[(allocation.pk, action)], decision=decision,
                        checkpoint_timeout_s=checkpoint_timeout_s, now=now)
    allocation.refresh_from_db()
    return allocation


def allocations_preempt(*, victims: list[tuple[int, str]], decision: PreemptionDecision | None,
                        checkpoint_timeout_s: float, now: datetime | None = None) -> None:
    """Ask a decision's victims to leave, together. ``victims`` holds (allocation id,
    "checkpoint" or "terminate"). All are asked or, if one is no longer running, none
    (Conflict)."""
    preempt_for([(decision, now or timezone.now(), victims)], checkpoint_timeout_s=checkpoint_timeout_s)


Chosen = tuple[PreemptionDecision | None, datetime, list[tuple[int, str]]]


def preempt_for(decisions: list[Chosen], *, checkpoint_timeout_s: float) -> None:
    """Ask the victims of many decisions to leave, in one transaction: one row lock for all of
    them, one update per action and one insert of events (not a round of statements per victim
    or per decision). Each entry is (decision, its moment, its victims). All are asked or, if one
    is no longer running or is chosen twice, none (Conflict)."""
    chosen: dict[int, tuple[PreemptionDecision | None, datetime, str]] = {}
    for decision, moment, victims in decisions:
        for pk, action in victims:
            if pk in chosen:
                raise Conflict(f"victim {pk} is chosen by two decisions")
            chosen[pk] = (decision, moment, action)
    ids = sorted(chosen)
    with transaction.atomic():
        rows = {a.pk: a for a in Allocation.objects.select_for_update().filter(pk__in=ids).order_by("pk")
                .only("id", "state", "tenant_id")}
        for pk in ids:
            state = rows[pk].state if pk in rows else "gone"
            if state != State.RUNNING:
                raise Conflict(f"victim {pk} is {state}, not running")
        nodes: dict[int, list[str]] = {}
        for alloc_id, name in Placement.objects.filter(allocation_id__in=ids, kind="assigned").values_list(
                "allocation_id", "node__name"):
            nodes.setdefault(alloc_id, []).append(name)
        commands: list[tuple[str, Command]] = []
        events: list[tuple[str, dict[str, Any], int | None]] = []
        for action in ("checkpoint", "terminate"):
            group = [pk for pk in ids if chosen[pk][2] == action]
            if not group:
                continue
            grace = checkpoint_timeout_s if action == "checkpoint" else LEAVE_GRACE_S
            deadline = {pk: chosen[pk][1] + timedelta(seconds=grace) for pk in group}
            each: dict[int, dict[str, Any]] = {pk: {"state_changed_at": chosen[pk][1], "deadline_at": deadline[pk],
                                                    "preempted_by": chosen[pk][0]} for pk in group}
            if action == "checkpoint":
                to = State.CHECKPOINTING
                for pk in group:
                    each[pk]["checkpoint_started_at"] = chosen[pk][1]
                fields = {"deadline_extended": False, "deferred_seconds": 0, "checkpoint_progress_at": None,
                          "leaving": Leaving.PREEMPTED}
            else:
                to, fields = State.TERMINATING, {"leaving": Leaving.PREEMPTED}
            allocations_transition(ids=group, from_state=State.RUNNING, to=to, reason=f"preempted: {action}",
                                   fields=fields, each=each, decision_of={pk: chosen[pk][0] for pk in group})
            for pk in group:
                frame: Command = (Checkpoint(allocation=str(pk), deadline=deadline[pk].isoformat())
                                  if action == "checkpoint" else Terminate(allocation=str(pk)))
                commands += [(name, frame) for name in nodes.get(pk, [])]
                events.append(("allocation.state", {"allocation": pk, "state": to}, rows[pk].tenant_id))
            # Each deadline is its decision's moment plus the grace, so all of the group's are due
            # grace + 1 s after this commit: one task for them (the periodic sweep backs it up).
            task_on_commit(DEADLINES, group, countdown=grace + 1)
        agent_commands_on_commit(commands)
        events_on_commit(events)


def allocations_hold(holds: dict[int, list[int]]) -> None:
    """Reserve the nodes being freed for waiting preemptors (allocation id -> node ids), so no
    one else takes them, in three statements: holds on other nodes are dropped, missing ones
    added (a node already placed is kept)."""
    with transaction.atomic():
        existing = list(Placement.objects.filter(allocation_id__in=list(holds)).values_list(
            "id", "allocation_id", "node_id", "kind"))
        stale = {pid: node_id for pid, alloc_id, node_id, kind in existing
                 if kind == "held" and node_id not in holds[alloc_id]}
        if stale:
            Placement.objects.filter(pk__in=sorted(stale)).delete()
            give_back_borrowed(list(stale.values()))
        kept = {(alloc_id, node_id) for pid, alloc_id, node_id, _ in existing if pid not in stale}
        insert_rows(Placement, ["allocation_id", "node_id", "kind"],
                    [(alloc_id, node_id, "held") for alloc_id, node_ids in holds.items() for node_id in node_ids
                     if (alloc_id, node_id) not in kept])


def allocation_checkpoint_done(*, allocation: Allocation, ok: bool, location: str = "", size_bytes: int = 0,
                               error: str = "", now: datetime | None = None) -> Allocation:
    """A victim's checkpoint finished: suspended then requeued (resume), or failed."""
    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.CHECKPOINTING:
            return alloc  # duplicate or late report: nothing more to do
        if ok:
            # The duration goes into this checkpoint's own event, written with the transition: the
            # allocation's earlier checkpoints keep theirs.
            duration = (moment - (alloc.checkpoint_started_at or moment)).total_seconds()
            allocation_transition(allocation=alloc, to=State.SUSPENDED, reason=f"checkpoint done in {duration:.1f}s",
                                  now=moment,
                                  fields={"checkpoint_location": location[:512], "last_checkpoint_at": moment})
            allocation_release(allocation=alloc, command="terminate")  # checkpointed: stop the process
            requeue(alloc, reason="requeued after preemption", resume=True, now=moment)
        else:
            victim_stopping(alloc, f"checkpoint failed: {error}", moment, command="kill",
                            leaving=Leaving.CHECKPOINT_FAILED)
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def allocation_checkpoint_progress(*, allocation: Allocation, now: datetime | None = None) -> None:
    Allocation.objects.filter(pk=allocation.pk, state=State.CHECKPOINTING).update(
        checkpoint_progress_at=now or timezone.now())


def allocation_defer(*, allocation: Allocation, seconds: int, now: datetime | None = None) -> int:
    """Grant a checkpoint deferral, up to the group policy's ``max_deferral_minutes`` in total;
    returns the seconds granted."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.CHECKPOINTING or alloc.deadline_at is None:
            return 0
        granted = max(0, min(int(seconds), max_deferral_s(alloc.resource_group_id) - alloc.deferred_seconds))
        AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                       reason=f"checkpoint deferral: asked {int(seconds)}s, granted {granted}s")
        if granted:
            alloc.deadline_at += timedelta(seconds=granted)
            alloc.deferred_seconds += granted
            alloc.checkpoint_progress_at = now or timezone.now()
            alloc.save(update_fields=["deadline_at", "deferred_seconds", "checkpoint_progress_at"])
            task_on_commit(DEADLINES, [alloc.pk],
                           countdown=(alloc.deadline_at - (now or timezone.now())).total_seconds() + 1)
        return granted
