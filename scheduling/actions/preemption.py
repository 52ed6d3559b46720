"""The preemption sequence: place, preempt, hold, release, and every report that moves a victim on.

Each function is one short transaction; agent commands, events and deadline
tasks go out after commit. Every step is idempotent: re-running it after a
crash, or receiving the same report twice, reaches the same end state.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.actions.allocations import allocation_transition, allocations_transition
from scheduling.actions.starts import placed_reason
from scheduling.bulk import insert_rows
from scheduling.dispatch import (
    agent_command_on_commit,
    event_on_commit,
    events_on_commit,
    task_on_commit,
)
from scheduling.errors import Conflict
from scheduling.models import Allocation, AllocationEvent, Placement, PreemptionDecision
from scheduling.states import FINAL, HOLDING, State

TERMINATE_GRACE_S = 30
MAX_DEFERRAL_S = 300
HOLD_MARGIN_S = 60


def _deadlines_task() -> Any:
    from scheduling.tasks import preemption_deadlines

    return preemption_deadlines


def _request_pass(group_id: int) -> None:
    from scheduling.tasks import schedule_resource_group

    task_on_commit(schedule_resource_group, group_id)


def start_frame(alloc: Allocation, node_name: str) -> dict[str, Any]:
    return {"type": "start", "allocation": str(alloc.pk), "command": list(alloc.command or []),
            "env": dict(alloc.env or {}),
            "resources": {r: getattr(alloc, f"per_node_{r}") for r in ("gpu", "cpu", "memory")},
            "resume_from_checkpoint": alloc.resume_from_checkpoint,
            "checkpoint_dir": f"checkpoints/{alloc.pk}"}


def allocation_place(*, allocation: Allocation, node_ids: dict[str, int], nodes: list[str],
                     borrowed: list[str], decision: PreemptionDecision | None = None,
                     now: datetime | None = None) -> Allocation:
    """Start a pending allocation on ``nodes`` (held placements become assigned)."""
    from nodes.models import Node

    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.PENDING:
            raise Conflict(f"allocation {alloc.pk} is {alloc.state}, not pending")
        _check_running_quota(alloc)
        alloc.placements.all().delete()
        Placement.objects.bulk_create([
            Placement(allocation=alloc, node_id=node_ids[name], gpu=alloc.per_node_gpu, cpu=alloc.per_node_cpu,
                      memory=alloc.per_node_memory) for name in nodes])
        if borrowed and alloc.vcluster_id:  # locked as give_back_borrowed locks them (see there)
            lent = list(Node.objects.select_for_update().filter(name__in=borrowed).order_by("pk")
                        .values_list("pk", flat=True))
            Node.objects.filter(pk__in=lent, borrowed_by__isnull=True).update(borrowed_by=alloc.vcluster_id)
        allocation_transition(allocation=alloc, to=State.RUNNING, reason=placed_reason(nodes), decision=decision,
                              now=moment, fields={"started_at": moment, "ran_on": list(nodes)})
        for name in nodes:
            agent_command_on_commit(name, start_frame(alloc, name))
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state, "nodes": nodes},
                        alloc.tenant_id)
    return alloc


def _check_running_quota(alloc: Allocation) -> None:
    """Hard quotas hold where capacity is consumed, too (admission already counted it)."""
    from scheduling.actions.admission import check_quota, tenant_usage

    quota = getattr(alloc.tenant, "quota", None)
    if quota is None:
        return
    usage = tenant_usage(alloc.tenant, states=list(HOLDING))
    check_quota(quota, usage, nodes=alloc.node_count, gpus=alloc.node_count * alloc.per_node_gpu)


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
    from scheduling.dispatch import agent_commands_on_commit

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
        commands: list[tuple[str, dict[str, Any]]] = []
        events: list[tuple[str, dict[str, Any], int | None]] = []
        for action in ("checkpoint", "terminate"):
            group = [pk for pk in ids if chosen[pk][2] == action]
            if not group:
                continue
            grace = checkpoint_timeout_s if action == "checkpoint" else TERMINATE_GRACE_S + 5
            deadline = {pk: chosen[pk][1] + timedelta(seconds=grace) for pk in group}
            each: dict[int, dict[str, Any]] = {pk: {"state_changed_at": chosen[pk][1], "deadline_at": deadline[pk],
                                                    "preempted_by": chosen[pk][0]} for pk in group}
            if action == "checkpoint":
                to = State.CHECKPOINTING
                for pk in group:
                    each[pk]["checkpoint_started_at"] = chosen[pk][1]
                fields = {"deadline_extended": False, "deferred_seconds": 0, "checkpoint_progress_at": None}
            else:
                to, fields = State.TERMINATING, {}
            allocations_transition(ids=group, from_state=State.RUNNING, to=to, reason=f"preempted: {action}",
                                   fields=fields, each=each, decision_of={pk: chosen[pk][0] for pk in group})
            for pk in group:
                frame = ({"type": "checkpoint", "allocation": str(pk), "deadline": deadline[pk].isoformat(),
                          "reason": "preempted"} if action == "checkpoint" else
                         {"type": "terminate", "allocation": str(pk), "grace_s": TERMINATE_GRACE_S})
                commands += [(name, frame) for name in nodes.get(pk, [])]
                events.append(("allocation.state", {"allocation": pk, "state": to}, rows[pk].tenant_id))
            # Each deadline is its decision's moment plus the grace, so all of the group's are due
            # grace + 1 s after this commit: one task for them (the periodic sweep backs it up).
            task_on_commit(_deadlines_task(), group, countdown=grace + 1)
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


def allocation_release(*, allocation: Allocation, command: str | None = None) -> None:
    """Free an allocation's nodes (it left holding states); give borrowed nodes back when empty."""
    placements = list(allocation.placements.select_related("node"))
    for p in placements:
        if command == "terminate":
            agent_command_on_commit(p.node.name, {"type": "terminate", "allocation": str(allocation.pk),
                                                  "grace_s": TERMINATE_GRACE_S})
        elif command == "kill":
            agent_command_on_commit(p.node.name, {"type": "kill", "allocation": str(allocation.pk)})
    allocation.placements.all().delete()
    give_back_borrowed([p.node_id for p in placements if p.node.borrowed_by_id is not None])
    if allocation.preempted_by_id:
        _maybe_released(allocation.preempted_by_id)
    _request_pass(allocation.resource_group_id)


def give_back_borrowed(node_ids: list[int]) -> None:
    """Borrowed nodes among these go back to their home vCluster once no allocation of the
    borrower runs or holds a place there (the home's own work, even its holds, keeps nothing
    borrowed). Call after deleting placements. The borrowed nodes' rows are locked first (as
    placing on a borrowed node locks them): two borrowers leaving at once would otherwise each
    see the other still there, and a new borrower arriving meanwhile could be left on a node
    marked not borrowed."""
    from django.db.models import Exists, OuterRef

    from nodes.models import Node

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


def effective_mode(policy_mode: str | None, session_mode: str | None) -> str:
    """What happens to a victim: its session type's mode when set, else its group's policy mode."""
    return session_mode or policy_mode or "suspend"


def victim_action(mode: str, checkpoint: str) -> str:
    """Checkpoint in suspend mode when the work can; otherwise it is stopped."""
    return "checkpoint" if mode == "suspend" and checkpoint in ("auto", "manual") else "terminate"


def mode_of(alloc: Allocation) -> str:
    return effective_mode((alloc.resource_group.policy or {}).get("mode"),
                          alloc.session_type.mode if alloc.session_type_id else "")


def _requeue(alloc: Allocation, *, reason: str, resume: bool, now: datetime, **extra: Any) -> None:
    allocation_transition(allocation=alloc, to=State.PENDING, reason=reason, now=now, fields={
        "preempted_count": alloc.preempted_count + 1, "resume_from_checkpoint": resume, "started_at": None,
        "deadline_at": None, **extra})


def allocation_checkpoint_done(*, allocation: Allocation, ok: bool, location: str = "", size_bytes: int = 0,
                               error: str = "", now: datetime | None = None) -> Allocation:
    """A victim's checkpoint finished: suspended then requeued (resume), or failed."""
    moment = now or timezone.now()
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.CHECKPOINTING:
            return alloc  # duplicate or late report: nothing more to do
        if ok:
            allocation_transition(allocation=alloc, to=State.SUSPENDED, reason="checkpoint done", now=moment,
                                  fields={"checkpoint_location": location[:512], "last_checkpoint_at": moment})
            duration = (moment - (alloc.checkpoint_started_at or moment)).total_seconds()
            AllocationEvent.objects.filter(allocation=alloc, to_state=State.SUSPENDED).order_by("-id").update(
                reason=f"checkpoint done in {duration:.1f}s")
            allocation_release(allocation=alloc, command="terminate")  # checkpointed: stop the process
            _requeue(alloc, reason="requeued after preemption", resume=True, now=moment)
        else:
            _victim_failed(alloc, f"checkpoint failed: {error}", moment, command="kill")
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def allocation_checkpoint_progress(*, allocation: Allocation, now: datetime | None = None) -> None:
    Allocation.objects.filter(pk=allocation.pk, state=State.CHECKPOINTING).update(
        checkpoint_progress_at=now or timezone.now())


def allocation_defer(*, allocation: Allocation, seconds: int, now: datetime | None = None) -> int:
    """Grant a checkpoint deferral, up to MAX_DEFERRAL_S in total; returns the seconds granted."""
    with transaction.atomic():
        alloc = Allocation.objects.select_for_update().get(pk=allocation.pk)
        if alloc.state != State.CHECKPOINTING or alloc.deadline_at is None:
            return 0
        granted = max(0, min(int(seconds), MAX_DEFERRAL_S - alloc.deferred_seconds))
        if granted:
            alloc.deadline_at += timedelta(seconds=granted)
            alloc.deferred_seconds += granted
            alloc.checkpoint_progress_at = now or timezone.now()
            alloc.save(update_fields=["deadline_at", "deferred_seconds", "checkpoint_progress_at"])
            task_on_commit(_deadlines_task(), [alloc.pk],
                           countdown=(alloc.deadline_at - (now or timezone.now())).total_seconds() + 1)
        return granted


# Exit reasons the agent gives only for processes the control plane asked it to stop.
SIGNALLED = frozenset({"terminated", "killed"})


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
        mode = mode_of(alloc)
        fields = {"exit_code": exit_code}
        if alloc.state == State.TERMINATING:
            if mode == "terminate":
                allocation_transition(allocation=alloc, to=State.PREEMPTED, reason="preempted (terminate mode)",
                                      now=moment, fields={**fields, "ended_at": moment})
            else:
                _requeue(alloc, reason="requeued after preemption", resume=False, now=moment, **fields)
            allocation_release(allocation=alloc)  # after it left terminating: the decision sees it gone
        elif alloc.state == State.CHECKPOINTING:
            _victim_failed(alloc, f"checkpoint failed: exited while checkpointing ({exit_code})", moment,
                           fields=fields)
        else:
            done = reason == "completed" and exit_code == 0
            allocation_transition(allocation=alloc, to=State.COMPLETED if done else State.FAILED,
                                  reason=f"exited: {reason} ({exit_code})", now=moment,
                                  fields={**fields, "ended_at": moment})
            allocation_release(allocation=alloc)
            if not done and alloc.requeue_policy == "always":
                requeue_failed(alloc)
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def _victim_failed(alloc: Allocation, reason: str, moment: datetime, *, command: str | None = None,
                   fields: dict[str, Any] | None = None) -> None:
    """A checkpoint that failed, timed out or died with its process: the victim ends failed, not
    suspended, and is requeued if its policy allows (the reason starts with "checkpoint", which
    the failed-checkpoint metric counts)."""
    allocation_transition(allocation=alloc, to=State.FAILED, reason=reason[:255], now=moment,
                          fields={**(fields or {}), "ended_at": moment})
    allocation_release(allocation=alloc, command=command)
    if alloc.requeue_policy == "always":
        requeue_failed(alloc)


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
            if responsive and not alloc.deadline_extended:
                started = alloc.checkpoint_started_at or moment
                extra = (alloc.deadline_at - started - timedelta(seconds=alloc.deferred_seconds)) * 0.5
                alloc.deadline_at += extra
                alloc.deadline_extended = True
                alloc.save(update_fields=["deadline_at", "deadline_extended"])
                task_on_commit(_deadlines_task(), [alloc.pk], countdown=extra.total_seconds() + 1)
                return alloc
            _victim_failed(alloc, "checkpoint timed out: terminated", moment, command="terminate",
                           fields={"deadline_at": None})
        else:
            # The agent never reported the exit within the grace: kill, and count it as exited.
            if mode_of(alloc) == "terminate":
                allocation_transition(allocation=alloc, to=State.PREEMPTED, reason="killed after grace",
                                      now=moment, fields={"ended_at": moment})
            else:
                _requeue(alloc, reason="requeued after preemption (killed after grace)", resume=False, now=moment)
            allocation_release(allocation=alloc, command="kill")
        event_on_commit("allocation.state", {"allocation": alloc.pk, "state": alloc.state}, alloc.tenant_id)
    return alloc


def holds_expired(now: datetime) -> list[int]:
    """Preemptors whose victims all passed their deadlines plus a margin but never released."""
    stale = []
    for alloc_id in Placement.objects.filter(kind="held").values_list("allocation_id", flat=True).distinct():
        leaving = Allocation.objects.filter(preempted_by__preemptor_id=alloc_id, state__in=HOLDING)
        latest = max((a.deadline_at for a in leaving if a.deadline_at), default=None)
        if latest is not None and latest + timedelta(seconds=HOLD_MARGIN_S) < now:
            stale.append(alloc_id)
    return stale


def sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Re-derive from the database what must happen; safe to run any time, any number of times."""
    moment = now or timezone.now()
    done = {"deadlines": 0, "holds_released": 0}
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
