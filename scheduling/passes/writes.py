"""A pass's writes, batched: fitting starts, preemptions (records, victims, holds) and the records
of waits, each batch in one short transaction with its side effects after commit."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from scheduling.actions.preemption import allocations_hold, preempt_for
from scheduling.actions.starts import allocations_start
from scheduling.dispatch import events_on_commit
from scheduling.errors import DomainError
from scheduling.models import PreemptionDecision
from scheduling.passes import snapshot_cache
from scheduling.passes.records import save_records
from scheduling.passes.state import PassState, Staged

log = logging.getLogger(__name__)


def flush_fits(state: PassState, moment: datetime) -> None:
    """Start every batched fitting request in one short transaction."""
    batch, snap = state.fits, state.snap
    if not batch:
        return
    by_id = {row["id"]: (row, req, decision) for row, req, decision in batch}
    with transaction.atomic():
        snapshot_cache.tag_writes(snap)
        started = allocations_start({pk: list(d.nodes) for pk, (_, _, d) in by_id.items()}, snap.node_ids, moment,
                                    had_holds=any(req.held_nodes for _, req, _ in batch))
    for pk in set(by_id) - {a.pk for a in started}:  # cancelled meanwhile: undo its place and its quota use
        snap.cluster.remove(str(pk))
        state.quotas.give_back(by_id[pk][0])
    state.result.placed += len(started)
    batch.clear()


def flush_preempts(state: PassState) -> None:
    """Write staged preemptions in one transaction: records, victims, holds. If one lost a race
    (a victim ended meanwhile), the batch rolls back and each is written alone, the loser skipped."""
    if not state.staged:
        return
    snap = state.snap
    batch, state.staged[:] = list(state.staged), []
    try:
        with transaction.atomic():
            snapshot_cache.tag_writes(snap)
            records = _write_preempts(state, batch)
    except DomainError as exc:
        log.info("a batch of %d preemptions lost a race (%s): writing them one by one", len(batch), exc)
        snap.dirty = True  # what was staged and not written is already in the snapshot
        records = []
        for one in batch:
            try:
                with transaction.atomic():
                    snapshot_cache.tag_writes(snap)
                    records += _write_preempts(state, [one])
            except DomainError as lost:  # the next pass decides this request again
                log.info("decision for %s not applied: %s", one[0]["id"], lost)
    state.result.preempted += len(records)
    state.result.decisions += [r.pk for r in records]


def _write_preempts(state: PassState, batch: list[Staged]) -> list[PreemptionDecision]:
    snap = state.snap
    shadow = snap.group.shadow
    records = save_records([(record, row["tenant_id"], [int(v.id) for v in decision.victims])
                            for row, decision, record in batch])
    # Registered first, so sent first after commit: the decision reaches the live feed before the
    # victims' deadline task, commands and state changes, which are sent in that order after it.
    events_on_commit([("decision", {"decision": record.pk, "preemptor": row["id"], "code": decision.code,
                                    "victims": [v.id for v in decision.victims], "shadow": shadow,
                                    "group": snap.group.name},
                       row["tenant_id"]) for (row, decision, _), record in zip(batch, records, strict=True)])
    if not shadow:  # every victim of the batch asked at once, every hold written at once
        preempt_for([(record, record.decided_for, [(int(v["id"]), v["action"]) for v in record.victims])
                     for (_, decision, _), record in zip(batch, records, strict=True)],
                    checkpoint_timeout_s=snap.policy.checkpoint_timeout_minutes * 60)
        allocations_hold({row["id"]: [snap.node_ids[n] for n in decision.nodes] for row, decision, _ in batch})
    return records


def flush_waits(state: PassState) -> None:
    """Write the staged records of waits together, in one transaction (a waiting request changes
    nothing else)."""
    if not state.waits:
        return
    with transaction.atomic():
        save_records(state.waits)
    state.waits.clear()
