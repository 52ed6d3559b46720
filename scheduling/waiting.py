"""Why a pending request waits: the limit that binds, named, with a short code.

Computed when read (the explain API, the job page, the queue view, the operator's queue), never in
the pass: the pass stays as fast as it was, and the answer is current when it is read, where a
stored one would be as old as the last change of the engine's code. It reads the group's snapshot
(as the what-if does), its holds, the tenants' quota use and the latest decision of each request.

The checks, in order; the first that applies is the answer (docs/decisions.md, "Why a request
waits"): ``HELD``, ``DEPENDENCY``, ``ARRAY_THROTTLE``, ``QUOTA_<NAME>``, ``AWAITING_VICTIMS``, then the capacity limits
of ``engine/binding.py`` (``BORROW_LIMIT``, ``LENDING_CAP``, ``NODES_UNAVAILABLE``, ``CONSTRAINTS``,
``PRIORITY``, ``RESOURCES``, or ``FITS_NOW``), each with the engine's own code for why preemption
does not help. The words are for the request's tenant: vClusters, node states and counts, never
another tenant's work.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db.models import Count, F, Sum

from scheduling.engine import binding
from scheduling.engine.explain import WAIT_TEXT
from scheduling.models import Allocation, JobArray, Quota, ResourceGroup
from scheduling.passes.holds import holds_of, reserve_holds
from scheduling.passes.queue import last_codes, schedulable, within_throttle
from scheduling.passes.snapshot import ALLOCATION_FIELDS, engine_allocation, load_snapshot
from scheduling.states import HOLDING, State

HELD, DEPENDENCY, THROTTLE, AWAITING = "HELD", "DEPENDENCY", "ARRAY_THROTTLE", "AWAITING_VICTIMS"
# The hard quotas in the order they are checked: (field, what it counts, index in the usage).
QUOTAS = (("max_concurrent_allocations", "allocations at once", 0), ("max_nodes", "nodes", 1),
          ("max_gpus", "GPUs", 2))
CODES = (HELD, DEPENDENCY, THROTTLE, *(f"QUOTA_{name.upper()}" for name, _, _ in QUOTAS), AWAITING,
         *binding.CAPACITY_CODES)
DONE = "completed"


def why_waiting(group: ResourceGroup, ids: list[int]) -> dict[int, dict[str, Any]]:
    """For each pending allocation of ``group`` among ``ids``: ``code``, ``explanation`` (the
    tenant's words), ``facts`` and ``preemption`` (the engine's latest code and its words, or None).
    A fixed number of queries for any number of ids."""
    objs = {a.pk: a for a in Allocation.objects.filter(pk__in=ids, resource_group=group, state=State.PENDING)}
    if not objs:
        return {}
    rows = {r["id"]: r for r in Allocation.objects.filter(pk__in=objs).values(*ALLOCATION_FIELDS, "tenant_id")}
    out: dict[int, dict[str, Any]] = {}
    for pk, alloc in objs.items():
        found = _held(alloc) or _dependency(alloc)
        if found:
            out[pk] = _answer(*found, None)
    throttled = _throttled(group, [objs[pk] for pk in objs if pk not in out])
    out.update({pk: _answer(*found, None) for pk, found in throttled.items()})
    quota = _quotas([objs[pk] for pk in objs if pk not in out])
    out.update({pk: _answer(*found, None) for pk, found in quota.items()})
    rest = [pk for pk in objs if pk not in out]
    if not rest:
        return out
    snap = load_snapshot(group)
    holds = holds_of(group)
    reserve_holds(snap, holds)
    codes = last_codes(rest)
    for pk in rest:
        engine_code = codes.get(pk)
        if pk in holds:
            out[pk] = _answer(AWAITING, {"nodes": len(holds[pk])}, None)
            continue
        limit = binding.binding_limit(snap.cluster, engine_allocation(rows[pk]))
        preemption = None
        if limit.code != "FITS_NOW" and engine_code in WAIT_TEXT:
            preemption = {"code": engine_code, "explanation": WAIT_TEXT[engine_code].format(
                nodes="its held nodes", bound=_n(snap.policy.max_victims), value=_n(rows[pk]["value"]))}
        out[pk] = _answer(limit.code, limit.facts, preemption)
    return out


def _answer(code: str, facts: dict[str, Any], preemption: dict[str, Any] | None) -> dict[str, Any]:
    text = reason_text(code, facts)
    if preemption is not None:
        text += f" Preemption cannot start it sooner: {preemption['explanation']}."
    return {"code": code, "explanation": text, "facts": facts, "preemption": preemption}


def _held(alloc: Allocation) -> tuple[str, dict[str, Any]] | None:
    """Held by its user or an operator: nothing else counts until the hold is released."""
    if alloc.held:
        return HELD, {"by": alloc.held_by or None}
    return None


def _dependency(alloc: Allocation) -> tuple[str, dict[str, Any]] | None:
    """Waiting on the jobs it depends on (``depends_on``, ``dependency`` not yet settled): unmet
    while any of them has not completed. Only counted: they may be another user's."""
    if not alloc.dependency:
        return None
    jobs = [entry["job"] for entry in alloc.depends_on or []]
    unmet = Allocation.objects.filter(pk__in=jobs).exclude(state=DONE).count()
    return DEPENDENCY, {"unmet": unmet, "never": alloc.dependency == "never"}


def _throttled(group: ResourceGroup, allocs: list[Allocation]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Array tasks the pass leaves out because their array's throttle (``%N``) is reached: N of its
    tasks hold nodes, or the slots left go to its lower indices (``passes/queue.within_throttle``,
    the pass's own rule)."""
    arrays = {a.array_id for a in allocs if a.array_id is not None}
    throttles = dict(JobArray.objects.filter(pk__in=arrays, throttle__isnull=False).values_list("id", "throttle"))
    if not throttles:
        return {}
    allowed = set(within_throttle(schedulable(group).filter(array_id__in=list(throttles)), set(holds_of(group)))
                  .values_list("id", flat=True))
    holding = Counter(Allocation.objects.filter(array_id__in=list(throttles), state__in=HOLDING)
                      .values_list("array_id", flat=True))
    return {a.pk: (THROTTLE, {"array": a.array_id, "throttle": throttles[a.array_id], "holding": holding[a.array_id]})
            for a in allocs if a.array_id in throttles and a.pk not in allowed}


def _quotas(allocs: list[Allocation]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Requests a hard quota keeps from starting: what the tenant's holding work uses plus the
    request over the limit, checked where capacity is consumed (as the pass's quota book does)."""
    tenants = {a.tenant_id for a in allocs}
    if not tenants:
        return {}
    limits = {q.tenant_id: q for q in Quota.objects.filter(tenant_id__in=tenants)}
    used = {r["tenant_id"]: (r["n"], r["nodes"] or 0, r["gpus"] or 0) for r in Allocation.objects.filter(
        tenant_id__in=tenants, state__in=HOLDING).values("tenant_id").annotate(
        n=Count("id"), nodes=Sum("node_count"), gpus=Sum(F("node_count") * F("per_node_gpu")))}
    out = {}
    for a in allocs:
        quota = limits.get(a.tenant_id)
        if quota is None:
            continue
        want = (1, a.node_count, a.node_count * a.per_node_gpu)
        have = used.get(a.tenant_id, (0, 0, 0))
        for name, _, i in QUOTAS:
            limit = getattr(quota, name)
            if have[i] + want[i] > limit:
                out[a.pk] = (f"QUOTA_{name.upper()}", {"quota": name, "current": have[i], "requested": want[i],
                                                       "limit": limit})
                break
    return out


def _n(x: float | None) -> str:
    if x is None:
        return "unlimited"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def reason_text(code: str, f: dict[str, Any]) -> str:
    """The sentence a tenant reads for a reason code and its facts."""
    if code == HELD:
        return "It is on hold and is not considered until the hold is released."
    if code == DEPENDENCY:
        if f.get("never"):
            return "Its dependencies can never be met; it stays pending until it is cancelled."
        return f"It waits for {_plural(f['unmet'], 'job')} it depends on to complete."
    if code == THROTTLE:
        return (f"Its array lets at most {f['throttle']} of its tasks hold nodes at once (%{f['throttle']}); "
                f"{f['holding']} do now and any slot left goes to its lower indices first.")
    if code.startswith("QUOTA_"):
        what = {name: words for name, words, _ in QUOTAS}[f["quota"]]
        return (f"Your tenant's hard quota on {what} binds: its running work holds {f['current']}, this job "
                f"needs {f['requested']} more, and the limit is {f['limit']}.")
    if code == AWAITING:
        return (f"Room is being made for it on {_plural(f['nodes'], 'node')}: the work chosen to leave them is "
                "still checkpointing or stopping.")
    return _capacity_text(code, f)


def _capacity_text(code: str, f: dict[str, Any]) -> str:
    if code == "FITS_NOW":
        return "Free capacity can hold it now; the next scheduler pass starts it."
    if code == "BORROW_LIMIT":
        why = ("work that cannot be preempted runs only on its own vCluster's nodes" if f["why"] == "not_preemptible"
               else f"vCluster {f['vcluster']} does not borrow other vClusters' nodes")
        return (f"Its vCluster {f['vcluster']} has no free room for it, and {why}; "
                f"{_plural(f['idle_elsewhere'], 'idle node')} elsewhere would hold it.")
    if code == "LENDING_CAP":
        parts = []
        for lender in f["lenders"]:
            cap = (f"{lender['vcluster']} does not lend its nodes" if not lender["allow_lending"] else
                   f"{lender['vcluster']} lends at most {lender['cap']} of its {lender['home_nodes']} nodes "
                   f"({lender['max_borrow_pct']:.0%}) and already lends {lender['lent']}")
            parts.append(f"{_plural(lender['idle_nodes'], 'idle node')} of vCluster {lender['vcluster']} would "
                         f"hold it, but {cap}")
        return f"Its vCluster {f['vcluster']} has no free room for it. " + "; ".join(parts) + " (its lending cap)."
    if code == "NODES_UNAVAILABLE":
        states = ", ".join(f"{n} {state}" for state, n in f["states"].items())
        return f"The nodes that would hold it are out of service ({states})."
    if code == "CONSTRAINTS":
        asked = [f"label {k}={v}" for k, v in f["labels"].items()]
        if f["same"]:
            asked.append(f"all nodes with the same {f['same']}")
        return (f"Its constraints ({'; '.join(asked)}) leave out the free nodes: "
                f"{_plural(f['free_nodes_without'], 'free node')} would hold it without them.")
    if code == "PRIORITY":
        return (f"Capacity for it is being freed on {_plural(f['nodes_being_freed'], 'node')}, but for work "
                "ahead of it in the queue.")
    size = ", ".join(f"{r}={_n(a)}" for r, a in f["per_node"].items()) or "no resources"
    return (f"Not enough free capacity where it may run: it needs {_plural(f['nodes'], 'node')} with {size}, "
            f"and of the {_plural(f['usable_nodes'], 'node')} it may use {f['with_room']} "
            f"{'has' if f['with_room'] == 1 else 'have'} room now.")
