"""Decision records: operators read all; tenants their own, redacted."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from scheduling.api.filters import DecisionFilter
from scheduling.api.pagination import NewestFirst
from scheduling.api.serializers import DecisionOutput
from scheduling.selectors import LIST_FIELDS, decisions_visible, redact_decision, redact_rows


class PreemptionViewSet(viewsets.ReadOnlyModelViewSet):
    pagination_class = NewestFirst
    serializer_class = DecisionOutput

    filterset_class = DecisionFilter

    def get_queryset(self) -> Any:
        return decisions_visible(self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Newest first, a cursor per page; each record without its candidates (see the detail)."""
        paginator = self.paginator
        bound = paginator.id_bound(request) if isinstance(paginator, NewestFirst) else None
        visible = decisions_visible(request.user, bound)
        page = self.paginate_queryset(self.filter_queryset(visible).values(*LIST_FIELDS))
        assert page is not None
        return self.get_paginated_response(redact_rows(page, request.user))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(redact_decision(self.get_object(), request.user))
