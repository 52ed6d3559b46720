"""What must hold of the stored state whatever crashed, restarted or raced: one query per invariant.

Each function returns its violations as sentences naming the rows (empty: it holds);
``check_all`` runs them all by name. They read only; ``manage.py check_invariants`` prints
them, and the fault test asserts them after killing and restarting processes mid-run.

Resources on a node are the placements of live allocations: ``assigned`` rows of allocations
running, checkpointing or terminating (a leaving victim keeps its placement until its exit is
reported or it is declared lost), plus ``held`` rows, which reserve a node for a waiting
preemptor and carry no resources of their own (the preemptor's are placed when it starts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from nodes.models import Node, NodeState
from scheduling.models import Allocation, AllocationEvent, Placement, PolicyChange, Quota
from scheduling.models.allocations import RESOURCES
from scheduling.states import FAILED_ON_A_NODE, HOLDING, State

LEAVING = (State.CHECKPOINTING, State.TERMINATING)
# How long a victim stopped by a checkpoint timeout may still run: the terminate grace the
# agent gives it (scheduling.actions.preemption.TERMINATE_GRACE_S).
TERMINATE_GRACE_S = 30
DEFAULT_DEADLINE_GRACE_S = 30.0

# Agent reports of exits: allocation id -> the (exit code, reason) pairs its agents reported.
Exits = Mapping[int, Iterable[tuple[int | None, str]]]


def _live_placements() -> Any:
    return Placement.objects.filter(Q(kind="held") | Q(kind="assigned", allocation__state__in=HOLDING))


def _use(rows: Iterable[Placement]) -> dict[str, int]:
    total = dict.fromkeys(RESOURCES, 0)
    for p in rows:
        for r in RESOURCES:
            total[r] += getattr(p, r)
    return total


def _over(node: Node, use: Mapping[str, int]) -> list[str]:
    return [f"{r} {use[r]}/{getattr(node, r)}" for r in RESOURCES if use[r] > getattr(node, r)]


def nodes_over_capacity() -> list[str]:
    """No node holds more than its capacity in live placements."""
    by_node: dict[int, list[Placement]] = defaultdict(list)
    for p in _live_placements().select_related("node").order_by("node__name", "allocation_id"):
        by_node[p.node_id].append(p)
    out = []
    for rows in by_node.values():
        node = rows[0].node
        over = _over(node, _use(rows))
        if over:
            holders = ", ".join(f"#{p.allocation_id} ({p.kind})" for p in rows)
            out.append(f"node {node.name} is over capacity ({'; '.join(over)}): {holders}")
    return out


def double_booked_starts() -> list[str]:
    """No capacity is committed to a starting allocation while a victim on the same node has
    neither reported its exit nor been declared lost.

    Two ways to see it: now, a running allocation shares a node with one still checkpointing
    or terminating, started after that one began leaving, and together they exceed the node;
    in the history, an allocation was placed on a node within the terminate grace of a victim
    there being failed by a checkpoint timeout (told to terminate, its exit never awaited)."""
    return _double_booked_now() + _started_beside_timed_out_victims()


def _double_booked_now() -> list[str]:
    rows = (Placement.objects.filter(kind="assigned", allocation__state__in=HOLDING)
            .select_related("node", "allocation").order_by("node__name", "allocation_id"))
    by_node: dict[int, list[Placement]] = defaultdict(list)
    for p in rows:
        by_node[p.node_id].append(p)
    out = []
    for places in by_node.values():
        leaving = [p.allocation for p in places if p.allocation.state in LEAVING]
        if not leaving:
            continue
        since = min(a.state_changed_at or timezone.now() for a in leaving)
        starting = [p.allocation for p in places if p.allocation.state == State.RUNNING
                    and p.allocation.started_at is not None and p.allocation.started_at >= since]
        node = places[0].node
        over = _over(node, _use(places))
        if starting and over:
            out.append(f"node {node.name}: {_ids(starting)} started while {_ids(leaving)} still "
                       f"{'/'.join(sorted({a.state for a in leaving}))} there ({'; '.join(over)})")
    return out


def _ids(allocs: Iterable[Allocation]) -> str:
    return ", ".join(f"#{a.pk}" for a in allocs)


def _started_beside_timed_out_victims() -> list[str]:
    out = []
    timed_out = (AllocationEvent.objects.filter(from_state=State.CHECKPOINTING, to_state=State.FAILED,
                                                reason__startswith="checkpoint timed out")
                 .select_related("allocation").order_by("created_at", "id"))
    for ev in timed_out:
        victim, failed_at = ev.allocation, ev.created_at
        nodes = set(victim.ran_on or [])
        exit_seen = (AllocationEvent.objects.filter(allocation=victim, created_at__gt=failed_at,
                                                    reason__icontains="exit")
                     .order_by("created_at").values_list("created_at", flat=True).first())
        until = exit_seen or failed_at + timedelta(seconds=TERMINATE_GRACE_S)
        starts = (AllocationEvent.objects.filter(to_state=State.RUNNING, from_state=State.PENDING,
                                                 created_at__gte=failed_at, created_at__lt=until)
                  .exclude(allocation=victim).order_by("created_at", "id"))
        for start in starts:
            on = nodes & set(start.reason.removeprefix("placed on ").split(", "))
            if on:
                gap = (start.created_at - failed_at).total_seconds()
                out.append(f"#{start.allocation_id} started on {', '.join(sorted(on))} {gap:.1f}s after victim "
                           f"#{victim.pk} there was failed by a checkpoint timeout, its exit not yet reported")
    return out


def deadlines_overdue(*, grace_s: float = DEFAULT_DEADLINE_GRACE_S, now: datetime | None = None) -> list[str]:
    """No allocation stays checkpointing or terminating past its deadline (plus ``grace_s``,
    the time a sweep needs to act), or without a deadline at all."""
    moment = now or timezone.now()
    out = []
    for a in Allocation.objects.filter(state__in=LEAVING).order_by("pk"):
        if a.deadline_at is None:
            out.append(f"#{a.pk} is {a.state} with no deadline")
        elif a.deadline_at < moment - timedelta(seconds=grace_s):
            late = (moment - a.deadline_at).total_seconds()
            out.append(f"#{a.pk} is still {a.state} {late:.0f}s past its deadline ({a.deadline_at.isoformat()})")
    return out


def submissions_missing(accepted_ids: Iterable[int]) -> list[str]:
    """Every submission the API accepted (answered 201 with this id) is stored."""
    wanted = sorted(set(accepted_ids))
    found = set(Allocation.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    return [f"accepted submission #{pk} is missing" for pk in wanted if pk not in found]


def quotas_exceeded() -> list[str]:
    """No tenant's live work (running, checkpointing, terminating) exceeds a hard quota."""
    use: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for tenant_id, nodes, gpu in Allocation.objects.filter(state__in=HOLDING).values_list(
            "tenant_id", "node_count", "per_node_gpu"):
        row = use[tenant_id]
        row[0], row[1], row[2] = row[0] + 1, row[1] + nodes, row[2] + nodes * gpu
    out = []
    for quota in Quota.objects.select_related("tenant").order_by("tenant__name"):
        count, nodes, gpus = use.get(quota.tenant_id, [0, 0, 0])
        for name, current, limit in (("max_concurrent_allocations", count, quota.max_concurrent_allocations),
                                     ("max_nodes", nodes, quota.max_nodes), ("max_gpus", gpus, quota.max_gpus)):
            if current > limit:
                out.append(f"tenant {quota.tenant.name} uses {current} against {name} {limit}")
    return out


def exited_zero_recorded_failed(*, exits: Exits | None = None) -> list[str]:
    """No allocation whose process exited 0 (completed) is recorded as failed: neither with
    its exit code stored as 0, nor when its agent reported a completed exit (``exits``, which a
    caller that watched the agents passes)."""
    out = [f"#{pk} is failed though it exited 0 ({reason})" for pk, reason in
           AllocationEvent.objects.filter(allocation__state=State.FAILED, allocation__exit_code=0,
                                          to_state=State.FAILED).order_by("allocation_id")
           .values_list("allocation_id", "reason")]
    reported = sorted({int(pk) for pk, codes in (exits or {}).items()
                       if any(code == 0 and reason == "completed" for code, reason in codes)})
    # Work of several nodes whose process failed on another is no violation: one completed rank is not the work.
    for pk in (Allocation.objects.filter(pk__in=reported, state=State.FAILED).exclude(exit_code=0)
               .exclude(leaving__in=FAILED_ON_A_NODE).order_by("pk").values_list("pk", flat=True)):
        reason = (AllocationEvent.objects.filter(allocation_id=pk, to_state=State.FAILED)
                  .values_list("reason", flat=True).first()) or ""
        out.append(f"#{pk} is failed ({reason}) though its agent reported it completed with exit 0")
    return out


def undrained_without_audit() -> list[str]:
    """A node an operator drained stays draining or drained until an operator undrains it:
    its latest drain/undrain audit entry is a drain, so its state must still say so."""
    latest: dict[str, PolicyChange] = {}
    for change in PolicyChange.objects.filter(target_type=Node._meta.label_lower,
                                              action__in=("drain", "undrain")).order_by("id"):
        latest[change.target_id] = change
    drained = {pk: c for pk, c in latest.items() if c.action == "drain"}
    out = []
    for node in Node.objects.filter(pk__in=[int(pk) for pk in drained]).order_by("name"):
        if node.state not in (NodeState.DRAINING, NodeState.DRAINED):
            change = drained[str(node.pk)]
            out.append(f"node {node.name} is {node.state}, but its last audit entry is the drain at "
                       f"{change.created_at.isoformat()} (no undrain recorded)")
    return out


def check_all(*, accepted_ids: Iterable[int] = (), exits: Exits | None = None,
              grace_s: float = DEFAULT_DEADLINE_GRACE_S, now: datetime | None = None) -> dict[str, list[str]]:
    """Every invariant by name, with its violations (an empty list where it holds)."""
    return {
        "nodes_over_capacity": nodes_over_capacity(),
        "double_booked_starts": double_booked_starts(),
        "deadlines_overdue": deadlines_overdue(grace_s=grace_s, now=now),
        "submissions_missing": submissions_missing(accepted_ids),
        "quotas_exceeded": quotas_exceeded(),
        "exited_zero_recorded_failed": exited_zero_recorded_failed(exits=exits),
        "undrained_without_audit": undrained_without_audit(),
    }


def violated(results: Mapping[str, list[str]]) -> list[str]:
    return [name for name, found in results.items() if found]
