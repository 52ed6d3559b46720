"""Operators' API for a member's priority policy in its tenant (Backend.AI's user resource
policy): ``GET /memberships/[?tenant=NAME]``, ``GET/PATCH /memberships/{id}/`` with a reason,
audited. Who belongs to a tenant is the admin's; here only the policy is edited."""

from __future__ import annotations

from rest_framework import serializers

from scheduling.api.filters import MembershipFilter
from scheduling.api.operators import AuditedViewSet, Checked
from scheduling.models import Membership


class MembershipOutput(Checked):
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "default_priority", "priority_changeable", "min_priority",
                  "max_priority", "reason"]
        read_only_fields = ["role"]
        extra_kwargs = {name: {"help_text": text} for name, text in (
            ("default_priority", "What this user's request gets when it names none (null: the tenant's)."),
            ("priority_changeable", "May this user name a priority (the tenant's policy must allow it too)."),
            ("min_priority", "The lowest priority this user may name (null: the tenant's); within the tenant's."),
            ("max_priority", "The highest priority this user may name (null: the tenant's); within the tenant's."),
        )}


class MembershipViewSet(AuditedViewSet):
    """A member's priority policy: listed (``?tenant=`` one tenant's) and edited with a reason."""

    serializer_class = MembershipOutput
    http_method_names = ["get", "patch", "head", "options"]
    filterset_class = MembershipFilter  # an unknown tenant is a 400 naming the filter
    queryset = Membership.objects.select_related("tenant", "user").order_by("id")
