"""The scheduler pass: snapshot, decide, apply (see docs/architecture.md).

One pass at a time per resource group (locks.py). The snapshot is loaded once and updated in
memory as each decision is applied; writes are batched in short transactions (writes.py). A pass
stops after a bounded number of requests and asks for the next one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from scheduling.actions.dependencies import dependencies_settle
from scheduling.actions.starts import allocation_place
from scheduling.dispatch import SCHEDULE_PASS, task_on_commit
from scheduling.engine import Decision, decide
from scheduling.engine import model as em
from scheduling.errors import DomainError
from scheduling.models import Allocation, ResourceGroup
from scheduling.models.records import Execution
from scheduling.pass_asks import pass_starting
from scheduling.passes import fairshare, snapshot_cache
from scheduling.passes.holds import holds_of, release_reservation, reserve_holds
from scheduling.passes.locks import group_lock
from scheduling.passes.queue import last_codes, last_codes_and_scores, pending_queue
from scheduling.passes.records import build_record
from scheduling.passes.score import QueueScorer, drifted
from scheduling.passes.snapshot import engine_allocation, load_snapshot
from scheduling.passes.state import PassResult, PassState
from scheduling.passes.writes import flush_fits, flush_preempts, flush_waits

log = logging.getLogger(__name__)
PASS_BUDGET = 2000
# Consecutive fitting requests are committed together, a few dozen per transaction.
FIT_BATCH = 50
PREEMPT_BATCH = 25  # preemptions written per transaction


def schedule_pass(group_id: int, *, budget: int = PASS_BUDGET, now: datetime | None = None) -> PassResult:
    pass_starting(group_id)  # before anything is read: a change committed after this asks again
    group = ResourceGroup.objects.get(pk=group_id)
    with group_lock(group) as acquired:
        result = _locked_pass(group, budget, now) if acquired else PassResult(busy=True)
    # Keep going while there is progress; a pass turned away by the lock tries again in a second
    # (the pass that held it may have started before the change that asked for this one).
    # Otherwise the next event or the sweep resumes.
    if (result.more and (result.placed or result.preempted)) or result.busy:
        task_on_commit(SCHEDULE_PASS, group.pk, countdown=1 if result.busy else 0)
    return result


def _locked_pass(group: ResourceGroup, budget: int, now: datetime | None) -> PassResult:
    dependencies_settle(group)  # work whose dependencies were met joins the queue read below
    snap = snapshot_cache.take(group)
    assert snap.quotas is not None, "snapshot_cache.take always gives a pass its quota book"
    as_of = now or timezone.now()
    kind = snap.policy.kind
    # Shares are tracked where they are read: fair_share's starvation and queue, class_cost's f3.
    standing = fairshare.track(snap, as_of) if kind in ("fair_share", "class_cost") else None
    holds = holds_of(group)
    scorer = QueueScorer(snap, as_of, standing) if kind == "class_cost" else None
    queue = pending_queue(group, kind, budget + 1, set(holds), standing=standing if kind == "fair_share" else None,
                          scorer=scorer)
    state = PassState(snap=snap, quotas=snap.quotas, as_of=as_of, scorer=scorer)
    state.result.more = len(queue) > budget
    reserve_holds(snap, holds)
    state.reserved.update(holds)
    if scorer is not None:
        state.codes, state.scored = last_codes_and_scores([row["id"] for row in queue[:budget]])
    else:
        state.codes = last_codes([row["id"] for row in queue[:budget]])
    for row in queue[:budget]:
        _one_request(state, row, holds.get(row["id"], []), now or timezone.now())
    flush_fits(state, now or timezone.now())
    flush_preempts(state)
    flush_waits(state)
    for alloc_id in state.reserved:  # reservations belong to this pass only
        release_reservation(snap, alloc_id)
    snapshot_cache.keep(snap)
    return state.result


def _one_request(state: PassState, row: dict, mine: list[str], moment: datetime) -> None:
    """Decide one pending request against the pass's snapshot and stage or apply the answer."""
    snap, pending = state.snap, state.pending
    if mine:
        release_reservation(snap, row["id"])
    req = engine_allocation(row, held=tuple(mine))
    started = time.perf_counter()
    decision = decide(snap.cluster, snap.policy, req, state.as_of.timestamp())
    if pending.touched_by(decision):
        state.reserved.update(pending.nodes_of)
        pending.reserve(snap.cluster)
        decision = decide(snap.cluster, snap.policy, req, state.as_of.timestamp())
    latency = (time.perf_counter() - started) * 1000
    state.result.decided += 1
    if decision.outcome == "fits" and not decision.borrowed:
        if not state.quotas.take(row):
            return  # a hard quota would be exceeded: it waits, admission already said so
        snap.cluster.add(_running(req, decision, moment))
        state.fits.append((row, req, decision))
        if len(state.fits) >= FIT_BATCH:
            flush_fits(state, moment)
        return
    flush_fits(state, moment)
    try:
        _apply(state, row, req, decision, moment, latency)
        if len(state.staged) >= PREEMPT_BATCH:
            flush_preempts(state)
        if len(state.waits) >= PREEMPT_BATCH:
            flush_waits(state)
    except DomainError as exc:  # lost a race with a report or a cancel; the next pass retries
        log.info("decision for %s not applied: %s", row["id"], exc)
        snap.dirty = True
    # Still waiting for its victims, or newly preempting: what is free on its nodes is its own
    # for the rest of the pass, as the held rows make it for the next passes.
    if decision.outcome == "wait" and mine:
        pending.add(row["id"], mine)
    elif decision.outcome == "preempt" and not snap.group.shadow:
        pending.add(row["id"], list(decision.nodes))


def _running(req: em.Allocation, decision: Decision, moment: datetime) -> em.Allocation:
    return replace(req, state="running", started_at=moment.timestamp(), held_nodes=(),
                   placement={n: dict(req.per_node) for n in decision.nodes})


def _apply(state: PassState, row: dict, req: em.Allocation, decision: Decision, moment: datetime,
           latency: float) -> None:
    """A borrowing fit is written now; a preemption is staged and written with others (see
    writes.flush_preempts), as is the record of a wait whose reason changed (writes.flush_waits).
    The records say when the engine judged (``state.as_of``)."""
    snap = state.snap
    group = snap.group
    if decision.outcome == "fits":
        _place_borrowing(state, row, req, decision, moment)
        return
    scored = state.scorer.record_of(row["id"]) if state.scorer is not None else None
    if decision.outcome == "wait":
        if state.codes.get(row["id"]) != decision.code or drifted(state.scored.get(row["id"]), scored):
            state.codes[row["id"]] = decision.code
            record = build_record(group, row["id"], decision, snap, state.as_of, latency, Execution.RECORDED)
            record.queue_score = scored
            if scored is not None:
                state.scored[row["id"]] = float(scored["score"])
            state.waits.append((record, row["tenant_id"], [int(v.id) for v in decision.victims]))
        state.result.waiting += 1
        return
    record = build_record(group, row["id"], decision, snap, state.as_of, latency,
                          Execution.SHADOW if group.shadow else Execution.EXECUTED)
    record.queue_score = scored
    state.staged.append((row, decision, record))
    if not group.shadow:
        fairshare.noted_preemption(snap, state.as_of)  # the backoff window starts now
        # Later decisions of this pass see the victims leaving, written or not yet.
        for v in decision.victims:
            snap.cluster.set_state(v.id, "checkpointing" if v.action == "checkpoint" else "terminating")


def _place_borrowing(state: PassState, row: dict, req: em.Allocation, decision: Decision,
                     moment: datetime) -> None:
    """A fit that borrows nodes changes lending limits: written at once, then the snapshot is
    reloaded rather than patched."""
    snap = state.snap
    group = snap.group
    alloc = Allocation(pk=row["id"], tenant_id=row["tenant_id"], resource_group_id=group.pk)
    allocation_place(allocation=alloc, node_ids=snap.node_ids, nodes=list(decision.nodes),
                     borrowed=list(decision.borrowed), now=moment)
    snap.cluster.add(_running(req, decision, moment))
    # What this pass decided but has not written yet would be lost with the old snapshot: write
    # it first, so the reload shows its victims leaving and its holds.
    flush_preempts(state)
    fresh = load_snapshot(group)
    fresh.cluster.last_preemption_at = snap.cluster.last_preemption_at
    snap.cluster, snap.node_ids, snap.dirty = fresh.cluster, fresh.node_ids, True
    holds = holds_of(group)  # the staged ones just written included
    reserve_holds(snap, holds)
    state.reserved.update(holds)
    state.pending.clear()
    state.result.placed += 1
