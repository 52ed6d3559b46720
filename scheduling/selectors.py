"""Reads for the API and pages: tenant scoping and what a tenant may see of a decision."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet

from scheduling.api.permissions import is_operator
from scheduling.models import Allocation, AllocationEvent, DecisionAudience, PreemptionDecision


def tenant_ids(user: Any) -> list[int]:
    return list(user.memberships.values_list("tenant_id", flat=True)) if user.is_authenticated else []


def allocations_visible(user: Any) -> QuerySet[Allocation]:
    """Operators see every allocation; a member only its tenants' (another's id is a 404)."""
    qs = Allocation.objects.select_related("tenant", "user", "resource_group", "vcluster", "session_type")
    if is_operator(user):
        return qs
    return qs.filter(tenant_id__in=tenant_ids(user))


def events_of(allocation: Allocation) -> QuerySet[AllocationEvent]:
    return allocation.events.select_related("actor").order_by("created_at", "id")


def decisions_visible(user: Any) -> QuerySet[PreemptionDecision]:
    """Operators read every decision; a member those its tenants are in the audience of.

    One tenant (the usual case) is a join on the (tenant, decision) index, which
    the database walks newest first; several tenants a semi-join, so no row repeats.
    """
    qs = PreemptionDecision.objects.select_related("preemptor", "resource_group").prefetch_related(
        Prefetch("victim_allocations", queryset=Allocation.objects.only("id", "tenant_id")))
    if is_operator(user):
        return qs
    mine = tenant_ids(user)
    if len(mine) == 1:
        return qs.filter(audience__tenant_id=mine[0])
    return qs.filter(pk__in=DecisionAudience.objects.filter(tenant_id__in=mine).values("decision_id"))


def redact_decision(record: PreemptionDecision, user: Any, full: bool = True,
                    mine: set[int] | None = None) -> dict[str, Any]:
    """A decision record as ``user`` may read it: other tenants' work is named only by class.

    ``full=False`` is the list form: no candidates or policy (a record can hold
    thousands of candidates; lists defer both columns) and no query beyond
    prefetches when the caller passes the reader's tenants as ``mine``.
    """
    body: dict[str, Any] = {
        "id": record.pk, "resource_group": record.resource_group.name, "created_at": record.created_at,
        "decided_for": record.decided_for, "outcome": record.result, "code": record.code,
        "trigger": record.trigger or None, "nodes": record.nodes, "borrowed": record.borrowed,
        "execution": record.outcome,
    }
    if is_operator(user):
        body.update(preemptor=record.preemptor_id, victims=record.victims, explanation=record.explanation)
        if full:
            body.update(candidates=record.candidates, policy=record.policy_snapshot)
        return body
    if mine is None:
        mine = set(tenant_ids(user))
    preemptor = record.preemptor
    own_preemptor = preemptor is not None and preemptor.tenant_id in mine
    victim_tenants = {a.pk: a.tenant_id for a in record.victim_allocations.all()}
    victims = []
    for v in record.victims:
        if victim_tenants.get(int(v["id"])) in mine:
            victims.append(v)
        else:
            victims.append({"id": None, "tenant": "another tenant", "reason": v["reason"], "action": v["action"]})
    if own_preemptor:
        body.update(preemptor=record.preemptor_id, explanation=record.explanation)
    else:
        klass = preemptor.preemption_class if preemptor is not None else "?"
        text = f"a class-{klass} allocation of another tenant"
        body.update(preemptor=text, explanation=(f"Preempted to make room for {text} (reason: "
                                                 f"{record.trigger or 'priority'}); its nodes: "
                                                 f"{', '.join(record.nodes)}."))
    body["victims"] = victims
    if not full:
        return body
    own_ids = {str(i) for i, t in victim_tenants.items() if t in mine}
    if own_preemptor:
        own_ids |= set(map(str, Allocation.objects.filter(
            tenant_id__in=mine, pk__in=[int(c["id"]) for c in record.candidates if "id" in c]
        ).values_list("pk", flat=True)))
    candidates = [c for c in record.candidates if c.get("id") in own_ids]
    hidden = len([c for c in record.candidates if "id" in c]) - len(candidates)
    body.update(candidates=candidates, other_candidates=hidden)
    return body
