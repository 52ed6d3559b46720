"""Operators' node endpoints: list, drain, undrain, issue an agent token (shown once), GPU health
thresholds and clearing the Xid events a node was told of (nodes/health.py)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from nodes import actions, drain, health
from nodes.models import XID_LIST, Node
from scheduling.api.pagination import ByName
from scheduling.api.serializers import ReasonInput, RefuseUnknown
from scheduling.ascii_numbers import IntegerInput
from scheduling.models import REASON_MAX_LENGTH
from scheduling.permissions import IsOperator


class AgentTokenInput(RefuseUnknown, serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX_LENGTH, required=False, allow_blank=True, default="")


class NodeOutput(serializers.ModelSerializer):
    resource_group = serializers.CharField(source="resource_group.name")
    vcluster = serializers.CharField(source="vcluster.name", allow_null=True, default=None)
    borrowed_by = serializers.CharField(source="borrowed_by.name", allow_null=True, default=None)

    class Meta:
        model = Node
        fields = ["id", "name", "resource_group", "vcluster", "borrowed_by", "state", "gpu", "cpu", "memory",
                  "labels", "last_heartbeat_at", "agent_version", "cgroups", "cgroups_note", "gpu_health",
                  "health_reason", *health.THRESHOLDS]
        read_only_fields = fields


class ThresholdsInput(RefuseUnknown, serializers.Serializer):
    """Any of the node's GPU health thresholds, with why."""

    reason = serializers.CharField(max_length=REASON_MAX_LENGTH)
    gpu_max_temperature_c = IntegerInput(min_value=0, max_value=200, required=False)
    gpu_max_ecc_uncorrectable = IntegerInput(min_value=0, max_value=2**31 - 1, required=False)
    gpu_retired_pending_degrades = serializers.BooleanField(required=False)
    gpu_xids = serializers.CharField(max_length=255, allow_blank=True, required=False, validators=[XID_LIST])


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsOperator]
    serializer_class = NodeOutput
    pagination_class = ByName  # the default cursor orders by a "created" field nodes do not have
    queryset = Node.objects.select_related("resource_group", "vcluster", "borrowed_by").order_by("name")
    lookup_field = "name"

    def _reason(self, request: Request) -> str:
        data = ReasonInput(data=request.data)
        data.is_valid(raise_exception=True)
        return str(data.validated_data["reason"])

    @extend_schema(request=ReasonInput, responses={200: NodeOutput})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str | None = None) -> Response:
        node = drain.node_drain(node=self.get_object(), actor=request.user, reason=self._reason(request))
        return Response(NodeOutput(node).data)

    @extend_schema(request=ReasonInput, responses={200: NodeOutput})
    @action(detail=True, methods=["post"])
    def undrain(self, request: Request, name: str | None = None) -> Response:
        node = drain.node_undrain(node=self.get_object(), actor=request.user, reason=self._reason(request))
        return Response(NodeOutput(node).data)

    @extend_schema(request=ThresholdsInput, responses={200: NodeOutput})
    @action(detail=True, methods=["post"], url_path="gpu-thresholds")
    def gpu_thresholds(self, request: Request, name: str | None = None) -> Response:
        """Set the node's GPU health thresholds (audited); its stored health is judged again at once."""
        data = ThresholdsInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        node = health.node_health_thresholds(node=self.get_object(), actor=request.user, reason=values.pop("reason"),
                                             **values)
        return Response(NodeOutput(node).data)

    @extend_schema(request=ReasonInput, responses={200: NodeOutput})
    @action(detail=True, methods=["post"], url_path="clear-xids")
    def clear_xids(self, request: Request, name: str | None = None) -> Response:
        """Forget the Xid events the node's agent reported (dealt with), audited."""
        node = health.node_clear_xids(node=self.get_object(), actor=request.user, reason=self._reason(request))
        return Response(NodeOutput(node).data)

    @extend_schema(request=AgentTokenInput, responses={200: inline_serializer("AgentToken", {
        "node": serializers.CharField(), "token": serializers.CharField(), "note": serializers.CharField()})})
    @action(detail=True, methods=["post"], url_path="agent-token")
    def agent_token(self, request: Request, name: str | None = None) -> Response:
        """A new token for the node's agent, in this response only; earlier ones are revoked.
        A ``reason`` is optional here and kept in the audit log."""
        node = self.get_object()
        data = AgentTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        token: Any = actions.agent_token_replace(node=node, actor=request.user,
                                                 reason=data.validated_data["reason"])
        return Response({"node": node.name, "token": token, "note": "shown once; earlier tokens are revoked"})
