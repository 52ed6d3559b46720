"""The list endpoints' filters (django-filter): a value that names nothing (``?state=bogus``, a
resource group that does not exist, an unknown audit action) is a 400 naming the filter, not an
empty list; and the schema documents each filter with its choices."""

from __future__ import annotations

from typing import Any

import django_filters as filters
from django.db.models import QuerySet

from scheduling.ascii_numbers import IntegerField
from scheduling.models import (
    Allocation,
    Membership,
    PolicyChange,
    PolicyEvaluation,
    PreemptionDecision,
    ResourceGroup,
    Tenant,
)
from scheduling.states import State

AUDIT_ACTIONS = ("create", "edit", "delete", "protect", "force_preempt", "pause", "resume", "drain", "undrain",
                 "agent_token", "hold", "release", "requeue")


class ChoicesIn(filters.BaseInFilter, filters.ChoiceFilter):
    """Comma-separated values, each one of the choices."""


class IdFilter(filters.NumberFilter):
    """A row id: an integer the id column can hold (a decimal, or one past the column, was sent
    to the database: a 500)."""

    field_class = IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, min_value=1, max_value=2**63 - 1, **kwargs)


def _group() -> filters.ModelChoiceFilter:
    return filters.ModelChoiceFilter(field_name="resource_group", to_field_name="name",
                                     queryset=ResourceGroup.objects.all(), help_text="a resource group's name")


class AllocationFilter(filters.FilterSet):
    state = ChoicesIn(choices=State.choices, help_text="one state, or several separated by commas")
    resource_group = _group()
    array = IdFilter(field_name="array_id", help_text="the tasks of one array (its id)")
    held = filters.TypedChoiceFilter(choices=[("true", "true"), ("false", "false")], coerce=lambda v: v == "true",
                                     help_text="true: held work only; false: work not held")

    class Meta:
        model = Allocation
        fields: list[str] = []


class DecisionFilter(filters.FilterSet):
    resource_group = _group()

    class Meta:
        model = PreemptionDecision
        fields: list[str] = []


class EvaluationFilter(filters.FilterSet):
    resource_group = _group()

    class Meta:
        model = PolicyEvaluation
        fields: list[str] = []


class MembershipFilter(filters.FilterSet):
    tenant = filters.ModelChoiceFilter(field_name="tenant", to_field_name="name", queryset=Tenant.objects.all(),
                                       help_text="a tenant's name")

    class Meta:
        model = Membership
        fields: list[str] = []


class AuditFilter(filters.FilterSet):
    action = filters.ChoiceFilter(choices=[(a, a) for a in AUDIT_ACTIONS])
    actor = filters.CharFilter(method="by_actor", help_text="a username, or 'system'")
    target_type = filters.CharFilter(help_text="such as scheduling.resourcegroup")
    target = filters.CharFilter(field_name="target_id", help_text="the changed row's id")

    class Meta:
        model = PolicyChange
        fields: list[str] = []

    def by_actor(self, qs: QuerySet[PolicyChange], name: str, value: Any) -> QuerySet[PolicyChange]:
        return qs.filter(actor__isnull=True) if value == "system" else qs.filter(actor__username=value)
