"""Policy evaluations through the API (operators only): the console's "evaluate on the last N
days" for scripts and the CLI. The same calls as the pages (``scheduling.evaluations``): one
evaluation at a time in the installation (409 naming the one that runs), progress while it runs,
cancel, and the replay's report once done. ``PUT /resource-groups/{name}/policy/`` with
``evaluation`` keeps a finished one with the save's audit entry, as the editor does."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.api.filters import EvaluationFilter
from scheduling.api.operators import PolicyInput
from scheduling.api.pagination import NewestFirst
from scheduling.api.serializers import RefuseUnknown
from scheduling.ascii_numbers import IntegerInput
from scheduling.evaluations import evaluation_cancel, evaluation_start
from scheduling.models import PolicyEvaluation, ResourceGroup
from scheduling.models.evaluations import MAX_DAYS, MIN_DAYS
from scheduling.permissions import IsOperator


class EvaluationInput(RefuseUnknown, serializers.Serializer):
    resource_group = serializers.SlugRelatedField(slug_field="name", queryset=ResourceGroup.objects.all())
    policy = serializers.JSONField(help_text="The edited policy: the whole document, as the group's policy.")
    days = IntegerInput(min_value=MIN_DAYS, max_value=MAX_DAYS, default=7,
                        help_text="Replay the group's history of this many days, up to now.")

    def validate_policy(self, value: Any) -> dict[str, Any]:
        checked = PolicyInput(data={"policy": value})  # the engine's parser, errors by path
        if not checked.is_valid():
            raise serializers.ValidationError(checked.errors["policy"])
        policy: dict[str, Any] = checked.validated_data["policy"]
        return policy


class EvaluationOutput(serializers.ModelSerializer):
    resource_group = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PolicyEvaluation
        fields = ["id", "resource_group", "status", "days", "since", "until", "requested_by", "created_at",
                  "started_at", "finished_at", "jobs_done", "jobs_total", "error", "cancel_requested",
                  "policy_change", "current_policy", "candidate_policy"]
        read_only_fields = fields


class EvaluationDetail(EvaluationOutput):
    report = serializers.JSONField(read_only=True, help_text="The replay's report (lattice.replay/1) once done.")

    class Meta(EvaluationOutput.Meta):
        fields = [*EvaluationOutput.Meta.fields, "report"]
        read_only_fields = fields


class EvaluationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Newest first; ``?resource_group=NAME`` narrows the list (a group that does not exist is a
    400 naming the filter). Lists leave out the report."""

    permission_classes = [IsOperator]
    pagination_class = NewestFirst
    filterset_class = EvaluationFilter
    queryset = PolicyEvaluation.objects.select_related("resource_group", "requested_by")

    def get_serializer_class(self) -> Any:
        return EvaluationDetail if self.action == "retrieve" else EvaluationOutput

    @extend_schema(request=EvaluationInput, responses={202: EvaluationOutput})
    def create(self, request: Request) -> Response:
        """Start one: the group's history of the last ``days`` replayed under ``policy`` against
        the group's policy now. 202: queued (follow ``status`` and ``jobs_done``)."""
        data = EvaluationInput(data=request.data)
        data.is_valid(raise_exception=True)
        evaluation = evaluation_start(group=data.validated_data["resource_group"],
                                      candidate=data.validated_data["policy"],
                                      days=data.validated_data["days"], actor=request.user)
        return Response(EvaluationOutput(evaluation).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: EvaluationOutput})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """A queued evaluation is cancelled at once, a running one at its next progress point."""
        evaluation = self.get_object()
        evaluation_cancel(evaluation=evaluation)
        evaluation.refresh_from_db()
        return Response(EvaluationOutput(evaluation).data)
