"""Allocations for tenants: submit, list, detail, cancel, events, explain, what-if."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling import decisions
from scheduling.actions.admission import (
    allocation_cancel,
    allocation_submit,
    array_submit,
    within_quota,
)
from scheduling.actions.batch import (
    allocation_hold,
    allocation_release_hold,
    allocation_requeue,
    array_apply,
)
from scheduling.api.filters import AllocationFilter
from scheduling.api.pagination import NewestFirst, OldestFirst
from scheduling.api.serializers import (
    AllocationInput,
    AllocationOutput,
    ArrayLine,
    ArrayOutput,
    EventOutput,
    VerbInput,
)
from scheduling.models import Allocation, JobArray
from scheduling.permissions import (
    CANCEL_MEMBERS_ONLY,
    OWN_WORK_ONLY,
    IsOperator,
    is_operator,
    manages,
)
from scheduling.queue_view import position_of
from scheduling.selectors import (
    allocations_visible,
    array_counts,
    arrays_visible,
    events_of,
    explanation,
    tenant_ids,
)
from scheduling.start_estimate import start_estimate
from scheduling.waiting import why_waiting


def members_only_cancel(request: Request, tenant_id: int) -> None:
    """Cancelling is its tenant's members' (an operator who is one cancels as a member): an operator
    holds, requeues or force-preempts tenants' work, each with a reason and audited, and never
    cancels it (the job page offers no cancel to a non-member either)."""
    if tenant_id not in tenant_ids(request.user):
        raise PermissionDenied(CANCEL_MEMBERS_ONLY)


def own_or_admin(request: Request, work: Allocation | JobArray, verb: str) -> None:
    """A member cancels, holds or releases the work they submitted; a tenant's admin any of its work
    (``permissions.manages``). Operators hold and release as operators, and are not asked this."""
    if not manages(request.user, work.tenant_id, work.user_id):
        raise PermissionDenied(OWN_WORK_ONLY.format(verb=verb))


def verb_reason(request: Request, default: str) -> tuple[str, bool]:
    """The reason given for a hold, release or requeue (operators must give one), and whether the
    caller acts as an operator."""
    data = VerbInput(data=request.data)
    data.is_valid(raise_exception=True)
    operator = is_operator(request.user)
    reason = data.validated_data["reason"].strip()
    if operator and not reason:
        raise serializers.ValidationError({"reason": ["operators give a reason (kept in the audit log)"]})
    return reason or default, operator


class AllocationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = AllocationOutput
    pagination_class = NewestFirst

    filterset_class = AllocationFilter

    def get_queryset(self) -> QuerySet[Allocation]:
        return allocations_visible(self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Newest first, a cursor per page, read as plain rows of the columns shown."""
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()).values(*AllocationOutput.columns()))
        assert page is not None
        return self.get_paginated_response([AllocationOutput.from_row(row) for row in page])

    @extend_schema(request=AllocationInput, responses={201: AllocationOutput})
    def create(self, request: Request) -> Response:
        data = AllocationInput(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        array = data.array_spec()
        if array is not None:
            spec, indices, throttle = array
            made = array_submit(user=request.user, tenant=data.validated_data["tenant_obj"],
                                group=data.validated_data["resource_group"], fields=data.model_fields(),
                                spec=spec, indices=indices, throttle=throttle)
            return Response(ArrayOutput(arrays_visible(request.user).get(pk=made.pk)).data,
                            status=status.HTTP_201_CREATED)
        # Shown as stored, from the row just written with its related rows as validated (the
        # submitter's own tenant's work): not read back.
        alloc = allocation_submit(user=request.user, tenant=data.validated_data["tenant_obj"],
                                  group=data.validated_data["resource_group"], fields=data.model_fields())
        return Response(AllocationOutput(alloc).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=VerbInput, responses={200: AllocationOutput})
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """Hold pending work: the pass skips it until it is released (a tenant its own tenant's
        work, an operator any, with a reason)."""
        alloc = self.get_object()
        reason, operator = verb_reason(request, "held by its tenant")
        if not operator:
            own_or_admin(request, alloc, "hold")
        allocation_hold(allocation=alloc, actor=request.user, reason=reason, operator=operator)
        return Response(AllocationOutput(allocations_visible(request.user).get(pk=alloc.pk)).data)

    @extend_schema(request=VerbInput, responses={200: AllocationOutput})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Release a hold (a tenant only its own tenant's holds, not an operator's)."""
        alloc = self.get_object()
        reason, operator = verb_reason(request, "released by its tenant")
        if not operator:
            own_or_admin(request, alloc, "release")
        allocation_release_hold(allocation=alloc, actor=request.user, reason=reason, operator=operator)
        return Response(AllocationOutput(allocations_visible(request.user).get(pk=alloc.pk)).data)

    @extend_schema(request=VerbInput, responses={200: AllocationOutput})
    @action(detail=True, methods=["post"], permission_classes=[IsOperator])
    def requeue(self, request: Request, pk: str | None = None) -> Response:
        """Operators: stop running work (it keeps its nodes until gone) and queue it again with its
        submission time."""
        alloc = self.get_object()
        reason, _ = verb_reason(request, "")
        allocation_requeue(allocation=alloc, actor=request.user, reason=reason)
        return Response(AllocationOutput(allocations_visible(request.user).get(pk=alloc.pk)).data)

    @extend_schema(request=None, responses={200: AllocationOutput})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        alloc = self.get_object()
        members_only_cancel(request, alloc.tenant_id)
        own_or_admin(request, alloc, "cancel")
        allocation_cancel(allocation=alloc, actor=request.user)
        return Response(AllocationOutput(allocations_visible(request.user).get(pk=alloc.pk)).data)

    @extend_schema(responses={200: EventOutput(many=True)})
    @action(detail=True, methods=["get"], pagination_class=OldestFirst)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The allocation's history, oldest first, a cursor per page."""
        page = self.paginate_queryset(events_of(self.get_object()).order_by("id"))
        assert page is not None
        return self.get_paginated_response(EventOutput(page, many=True).data)

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def explain(self, request: Request, pk: str | None = None) -> Response:
        """Why it waits: the limit that binds (``reason``: code, explanation, facts, and the engine's
        code for why preemption does not help), its place in the queue (``queue``), when it is
        estimated to start (``start_estimate``, with the estimate's assumptions), its latest
        decision (``waiting``) with its queue score and the score's terms in a class_cost group;
        and why it was preempted (each decision that chose it)."""
        alloc = self.get_object()
        latest_shown, shown = explanation(alloc, request.user)
        pending = alloc.state == "pending"
        waiting = latest_shown if pending else None
        return Response({
            "allocation": alloc.pk, "state": alloc.state,
            "reason": why_waiting(alloc.resource_group, [alloc.pk]).get(alloc.pk) if pending else None,
            "queue": position_of(alloc) if pending else None,
            "start_estimate": start_estimate(alloc) if pending else None,
            "waiting": waiting,
            "queue_score": (waiting or {}).get("queue_score"),
            "latest_decision": latest_shown,
            "preemptions": shown,
        })

    @extend_schema(request=AllocationInput, responses={200: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["post"], url_path="what-if")
    def what_if(self, request: Request) -> Response:
        """The decision this request would get now. Nothing is stored. A request past its tenant's
        hard quota is refused (409, naming the quota) as its submission would be (an array's: all
        its tasks at once)."""
        data = AllocationInput(data=request.data, context={"request": request, "what_if": True})
        data.is_valid(raise_exception=True)
        array = data.array_spec()
        within_quota(tenant=data.validated_data["tenant_obj"], fields=data.model_fields(),
                     tasks=1 if array is None else len(array[1]))
        return Response(decisions.what_if(data.validated_data["resource_group"], data.validated_data["tenant_obj"],
                                          data.model_fields(), request.user.get_username()))


class ArrayViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Arrays of tasks: each with its tasks' ids, indices and states; cancel, hold or release all
    of them at once (a task alone through ``/allocations/{id}/``)."""

    serializer_class = ArrayOutput
    pagination_class = NewestFirst

    def get_queryset(self) -> QuerySet[JobArray]:
        return arrays_visible(self.request.user)

    @extend_schema(responses={200: ArrayLine(many=True)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Each array as one line: how many of its tasks are in each state (one query a page); its
        tasks are at ``/arrays/{id}/``."""
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None  # always paginated
        counts = array_counts([a.pk for a in page])
        return self.get_paginated_response(ArrayLine(page, many=True, context={"counts": counts}).data)

    def _verb(self, request: Request, verb: str) -> Response:
        array = self.get_object()
        if verb == "cancel":
            members_only_cancel(request, array.tenant_id)
        reason, operator = verb_reason(request, f"{verb} of the array by its tenant")
        if verb == "cancel" or not operator:
            own_or_admin(request, array, verb)
        outcome = array_apply(array=array, verb=verb, actor=request.user, reason=reason, operator=operator)
        return Response({**ArrayOutput(array).data, **outcome})

    @extend_schema(request=VerbInput, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._verb(request, "cancel")

    @extend_schema(request=VerbInput, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        return self._verb(request, "hold")

    @extend_schema(request=VerbInput, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        return self._verb(request, "release")
