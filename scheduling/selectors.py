"""Reads for the API and pages: tenant scoping, what a tenant may see of a decision, the audit log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Count, Q, QuerySet

from scheduling.engine.score import explain_score
from scheduling.ids import decimal
from scheduling.models import (
    Allocation,
    AllocationEvent,
    DecisionAudience,
    JobArray,
    PolicyChange,
    PreemptionDecision,
)
from scheduling.permissions import is_operator


def remember_tenant_ids(user: Any, ids: list[int]) -> None:
    """Give ``tenant_ids`` the user's tenants when they were read already (with the API token)."""
    user._lattice_tenant_ids = list(ids)


def tenant_ids(user: Any) -> list[int]:
    """The tenants ``user`` is a member of, read once per request (cached on the user object)."""
    if not user.is_authenticated:
        return []
    cached = getattr(user, "_lattice_tenant_ids", None)
    if cached is None:
        cached = list(user.memberships.values_list("tenant_id", flat=True))
        remember_tenant_ids(user, cached)
    return list(cached)


def allocations_visible(user: Any) -> QuerySet[Allocation]:
    """Operators see every allocation; a member only its tenants' (another's id is a 404)."""
    qs = Allocation.objects.select_related("tenant", "user", "resource_group", "vcluster", "session_type")
    if is_operator(user):
        return qs
    return qs.filter(tenant_id__in=tenant_ids(user))


def arrays_visible(user: Any) -> QuerySet[JobArray]:
    """Arrays as allocations: operators all, members their tenants'."""
    qs = JobArray.objects.select_related("tenant", "resource_group")
    return qs if is_operator(user) else qs.filter(tenant_id__in=tenant_ids(user))


def array_counts(array_ids: list[int]) -> dict[int, dict[str, int]]:
    """How many of each array's tasks are in each state, and how many are ``held`` (one query)."""
    out: dict[int, dict[str, int]] = {pk: {} for pk in array_ids}
    rows = (Allocation.objects.filter(array_id__in=array_ids).values("array_id", "state")
            .annotate(n=Count("id"), held=Count("id", filter=Q(held=True))).order_by("array_id", "state"))
    for row in rows:
        counts = out[row["array_id"]]
        counts[row["state"]] = row["n"]
        if row["held"]:
            counts["held"] = counts.get("held", 0) + row["held"]
    return out


def events_of(allocation: Allocation) -> QuerySet[AllocationEvent]:
    return allocation.events.select_related("actor").order_by("created_at", "id")


def decisions_visible(user: Any, id_bound: tuple[str, int] | None = None) -> QuerySet[PreemptionDecision]:
    """Operators read every decision; a member those its tenants are in the audience of.

    One tenant (the usual case) is a join on the (tenant, decision) index, which
    the database walks newest first; several tenants a semi-join, so no row repeats.
    ``id_bound`` (a lookup and a value, as ``NewestFirst.id_bound`` gives a page's cursor) is
    put on the audience's own decision column too, so a deep page starts where its cursor is.
    """
    qs = PreemptionDecision.objects.select_related("preemptor", "resource_group")
    if is_operator(user):
        return qs
    mine = tenant_ids(user)
    bound = {f"decision_id__{id_bound[0]}": id_bound[1]} if id_bound else {}
    if len(mine) == 1:  # one filter() call: the bound is on the same join as the tenant
        return qs.filter(audience__tenant_id=mine[0], **{f"audience__{k}": v for k, v in bound.items()})
    return qs.filter(pk__in=DecisionAudience.objects.filter(tenant_id__in=mine, **bound).values("decision_id"))


# What a list shows of a decision: no candidates or policy (a record can hold thousands of candidates).
LIST_FIELDS = ("id", "resource_group__name", "created_at", "decided_for", "result", "code", "trigger", "nodes",
               "borrowed", "outcome", "victims", "explanation", "preemptor_id", "preemptor__tenant_id",
               "preemptor__preemption_class")


def victim_tenants(decision_ids: list[int]) -> dict[int, dict[int, int]]:
    """For each decision, its victims' tenants (victim id -> tenant id), in one query."""
    through = PreemptionDecision.victim_allocations.through
    out: dict[int, dict[int, int]] = {}
    for decision_id, alloc_id, tenant_id in through.objects.filter(preemptiondecision_id__in=decision_ids) \
            .values_list("preemptiondecision_id", "allocation_id", "allocation__tenant_id"):
        out.setdefault(decision_id, {})[alloc_id] = tenant_id
    return out


def redact_rows(rows: list[dict[str, Any]], user: Any) -> list[dict[str, Any]]:
    """Rows of ``LIST_FIELDS`` as ``user`` may read them, with one query for victims' tenants."""
    if is_operator(user):
        return [_redact(row, {}, None) for row in rows]
    mine = set(tenant_ids(user))
    victims = victim_tenants([row["id"] for row in rows])
    return [_redact(row, victims.get(row["id"], {}), mine) for row in rows]


def _redact(row: dict[str, Any], victim_tenant: dict[int, int], mine: set[int] | None) -> dict[str, Any]:
    """The readable form of one decision; ``mine`` None means an operator (everything, unredacted)."""
    body: dict[str, Any] = {
        "id": row["id"], "resource_group": row["resource_group__name"], "created_at": row["created_at"],
        "decided_for": row["decided_for"], "outcome": row["result"], "code": row["code"],
        "trigger": row["trigger"] or None, "nodes": row["nodes"], "borrowed": row["borrowed"],
        "execution": row["outcome"],
    }
    # The same types whoever reads: ids are integers (or null where hidden), a hidden preemptor
    # is described in preemptor_description.
    if mine is None:
        return {**body, "preemptor": row["preemptor_id"], "preemptor_description": None,
                "victims": [_with_int_id(v) for v in row["victims"]], "explanation": row["explanation"]}
    if row["preemptor__tenant_id"] in mine:
        body.update(preemptor=row["preemptor_id"], preemptor_description=None, explanation=row["explanation"])
    else:
        klass = row["preemptor__preemption_class"]
        text = f"a class-{'?' if klass is None else klass} allocation of another tenant"
        body.update(preemptor=None, preemptor_description=text,
                    explanation=preempted_by_other(text, row["trigger"], row["nodes"]))
    body["victims"] = [_with_int_id(v) if victim_tenant.get(int(v["id"])) in mine else
                       {"id": None, "tenant": "another tenant", "reason": v["reason"], "action": v["action"]}
                       for v in row["victims"]]
    return body


def _with_int_id(victim: dict[str, Any]) -> dict[str, Any]:
    """A victim as stored (its id a string, as the engine writes it) with its id an integer, as
    allocation ids are everywhere else in the API."""
    vid = victim.get("id")
    return {**victim, "id": int(vid)} if isinstance(vid, str) and vid.isdigit() else victim


# Why another tenant's work preempted a reader's, by the decision's trigger (docs/decisions.md).
TRIGGER_WORDS = {
    "reclaim": "the node's home vCluster took back a node it had lent (reclaim)",
    "priority": "the group's policy ranks that work above this job",
    "sensitive": "that work is a sensitive emergency claim, which may displace any work",
    "fair_share": "that work's tenant is below its fair share and this job's tenant above",
}


def preempted_by_other(preemptor: str, trigger: str | None, nodes: list[str]) -> str:
    """What a victim's tenant reads when the preemptor is another tenant's: by its class, where
    it was placed (the nodes this job made room on), and the trigger in words."""
    where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}"
    why = TRIGGER_WORDS.get(trigger or "priority", trigger or "priority")
    return f"Preempted to make room for {preemptor}, which was placed on {where}: {why}."


HOLD_PREFIX = "hold:"


def candidate_allocation(candidate_id: Any) -> int | None:
    """The allocation a decision's candidate stands for: its id, or for a hold (``hold:N``, nodes
    kept free for waiting preemptor N, not an allocation of its own) the allocation it is kept for.
    None for anything else."""
    text = str(candidate_id) if candidate_id is not None else ""
    if text.startswith(HOLD_PREFIX):
        text = text[len(HOLD_PREFIX):]
    return int(text) if decimal(text) else None


def redact_decision(record: PreemptionDecision, user: Any) -> dict[str, Any]:
    """One decision record in full as ``user`` may read it (see ``redact_decisions``)."""
    return redact_decisions([record], user)[0]


def redact_decisions(records: list[PreemptionDecision], user: Any) -> list[dict[str, Any]]:
    """Decision records in full as ``user`` may read them: other tenants' work is named only by
    class; candidates only the reader's own (others counted), the policy only for operators.
    Two queries for any number of records (select ``preemptor`` and ``resource_group`` with them)."""
    rows = []
    for record in records:
        preemptor = record.preemptor
        row = {f: getattr(record, f) for f in ("id", "created_at", "decided_for", "result", "code", "trigger",
                                               "nodes", "borrowed", "outcome", "victims", "explanation",
                                               "preemptor_id")}
        row.update(resource_group__name=record.resource_group.name,
                   preemptor__tenant_id=preemptor.tenant_id if preemptor else None,
                   preemptor__preemption_class=preemptor.preemption_class if preemptor else None)
        rows.append(row)
    if is_operator(user):
        return [{**_redact(row, {}, None), "candidates": record.candidates, "policy": record.policy_snapshot,
                 "queue_score": explain_score(record.queue_score)} for row, record in zip(rows, records, strict=True)]
    mine = set(tenant_ids(user))
    victims = victim_tenants([record.pk for record in records])
    # Candidates of the reader's own decisions that are the reader's own work (a hold: nodes kept
    # for the reader's own waiting request), in one query.
    asked = {pk for row, record in zip(rows, records, strict=True) if row["preemptor__tenant_id"] in mine
             for c in record.candidates if (pk := candidate_allocation(c.get("id"))) is not None}
    own_work = set(Allocation.objects.filter(tenant_id__in=mine, pk__in=asked).values_list(
        "pk", flat=True)) if asked else set()
    out = []
    for row, record in zip(rows, records, strict=True):
        chosen = victims.get(record.pk, {})
        own_ids = {str(i) for i, t in chosen.items() if t in mine}
        if row["preemptor__tenant_id"] in mine:
            own_ids |= {c["id"] for c in record.candidates if candidate_allocation(c.get("id")) in own_work}
        candidates = [c for c in record.candidates if c.get("id") in own_ids]
        hidden = len([c for c in record.candidates if "id" in c]) - len(candidates)
        # The queue score speaks of the preemptor's tenant (its budget, its share): its readers only.
        score = explain_score(record.queue_score) if row["preemptor__tenant_id"] in mine else None
        out.append({**_redact(row, chosen, mine), "candidates": candidates, "other_candidates": hidden,
                    "queue_score": score})
    return out


def live_for_tenants(events: list[tuple[str, dict[str, Any], int | None]]) -> list[dict[str, Any]]:
    """Each live event's payload as its tenant's group may read it, as REST redacts a decision:
    victims of that tenant by id, any other tenant's only counted (``other_victims``). One query
    for all the events' victims; payloads without victims are the operators' as they are."""
    named = {pk for _, payload, tenant in events if tenant is not None
             for v in payload.get("victims") or () if (pk := candidate_allocation(v)) is not None}
    owner = dict(Allocation.objects.filter(pk__in=named).values_list("pk", "tenant_id")) if named else {}
    out = []
    for _, payload, tenant in events:
        if tenant is None or "victims" not in payload:
            out.append(payload)
            continue
        own = [v for v in payload["victims"] if owner.get(candidate_allocation(v) or 0) == tenant]
        out.append({**payload, "victims": own, "other_victims": len(payload["victims"]) - len(own)})
    return out


def explanation(alloc: Allocation, user: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """What ``user`` may read of why ``alloc`` waits or was preempted: its latest decision, and
    every decision that chose it as a victim, oldest first (a fixed number of queries)."""
    latest = alloc.decisions.select_related("preemptor", "resource_group").order_by("-id").first()
    preempted = list(alloc.preempted_in.select_related("preemptor", "resource_group").order_by("id"))
    shown = redact_decisions([latest, *preempted] if latest else preempted, user)
    return (shown.pop(0) if latest else None), shown


AUDIT_FILTERS = ("action", "actor", "target_type", "target")


def audit_entries(params: Mapping[str, str]) -> QuerySet[PolicyChange]:
    """The audit log, newest first, narrowed by any of ``action``, ``actor`` (a username, or
    "system" for changes no one made by hand), ``target_type`` (such as scheduling.resourcegroup)
    and ``target`` (the changed row's id). The console's page and the API read it alike."""
    qs = PolicyChange.objects.select_related("actor").order_by("-id")
    if params.get("action"):
        qs = qs.filter(action=params["action"])
    actor = params.get("actor")
    if actor:
        qs = qs.filter(actor__isnull=True) if actor == "system" else qs.filter(actor__username=actor)
    if params.get("target_type"):
        qs = qs.filter(target_type=params["target_type"])
    if params.get("target"):
        qs = qs.filter(target_id=params["target"])
    return qs


def audit_changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """What an audit entry changed, field by field, nested objects as dotted names
    (``policy.max_victims``): each ``{"field", "before", "after"}``. A creation or deletion (no
    row on one side) lists nothing: the entry's action says it."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    old, new = _flat(before), _flat(after)
    return [{"field": name, "before": old.get(name), "after": new.get(name)}
            for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]


def _flat(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict) and item:
            out.update(_flat(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out
