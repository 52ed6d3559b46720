"""GET /api/v1/resource-groups/{name}/queue/: the pending queue in the pass's order, with each
request's position, the number ahead, its ordering key and why it waits. Operators read every
request; a tenant member reads its tenants' requests only (the rest counted, never shown)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.ascii_numbers import IntegerInput
from scheduling.models import ResourceGroup
from scheduling.queue_view import GroupQueue
from scheduling.waiting import why_waiting

MAX_LIMIT = 500


class QueuePage(serializers.Serializer):
    offset = IntegerInput(min_value=0, default=0)
    limit = IntegerInput(min_value=1, max_value=MAX_LIMIT, default=100)


class QueueView(APIView):
    @extend_schema(parameters=[QueuePage], responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT,
                                                      404: OpenApiTypes.OBJECT},
                   summary="The group's pending queue: positions, ordering keys, why each waits")
    def get(self, request: Request, name: str) -> Response:
        page = QueuePage(data=request.query_params)
        page.is_valid(raise_exception=True)
        offset, limit = page.validated_data["offset"], page.validated_data["limit"]
        group = get_object_or_404(ResourceGroup, name=name)
        queue = GroupQueue(group, request.user)
        entries = queue.page(offset, offset + limit)
        reasons = why_waiting(group, [e["id"] for e in entries])
        for entry in entries:
            reason = reasons.get(entry["id"])
            entry["reason"] = {"code": reason["code"], "explanation": reason["explanation"]} if reason else None
        return Response({"resource_group": group.name, "kind": queue.kind, "queued": len(queue.rows),
                         "set_aside": len(queue.aside),
                         "count": len(queue.visible), "next": _link(request, offset + limit, limit, len(queue.visible)),
                         "previous": _link(request, offset - limit, limit, len(queue.visible)) if offset else None,
                         "results": entries})


def _link(request: Request, offset: int, limit: int, count: int) -> Any:
    if offset >= count:
        return None
    return request.build_absolute_uri(f"{request.path}?offset={max(offset, 0)}&limit={limit}")
