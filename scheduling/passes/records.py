"""Decision records: built from a decision and its snapshot, saved in a few statements."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.utils import timezone

from scheduling.engine import Decision
from scheduling.models import Allocation, DecisionAudience, PreemptionDecision, ResourceGroup
from scheduling.passes.bulk import insert_rows
from scheduling.passes.snapshot import Snapshot
from scheduling.passes.state import Record

# Candidates stored in full up to this many; beyond, the victims and every candidate on the
# chosen nodes, with counts per code for the others.
STORED_CANDIDATES = 5000
RECORD_COLUMNS = [f.attname for f in PreemptionDecision._meta.concrete_fields if not f.primary_key]


def victim_row(snap: Snapshot, victim: object) -> dict:
    """A victim as recorded: the engine's answer (its action, and its session type's mode where
    that overrides the policy's), with the victim's vCluster for the metrics."""
    row = victim.to_dict()  # type: ignore[attr-defined]
    slot = snap.cluster.slot_of.get(row["id"])
    alloc = snap.cluster.objs[slot] if slot is not None else None
    row["vcluster"] = alloc.vcluster if alloc is not None else None
    return row


def build_record(group: ResourceGroup, alloc_id: int, decision: Decision, snap: Snapshot, moment: datetime,
                 latency: float, outcome: str) -> PreemptionDecision:
    """The record of a decision, not yet saved; built before the snapshot changes (candidates are
    read from it)."""
    rows, others = decision.summary(STORED_CANDIDATES)
    candidates: list[dict] = [c.to_dict() for c in rows]
    if others:
        candidates.append({"summary": others})
    return PreemptionDecision(
        resource_group=group, preemptor_id=alloc_id, decided_for=moment, result=decision.outcome,
        code=decision.code, trigger=decision.trigger or "", nodes=list(decision.nodes),
        borrowed=list(decision.borrowed), victims=[victim_row(snap, v) for v in decision.victims],
        candidates=candidates, explanation=decision.explanation,
        policy_snapshot={**(group.policy or {}), "paused": group.paused, "shadow": group.shadow},
        outcome=outcome, latency_ms=latency)


def save_records(entries: list[Record]) -> list[PreemptionDecision]:
    """Insert records with their victims and audience, a few statements for any number of them.
    ``entries`` holds (unsaved record, preemptor's tenant id, victim ids); the records get their
    ids and creation time."""
    records = [record for record, _, _ in entries]
    now = timezone.now()
    for record in records:
        record.created_at = now
    ids = insert_rows(PreemptionDecision, RECORD_COLUMNS, [[getattr(r, c) for c in RECORD_COLUMNS] for r in records],
                      returning=True)
    for record, pk in zip(records, ids, strict=True):
        record.pk = pk
        record._state.adding, record._state.db = False, connection.alias
    victim_ids = sorted({v for _, _, victims in entries for v in victims})
    tenant_of = dict(Allocation.objects.filter(pk__in=victim_ids).values_list("id", "tenant_id")) if victim_ids else {}
    insert_rows(PreemptionDecision.victim_allocations.through, ["preemptiondecision_id", "allocation_id"],
                [(pk, v) for pk, (_, _, victims) in zip(ids, entries, strict=True) for v in victims])
    insert_rows(DecisionAudience, ["tenant_id", "decision_id"], [
        (t, pk) for pk, (_, tenant_id, victims) in zip(ids, entries, strict=True)
        for t in sorted({tenant_id} | {tenant_of[v] for v in victims if v in tenant_of})])
    return records
