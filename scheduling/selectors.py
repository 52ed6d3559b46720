"""Reads for the API and pages: tenant scoping and what a tenant may see of a decision."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from scheduling.api.permissions import is_operator
from scheduling.models import Allocation, AllocationEvent, PreemptionDecision


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
    qs = PreemptionDecision.objects.select_related("preemptor", "resource_group")
    if is_operator(user):
        return qs
    mine = tenant_ids(user)
    return qs.filter(Q(preemptor__tenant_id__in=mine) | Q(victim_allocations__tenant_id__in=mine)).distinct()


def redact_decision(record: PreemptionDecision, user: Any) -> dict[str, Any]:
    """A decision record as ``user`` may read it: other tenants' work is named only by class."""
    body: dict[str, Any] = {
        "id": record.pk, "resource_group": record.resource_group.name, "created_at": record.created_at,
        "decided_for": record.decided_for, "outcome": record.result, "code": record.code,
        "trigger": record.trigger or None, "nodes": record.nodes, "borrowed": record.borrowed,
        "execution": record.outcome,
    }
    if is_operator(user):
        return {**body, "preemptor": record.preemptor_id, "victims": record.victims,
                "candidates": record.candidates, "explanation": record.explanation,
                "policy": record.policy_snapshot}
    mine = set(tenant_ids(user))
    preemptor = record.preemptor
    own_preemptor = preemptor is not None and preemptor.tenant_id in mine
    victim_tenants = dict(record.victim_allocations.values_list("id", "tenant_id"))
    victims = []
    for v in record.victims:
        if victim_tenants.get(int(v["id"])) in mine:
            victims.append(v)
        else:
            victims.append({"id": None, "tenant": "another tenant", "reason": v["reason"], "action": v["action"]})
    own_ids = {str(i) for i, t in victim_tenants.items() if t in mine}
    if own_preemptor:
        own_ids |= set(map(str, Allocation.objects.filter(
            tenant_id__in=mine, pk__in=[int(c["id"]) for c in record.candidates if "id" in c]
        ).values_list("pk", flat=True)))
    candidates = [c for c in record.candidates if c.get("id") in own_ids]
    hidden = len([c for c in record.candidates if "id" in c]) - len(candidates)
    if own_preemptor:
        preemptor_text: Any = record.preemptor_id
        explanation = record.explanation
    else:
        klass = preemptor.preemption_class if preemptor is not None else "?"
        preemptor_text = f"a class-{klass} allocation of another tenant"
        explanation = (f"Preempted to make room for {preemptor_text} "
                       f"(reason: {record.trigger or 'priority'}); its nodes: {', '.join(record.nodes)}.")
    return {**body, "preemptor": preemptor_text, "victims": victims, "candidates": candidates,
            "other_candidates": hidden, "explanation": explanation}
