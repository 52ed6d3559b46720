"""The scheduler pass: snapshot, decide, apply (DESIGN section 4.2).

One pass at a time per resource group (a PostgreSQL advisory lock, or a file
lock on SQLite). The snapshot is loaded once and updated in memory as each
decision is applied in its own short transaction; a pass stops after a bounded
number of requests and asks for the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scheduling import snapshot_cache
from scheduling.actions.preemption import (
    allocation_place,
    allocations_hold,
    effective_mode,
    preempt_for,
    victim_action,
)
from scheduling.actions.starts import allocations_start
from scheduling.bulk import insert_rows
from scheduling.dispatch import events_on_commit
from scheduling.engine import Decision, decide
from scheduling.engine import model as em
from scheduling.engine.explain import ACTION_TEXT
from scheduling.errors import DomainError
from scheduling.models import (
    Allocation,
    DecisionAudience,
    Placement,
    PreemptionDecision,
    ResourceGroup,
)
from scheduling.models.records import Execution
from scheduling.snapshot import ALLOCATION_FIELDS, Snapshot, engine_allocation, load_snapshot
from scheduling.states import State

log = logging.getLogger(__name__)
PASS_BUDGET = 2000
# Consecutive fitting requests are committed together, a few dozen per transaction.
FIT_BATCH = 50
PREEMPT_BATCH = 25  # preemptions written per transaction
# Candidates stored in full up to this many; beyond, the victims and every candidate on the
# chosen nodes, with counts per code for the others.
STORED_CANDIDATES = 5000


@dataclass
class PassResult:
    busy: bool = False
    decided: int = 0
    placed: int = 0
    preempted: int = 0
    waiting: int = 0
    more: bool = False
    decisions: list[int] = field(default_factory=list)


@contextlib.contextmanager
def group_lock(group: ResourceGroup) -> Iterator[bool]:
    """Exclusive per resource group across processes; yields False when another pass runs."""
    if connection.vendor == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"lattice-rg-{group.pk}".encode()).digest()[:8], "big", signed=True)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
            got = bool(cur.fetchone()[0])
        try:
            yield got
        finally:
            if got:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    lock_dir = settings.VAR_DIR / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"rg-{group.pk}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


QUEUE_ORDER = {
    "class_cost": ["-preemption_class", "-priority", "submitted_at", "id"],
    "priority": ["-priority", "submitted_at", "id"],
    "queue": ["-session_type__priority", "-priority", "submitted_at", "id"],
    "rank": ["-session_type__rank", "submitted_at", "id"],
    "fair_share": ["submitted_at", "id"],
}


def pending_queue(group: ResourceGroup, kind: str, limit: int, held: set[int] | None = None) -> list[dict]:
    """Pending work in the policy's order; submission time is kept across requeues.
    Preemptors already holding nodes (``held``, read here if not given) come first: their nodes
    are being freed for them."""
    if held is None:
        held = set(_holds(group))
    rows = list(Allocation.objects.filter(resource_group=group, state=State.PENDING)
                .order_by(*QUEUE_ORDER[kind]).values(*ALLOCATION_FIELDS, "tenant_id")[: limit + len(held)])
    if kind == "fair_share":
        rows = _by_deficit(rows)
    return sorted(rows, key=lambda r: r["id"] not in held)


def _by_deficit(rows: list[dict]) -> list[dict]:
    from scheduling.models import Quota

    fair = dict(Quota.objects.values_list("tenant__name", "fair_share"))
    return sorted(rows, key=lambda r: (-(fair.get(r["tenant__name"]) or 0.0), r["submitted_at"], r["id"]))


def schedule_pass(group_id: int, *, budget: int = PASS_BUDGET, now: datetime | None = None) -> PassResult:
    group = ResourceGroup.objects.get(pk=group_id)
    result = PassResult()
    with group_lock(group) as acquired:
        if not acquired:
            result.busy = True
            return result
        snap = snapshot_cache.take(group)
        holds = _holds(group)
        queue = pending_queue(group, snap.policy.kind, budget + 1, set(holds))
        result.more = len(queue) > budget
        _reserve_holds(snap, holds)
        reserved = set(holds)  # preemptors whose nodes others must not take during this pass
        # Reservations made during the pass, put into the snapshot only when a decision touches
        # their nodes: adding one invalidates what the engine keeps between decisions of a pass.
        pending = PassReservations()
        quotas = snap.quotas
        assert quotas is not None, "snapshot_cache.take always gives a pass its quota book"
        codes = last_codes([row["id"] for row in queue[:budget]])
        batch: list[tuple[dict, em.Allocation, Decision]] = []
        staged: list[Staged] = []
        waits: list[Record] = []
        # The engine judges the whole pass as of its start, the time of its snapshot: costs and
        # protections do not move between two requests of one pass, so what it derives from them
        # is computed once per pass instead of once per request. Writes carry their own times.
        as_of = now or timezone.now()
        for row in queue[:budget]:
            moment = now or timezone.now()
            mine = holds.get(row["id"], [])
            if mine:
                _release_reservation(snap, row["id"])
            req = engine_allocation(row, held=tuple(mine))
            started = time.perf_counter()
            decision = decide(snap.cluster, snap.policy, req, as_of.timestamp())
            if pending.touched_by(decision):
                _reserve_holds(snap, pending.nodes_of)
                reserved.update(pending.nodes_of)
                pending.clear()
                decision = decide(snap.cluster, snap.policy, req, as_of.timestamp())
            latency = (time.perf_counter() - started) * 1000
            result.decided += 1
            if decision.outcome == "fits" and not decision.borrowed:
                if not quotas.take(row):
                    continue  # a hard quota would be exceeded: it waits, admission already said so
                snap.cluster.add(_running(req, decision, moment))
                batch.append((row, req, decision))
                if len(batch) >= FIT_BATCH:
                    _flush_fits(snap, batch, moment, result)
                continue
            _flush_fits(snap, batch, moment, result)
            try:
                _apply(snap, row, req, decision, moment, as_of, latency, result, codes, staged, reserved,
                       pending, waits)
                if len(staged) >= PREEMPT_BATCH:
                    _flush_preempts(snap, staged, result)
                if len(waits) >= PREEMPT_BATCH:
                    _flush_waits(waits)
            except DomainError as exc:  # lost a race with a report or a cancel; the next pass retries
                log.info("decision for %s not applied: %s", row["id"], exc)
                snap.dirty = True
            # Still waiting for its victims, or newly preempting: what is free on its nodes is
            # its own for the rest of the pass, as the held rows make it for the next passes.
            if decision.outcome == "wait" and mine:
                pending.add(row["id"], mine)
            elif decision.outcome == "preempt" and not snap.group.shadow:
                pending.add(row["id"], list(decision.nodes))
        _flush_fits(snap, batch, now or timezone.now(), result)
        _flush_preempts(snap, staged, result)
        _flush_waits(waits)
        for alloc_id in reserved:  # reservations belong to this pass only
            _release_reservation(snap, alloc_id)
        snapshot_cache.keep(snap)
    # Keep going while there is progress; otherwise the next event or the sweep resumes.
    progress = (result.more and (result.placed or result.preempted)) or result.busy
    if progress and not settings.CELERY_TASK_ALWAYS_EAGER:
        from scheduling.tasks import schedule_resource_group

        schedule_resource_group.apply_async(args=[group.pk], countdown=1 if result.busy else 0)
    return result


def _running(req: em.Allocation, decision: Decision, moment: datetime) -> em.Allocation:
    return replace(req, state="running", started_at=moment.timestamp(), held_nodes=(),
                   placement={n: dict(req.per_node) for n in decision.nodes})


def _flush_fits(snap: Snapshot, batch: list[tuple[dict, em.Allocation, Decision]], moment: datetime,
                result: PassResult) -> None:
    """Start every batched fitting request in one short transaction; side effects after commit."""
    from scheduling.actions.preemption import start_frame
    from scheduling.dispatch import agent_commands_on_commit

    if not batch:
        return
    by_id = {row["id"]: (row, req, decision) for row, req, decision in batch}
    quotas = snap.quotas
    assert quotas is not None
    with transaction.atomic():
        snapshot_cache.tag_writes(snap)
        allocs = {a.pk: a for a in allocations_start({pk: list(d.nodes) for pk, (_, _, d) in by_id.items()},
                                                     snap.node_ids, moment,
                                                     had_holds=any(req.held_nodes for _, req, _ in batch))}
        agent_commands_on_commit([(name, start_frame(a, name)) for pk, a in allocs.items()
                                  for name in by_id[pk][2].nodes])
        by_tenant: dict[int, list[int]] = {}
        for pk, a in sorted(allocs.items()):
            by_tenant.setdefault(a.tenant_id, []).append(pk)
        # One check of who watches and one send for the batch, not one per tenant.
        events_on_commit([("allocations.placed", {"allocations": pks}, tenant_id)
                          for tenant_id, pks in by_tenant.items()])
    for pk in set(by_id) - set(allocs):  # cancelled meanwhile: undo its place and its quota use
        snap.cluster.remove(str(pk))
        quotas.give_back(by_id[pk][0])
    result.placed += len(allocs)
    batch.clear()


def _holds(group: ResourceGroup) -> dict[int, list[str]]:
    """The nodes held for each waiting preemptor of the group."""
    out: dict[int, list[str]] = {}
    for alloc_id, name in Placement.objects.filter(allocation__resource_group=group, kind="held",
                                                   allocation__state=State.PENDING).values_list(
            "allocation_id", "node__name"):
        out.setdefault(alloc_id, []).append(name)
    return out


def _reserve_holds(snap: Snapshot, holds: dict[int, list[str]]) -> None:
    """Free capacity on held nodes is kept for their preemptor: others see it as taken."""
    cluster = snap.cluster
    for alloc_id, names in holds.items():
        placement = {}
        for name in names:
            i = cluster.node_index.get(name)
            if i is None:
                continue
            free = {r: float(cluster.cap[i, j] - cluster.used[i, j]) for j, r in enumerate(cluster.res_names)}
            placement[name] = {r: v for r, v in free.items() if v > 0}
        if placement:
            cluster.add(em.Allocation(id=f"hold:{alloc_id}", state="terminating", placement=placement,
                                      preemptible=False))


class PassReservations:
    """Nodes reserved during a pass for preemptors, not yet put into the snapshot; with the set of
    all their nodes, so checking a decision against them costs its own nodes, not every reservation."""

    def __init__(self) -> None:
        self.nodes_of: dict[int, list[str]] = {}
        self._nodes: set[str] = set()

    def add(self, alloc_id: int, names: list[str]) -> None:
        self.nodes_of[alloc_id] = names
        self._nodes.update(names)

    def clear(self) -> None:
        self.nodes_of.clear()
        self._nodes.clear()

    def touched_by(self, decision: Decision) -> bool:
        """Whether ``decision`` uses a reserved node (so it must be decided again with the
        reservations in place; one that does not use them stands as it is, since taking capacity
        away elsewhere cannot make its choice worse)."""
        nodes = self._nodes
        return bool(nodes) and not (nodes.isdisjoint(decision.nodes) and nodes.isdisjoint(decision.borrowed))


def _release_reservation(snap: Snapshot, alloc_id: int) -> None:
    snap.cluster.remove(f"hold:{alloc_id}")


def _apply(snap: Snapshot, row: dict, req: em.Allocation, decision: Decision, moment: datetime,
           as_of: datetime, latency: float, result: PassResult, codes: dict[int, str],
           staged: list[Staged], reserved: set[int], pending: PassReservations, waits: list[Record]) -> None:
    """Fits are written now; a preemption is staged and written with others (see
    _flush_preempts), as is the record of a wait whose reason changed (see _flush_waits). The
    records say when the engine judged (``as_of``)."""
    group = snap.group
    if decision.outcome == "fits":
        alloc = Allocation(pk=row["id"], tenant_id=row["tenant_id"], resource_group_id=group.pk)
        allocation_place(allocation=alloc, node_ids=snap.node_ids, nodes=list(decision.nodes),
                                  borrowed=list(decision.borrowed), now=moment)
        snap.cluster.add(replace(req, state="running", started_at=moment.timestamp(), held_nodes=(),
                                 placement={n: dict(req.per_node) for n in decision.nodes}))
        if decision.borrowed:  # lending limits changed: reload rather than patch node rows
            # What this pass decided but has not written yet would be lost with the old
            # snapshot: write it first, so the reload shows its victims leaving and its holds.
            _flush_preempts(snap, staged, result)
            fresh = load_snapshot(group)
            snap.cluster, snap.node_ids, snap.dirty = fresh.cluster, fresh.node_ids, True
            holds = _holds(group)  # the staged ones just written included
            _reserve_holds(snap, holds)
            reserved.update(holds)
            pending.clear()
        result.placed += 1
        return
    if decision.outcome == "wait":
        if codes.get(row["id"]) != decision.code:
            codes[row["id"]] = decision.code
            waits.append((build_record(group, row["id"], decision, snap, as_of, latency, Execution.RECORDED),
                          row["tenant_id"], [int(v.id) for v in decision.victims]))
        result.waiting += 1
        return
    shadow = group.shadow
    staged.append((row, decision, build_record(group, row["id"], decision, snap, as_of, latency,
                                               Execution.SHADOW if shadow else Execution.EXECUTED)))
    if not shadow:  # later decisions of this pass see the victims leaving, written or not yet
        for v in staged[-1][2].victims:  # as the record has them: session types may override the mode
            snap.cluster.set_state(v["id"], "checkpointing" if v["action"] == "checkpoint" else "terminating")


Staged = tuple[dict, Decision, PreemptionDecision]
Record = tuple[PreemptionDecision, int, list[int]]  # an unsaved record, its preemptor's tenant, its victims


def _flush_preempts(snap: Snapshot, staged: list[Staged], result: PassResult) -> None:
    """Write staged preemptions in one transaction: records, victims, holds. If one lost a race
    (a victim ended meanwhile), the batch rolls back and each is written alone, the loser skipped."""
    if not staged:
        return
    batch, staged[:] = list(staged), []
    try:
        with transaction.atomic():
            snapshot_cache.tag_writes(snap)
            records = _write_preempts(snap, batch)
    except DomainError as exc:
        log.info("a batch of %d preemptions lost a race (%s): writing them one by one", len(batch), exc)
        snap.dirty = True  # what was staged and not written is already in the snapshot
        records = []
        for one in batch:
            try:
                with transaction.atomic():
                    snapshot_cache.tag_writes(snap)
                    records += _write_preempts(snap, [one])
            except DomainError as lost:  # the next pass decides this request again
                log.info("decision for %s not applied: %s", one[0]["id"], lost)
    result.preempted += len(records)
    result.decisions += [r.pk for r in records]


def _write_preempts(snap: Snapshot, batch: list[Staged]) -> list[PreemptionDecision]:
    group = snap.group
    records = save_records([(record, row["tenant_id"], [int(v.id) for v in decision.victims])
                            for row, decision, record in batch])
    if not group.shadow:  # every victim of the batch asked at once, every hold written at once
        preempt_for([(record, record.decided_for, [(int(v["id"]), v["action"]) for v in record.victims])
                     for (_, decision, _), record in zip(batch, records, strict=True)],
                    checkpoint_timeout_s=snap.policy.checkpoint_timeout_minutes * 60)
        allocations_hold({row["id"]: [snap.node_ids[n] for n in decision.nodes] for row, decision, _ in batch})
    events_on_commit([("decision", {"decision": record.pk, "preemptor": row["id"], "code": decision.code,
                                    "victims": [v.id for v in decision.victims], "shadow": group.shadow},
                        row["tenant_id"]) for (row, decision, _), record in zip(batch, records, strict=True)])
    return records


def _victim_row(snap: Snapshot, victim: object) -> dict:
    """A victim as recorded and executed: the engine's choice, with its session type's mode
    override applied (the engine knows only the policy's mode)."""
    row = victim.to_dict()  # type: ignore[attr-defined]
    slot = snap.cluster.slot_of.get(row["id"])
    alloc = snap.cluster.objs[slot] if slot is not None else None
    row["vcluster"] = alloc.vcluster if alloc is not None else None
    if alloc is not None:
        mode = effective_mode(snap.policy.mode, snap.session_modes.get(alloc.session_type or ""))
        if mode != snap.policy.mode:
            row["mode"] = mode
            row["action"] = victim_action(mode, alloc.checkpoint)
    return row


def _override_note(victims: list[dict]) -> str:
    """What session type mode overrides changed, without naming the victims (tenants read it)."""
    texts = Counter(ACTION_TEXT.get((v["mode"], v["action"]), "stopped") for v in victims if "mode" in v)
    if not texts:
        return ""
    return " By their session types' mode, " + "; ".join(
        f"{n} of them will instead be {text}" for text, n in sorted(texts.items())) + "."


def decision_output(snap: Snapshot, decision: Decision) -> dict:
    """The engine's answer as Lattice would carry it out: victims with session type mode overrides."""
    out = decision.to_dict()
    rows = [_victim_row(snap, v) for v in decision.victims]
    for shown, row in zip(out["victims"], rows, strict=True):
        shown["action"] = row["action"]
        if "mode" in row:
            shown["mode"] = row["mode"]
    out["explanation"] += _override_note(rows)
    return out


def last_codes(alloc_ids: list[int]) -> dict[int, str]:
    """Each request's latest decision code, in one query for the whole queue: a waiting request's
    decision is stored when its reason changes, not on every pass."""
    from django.db.models import Max

    latest = PreemptionDecision.objects.filter(preemptor_id__in=alloc_ids).values("preemptor_id").annotate(
        last=Max("id")).values("last")
    return dict(PreemptionDecision.objects.filter(id__in=latest).values_list("preemptor_id", "code"))


def build_record(group: ResourceGroup, alloc_id: int, decision: Decision, snap: Snapshot, moment: datetime,
                 latency: float, outcome: str) -> PreemptionDecision:
    """The record of a decision, not yet saved; built before the snapshot changes (candidates are
    read from it)."""
    rows, others = decision.summary(STORED_CANDIDATES)
    candidates: list[dict] = [c.to_dict() for c in rows]
    if others:
        candidates.append({"summary": others})
    victims = [_victim_row(snap, v) for v in decision.victims]
    return PreemptionDecision(
        resource_group=group, preemptor_id=alloc_id, decided_for=moment, result=decision.outcome,
        code=decision.code, trigger=decision.trigger or "", nodes=list(decision.nodes),
        borrowed=list(decision.borrowed), victims=victims,
        candidates=candidates, explanation=decision.explanation + _override_note(victims),
        policy_snapshot={**(group.policy or {}), "paused": group.paused, "shadow": group.shadow},
        outcome=outcome, latency_ms=latency)


RECORD_COLUMNS = [f.attname for f in PreemptionDecision._meta.concrete_fields if not f.primary_key]


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


def _flush_waits(waits: list[Record]) -> None:
    """Write the staged records of waits together, in one transaction (a waiting request changes
    nothing else)."""
    if not waits:
        return
    with transaction.atomic():
        save_records(waits)
    waits.clear()
