"""Operators' configuration API: resource groups (policy, preview), vClusters, session types,
tenants and quotas, and overrides (protect, force-preempt, pause, resume).

Operators only: tenants get 403. Every change needs a ``reason`` and writes a
PolicyChange with the row before and after, in the same transaction; invalid
input is 400 with field errors and changes nothing. Tenants' work is never
edited here (an override asks it to leave, as a preemption would).
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.actions.overrides import (
    allocation_force_preempt,
    allocation_protect,
    group_pause,
    protect_until_problem,
)
from scheduling.actions.policies import config_save, snapshot
from scheduling.api.filters import AuditFilter
from scheduling.api.input_fields import RowById
from scheduling.api.pagination import NewestFirst, OldestFirst
from scheduling.api.serializers import ReasonInput, RefuseUnknown
from scheduling.ascii_numbers import ASCII_INPUTS, IntegerInput
from scheduling.decisions import policy_preview
from scheduling.evaluations import policy_save_evaluated
from scheduling.models import (
    REASON_MAX_LENGTH,
    Allocation,
    PolicyChange,
    PolicyEvaluation,
    Quota,
    ResourceGroup,
    SessionType,
    Tenant,
    VCluster,
)
from scheduling.models.cluster import validate_policy
from scheduling.passes.fairshare import STATUSES, standings
from scheduling.passes.snapshot import policy_of
from scheduling.permissions import IsOperator
from scheduling.selectors import audit_changes


class AlongsideReason(ReasonInput):
    """The reason of an audited edit, read from a body whose other fields its serializer checks."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            data = {"reason": data["reason"]} if "reason" in data else {}
        return super().to_internal_value(data)


def _reason(request: Request) -> str:
    data = AlongsideReason(data=request.data)
    data.is_valid(raise_exception=True)
    return str(data.validated_data["reason"])


class Checked(RefuseUnknown, serializers.ModelSerializer):
    """A model serializer (edited with a ``reason``) that also runs the model's own checks (its constraints included), so
    a value the database would refuse is a 400 with the field named, not a 500."""

    reason = serializers.CharField(write_only=True, max_length=REASON_MAX_LENGTH, required=False,
                                   help_text="Why: kept in the audit log. Required.")
    # The model's number columns read ASCII digits only, as every number input does.
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping, **{
        column: ASCII_INPUTS[field] for column, field in serializers.ModelSerializer.serializer_field_mapping.items()
        if field in ASCII_INPUTS}}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.pop("reason", None)  # read by the view (``_reason``), not a column
        model = self.Meta.model
        group = attrs.get("resource_group")
        if self.instance is not None and group is not None and group.pk != self.instance.resource_group_id:
            # Its nodes, allocations and decisions stay in their group: moving it would split them.
            raise serializers.ValidationError({"resource_group": ["cannot move to another resource group"]})
        candidate = copy.copy(self.instance) if self.instance is not None else model()
        for name, value in attrs.items():
            if not isinstance(model._meta.get_field(name), models.ManyToManyField):
                setattr(candidate, name, value)
        try:
            candidate.full_clean(validate_unique=False)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return attrs


class AuditedViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """Create and update with a reason, each audited; no delete (the admin keeps that)."""

    permission_classes = [IsOperator]
    pagination_class = OldestFirst
    http_method_names = ["get", "post", "patch", "head", "options"]

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        config_save(actor=self.request.user, reason=_reason(self.request), before=None, save=serializer.save)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        config_save(actor=self.request.user, reason=_reason(self.request), before=snapshot(serializer.instance),
                    save=serializer.save)


class VClusterOutput(Checked):
    resource_group = serializers.SlugRelatedField(slug_field="name", queryset=ResourceGroup.objects.all())
    tenants = serializers.SlugRelatedField(slug_field="name", queryset=Tenant.objects.all(), many=True,
                                           required=False)

    class Meta:
        model = VCluster
        fields = ["id", "resource_group", "name", "type", "allow_lending", "allow_borrowing", "max_borrow_pct",
                  "allow_aggressive_preemption", "weights", "tenants", "reason"]


class VClusterViewSet(AuditedViewSet):
    serializer_class = VClusterOutput
    queryset = VCluster.objects.select_related("resource_group").prefetch_related("tenants")


class SessionTypeOutput(Checked):
    resource_group = serializers.SlugRelatedField(slug_field="name", queryset=ResourceGroup.objects.all())

    class Meta:
        model = SessionType
        fields = ["id", "resource_group", "name", "priority", "preemptive", "preemptable", "preempts", "rank",
                  "rank_min", "rank_max", "scope", "criteria", "default_class", "mode", "max_preemptions_per_job",
                  "non_preemptible", "exclusive", "forced", "backfill", "reason"]


class SessionTypeViewSet(AuditedViewSet):
    serializer_class = SessionTypeOutput
    queryset = SessionType.objects.select_related("resource_group")


class QuotaOutput(Checked):
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    default_resource_group = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourceGroup.objects.all(), required=False, allow_null=True,
        help_text="Where the tenant's submissions without resource_group go (null: they must name one).")

    class Meta:
        model = Quota
        fields = ["id", "tenant", "max_nodes", "max_gpus", "max_concurrent_allocations", "max_preemption_class",
                  "max_priority", "default_priority", "priority_changeable", "min_priority", "fair_share",
                  "burst_allowance", "gpu_hours_budget",
                  "allow_non_preemptible", "allow_exclusive", "allow_forced", "allow_backfill",
                  "default_resource_group", "reason"]


class QuotaViewSet(AuditedViewSet):
    """A tenant's quota, by tenant name; quotas come with their tenants (created in the admin)."""

    serializer_class = QuotaOutput
    queryset = Quota.objects.select_related("tenant")
    lookup_field = "tenant__name"
    lookup_url_kwarg = "tenant"
    http_method_names = ["get", "patch", "head", "options"]


class TenantOutput(serializers.ModelSerializer):
    quota = QuotaOutput(read_only=True)
    members = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = ["id", "name", "display_name", "quota", "members"]

    def get_members(self, tenant: Tenant) -> list[dict[str, Any]]:
        """Each member with its priority policy in this tenant (null: the tenant's own)."""
        return [{"user": m.user.get_username(), "role": m.role, "default_priority": m.default_priority,
                 "priority_changeable": m.priority_changeable, "min_priority": m.min_priority,
                 "max_priority": m.max_priority} for m in tenant.memberships.all()]


class TenantViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsOperator]
    pagination_class = OldestFirst
    serializer_class = TenantOutput
    queryset = Tenant.objects.select_related("quota").prefetch_related("memberships__user")
    lookup_field = "name"


class GroupOutput(serializers.ModelSerializer):
    class Meta:
        model = ResourceGroup
        fields = ["id", "name", "description", "policy", "paused", "shadow", "updated_at"]
        read_only_fields = fields


class ShareOutput(serializers.Serializer):
    """A tenant's standing in the group (passes/fairshare.py)."""

    tenant = serializers.CharField()
    share = serializers.FloatField(help_text="Dominant usage share: max over gpu, cpu, memory of used/capacity.")
    fair_share = serializers.FloatField()
    status = serializers.ChoiceField(choices=STATUSES)
    starving = serializers.BooleanField()
    below_since = serializers.DateTimeField(allow_null=True, help_text="Below fair_share x tolerance since.")
    updated_at = serializers.DateTimeField(allow_null=True)


class SharesOutput(serializers.Serializer):
    resource_group = serializers.CharField()
    kind = serializers.CharField()
    shares = ShareOutput(many=True)


class PolicyInput(RefuseUnknown, serializers.Serializer):
    policy = serializers.JSONField()

    def validate_policy(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object of the contract's policy fields")
        try:
            validate_policy(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return value


class PolicyEdit(PolicyInput, ReasonInput):
    evaluation = IntegerInput(required=False, allow_null=True, min_value=1, help_text=(
        "A finished evaluation of this very policy on this group (POST /evaluations/): kept with the "
        "save's audit entry while the group's policy is still the one it compared against."))


class ResourceGroupViewSet(viewsets.ReadOnlyModelViewSet):
    """Groups are created in the admin; here their policy is read, previewed and changed."""

    permission_classes = [IsOperator]
    pagination_class = OldestFirst
    serializer_class = GroupOutput
    queryset = ResourceGroup.objects.all()
    lookup_field = "name"

    @extend_schema(request=PolicyEdit, responses={200: GroupOutput})
    @action(detail=True, methods=["put"])
    def policy(self, request: Request, name: str | None = None) -> Response:
        """Replace the policy (the whole document, as the contract defines it), with a reason."""
        data = PolicyEdit(data=request.data)
        data.is_valid(raise_exception=True)
        group, evaluation = self.get_object(), data.validated_data.get("evaluation")
        if evaluation and not PolicyEvaluation.objects.filter(pk=evaluation, resource_group=group).exists():
            raise serializers.ValidationError({"evaluation": [f"no evaluation #{evaluation} of {group.name}"]})
        group = policy_save_evaluated(group=group, policy=data.validated_data["policy"], actor=request.user,
                                      reason=data.validated_data["reason"], evaluation_id=evaluation)
        return Response(GroupOutput(group).data)

    @extend_schema(responses={200: SharesOutput})
    @action(detail=True, methods=["get"])
    def shares(self, request: Request, name: str | None = None) -> Response:
        """Each tenant's tracked share, fair share and starvation status in the group."""
        group = self.get_object()
        policy = policy_of(group)
        rows = standings(group, timezone.now(), policy)
        return Response({"resource_group": group.name, "kind": policy.kind,
                         "shares": [row.to_dict() for row in rows]})

    @extend_schema(request=PolicyInput, responses={200: dict})
    @action(detail=True, methods=["post"])
    def preview(self, request: Request, name: str | None = None) -> Response:
        """What the policy would change now (nothing is stored)."""
        data = PolicyInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(policy_preview(self.get_object(), data.validated_data["policy"]))


class ProtectInput(ReasonInput):
    allocation = RowById(queryset=Allocation.objects.all())
    until = serializers.DateTimeField(help_text="A time to come.")

    def validate_until(self, until: datetime) -> datetime:
        problem = protect_until_problem(until)
        if problem:
            raise serializers.ValidationError(problem)
        return until


class ForcePreemptInput(ReasonInput):
    allocation = RowById(queryset=Allocation.objects.all())


class PauseInput(ReasonInput):
    resource_group = serializers.SlugRelatedField(slug_field="name", queryset=ResourceGroup.objects.all())


class OverrideViewSet(viewsets.ViewSet):
    """Overrides, each audited with its reason (see also the console)."""

    permission_classes = [IsOperator]

    @extend_schema(request=ProtectInput, responses={200: dict})
    @action(detail=False, methods=["post"])
    def protect(self, request: Request) -> Response:
        data = ProtectInput(data=request.data)
        data.is_valid(raise_exception=True)
        alloc = allocation_protect(allocation=data.validated_data["allocation"], until=data.validated_data["until"],
                                   actor=request.user, reason=data.validated_data["reason"])
        return Response({"allocation": alloc.pk, "protected_until": alloc.protected_until})

    @extend_schema(request=ForcePreemptInput, responses={200: dict})
    @action(detail=False, methods=["post"], url_path="force-preempt")
    def force_preempt(self, request: Request) -> Response:
        data = ForcePreemptInput(data=request.data)
        data.is_valid(raise_exception=True)
        alloc = allocation_force_preempt(allocation=data.validated_data["allocation"], actor=request.user,
                                         reason=data.validated_data["reason"])
        alloc.refresh_from_db()
        return Response({"allocation": alloc.pk, "state": alloc.state})

    def _pause(self, request: Request, paused: bool) -> Response:
        data = PauseInput(data=request.data)
        data.is_valid(raise_exception=True)
        group = group_pause(group=data.validated_data["resource_group"], paused=paused, actor=request.user,
                            reason=data.validated_data["reason"])
        return Response(GroupOutput(group).data, status=status.HTTP_200_OK)

    @extend_schema(request=PauseInput, responses={200: GroupOutput})
    @action(detail=False, methods=["post"])
    def pause(self, request: Request) -> Response:
        return self._pause(request, True)

    @extend_schema(request=PauseInput, responses={200: GroupOutput})
    @action(detail=False, methods=["post"])
    def resume(self, request: Request) -> Response:
        return self._pause(request, False)


class AuditOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, default=None,
                                  help_text="Null for a change no one made by hand.")
    target = serializers.CharField(source="target_repr")
    changes = serializers.SerializerMethodField(help_text="Field by field, nested ones as dotted names.")

    class Meta:
        model = PolicyChange
        fields = ["id", "created_at", "actor", "action", "target_type", "target_id", "target", "reason",
                  "changes", "before", "after"]
        read_only_fields = fields

    def get_changes(self, entry: PolicyChange) -> list[dict[str, Any]]:
        return audit_changes(entry.before, entry.after)


class AuditViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log of policy changes and overrides, newest first (the console's Audit page)."""

    permission_classes = [IsOperator]
    pagination_class = NewestFirst
    serializer_class = AuditOutput
    filterset_class = AuditFilter
    queryset = PolicyChange.objects.select_related("actor").order_by("-id")
