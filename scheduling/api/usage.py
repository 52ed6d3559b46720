"""GET /api/v1/usage/: GPU-hours and node-hours from the allocation history (scheduling/accounting.py).

Tenants' members read their own tenants' usage only; operators everyone's. JSON by default, CSV
with ``?format=csv`` or ``Accept: text/csv`` (a download named after the window).
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from typing import Any

from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import renderers, serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling import accounting, usage_series
from scheduling.api.renderers import JSONRenderer
from scheduling.csv_cells import write_rows
from scheduling.models import ResourceGroup, Tenant, VCluster
from scheduling.permissions import is_operator
from scheduling.selectors import tenant_ids

MAX_DAYS = 400


class CSVRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: dict[str, Any] | None = None) -> bytes:
        out = io.StringIO()
        write_rows(out, [*data["group_by"], "gpu_seconds", "gpu_hours", "node_hours"], data["rows"])
        return out.getvalue().encode()


class UsageQuery(serializers.Serializer):
    tenant = serializers.SlugField(required=False, help_text="A tenant's name; omitted: every tenant you may read.")
    since = serializers.DateTimeField(required=False, help_text="Default: 30 days before `until`.")
    until = serializers.DateTimeField(required=False, help_text="Default: now.")
    group_by = serializers.CharField(required=False, default="tenant,day",
                                     help_text="Comma-separated: " + ", ".join(accounting.GROUP_BY_FIELDS))

    def validate_group_by(self, value: str) -> list[str]:
        fields = [f.strip() for f in value.split(",") if f.strip()]
        unknown = [f for f in fields if f not in accounting.GROUP_BY_FIELDS]
        if unknown or not fields or len(set(fields)) != len(fields):
            raise serializers.ValidationError(
                f"a comma-separated list of distinct fields among {', '.join(accounting.GROUP_BY_FIELDS)}")
        return fields

    def validate_tenant(self, value: str) -> Tenant:
        user = self.context.get("user")
        named = Tenant.objects.filter(name=value)
        if user is not None and not is_operator(user):
            # Among the member's own tenants only: another tenant's name and a name that exists
            # nowhere read alike (403), so the answer does not tell which tenants exist.
            tenant = named.filter(pk__in=tenant_ids(user)).first()
            if tenant is None:
                raise PermissionDenied("you may read your own tenants' usage only")
            return tenant
        tenant = named.first()
        if tenant is None:
            raise serializers.ValidationError("no such tenant")
        return tenant

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        until = attrs.get("until") or timezone.now()
        try:
            since = attrs.get("since") or until - timedelta(days=30)
        except OverflowError:  # the 30 days before it pass the calendar's first day
            raise serializers.ValidationError({"until": ["too early for the default window: give since too"]}) from None
        if since >= until:
            raise serializers.ValidationError({"since": ["must be before until"]})
        if until - since > timedelta(days=MAX_DAYS):
            raise serializers.ValidationError({"since": [f"the window may span at most {MAX_DAYS} days"]})
        return {**attrs, "since": since, "until": until}


class FormatChecked(APIView):
    """An unknown ``?format=`` is a 400 naming ``format`` (DRF's own answer is a 404), in JSON."""

    reads_query = True  # its query is validated: 400 naming the field (scheduling/api/schema.py)

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        try:
            return super().perform_content_negotiation(request, force)
        except Http404:
            if force:  # the error's own answer
                return JSONRenderer(), JSONRenderer.media_type
            names = ", ".join(r.format for r in self.get_renderers())
            raise ValidationError({"format": [f"one of {names}"]}) from None


    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        """Errors are JSON whatever was asked for (field errors keyed by field, as documented)."""
        if response.status_code >= 400 and getattr(getattr(request, "accepted_renderer", None), "format", "") == "csv":
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


def _window_name(since: datetime, until: datetime) -> str:
    return f"usage-{since:%Y%m%dT%H%M%S}-{until:%Y%m%dT%H%M%S}.csv"


class UsageView(FormatChecked):
    renderer_classes = [JSONRenderer, CSVRenderer, renderers.BrowsableAPIRenderer]

    @extend_schema(
        parameters=[UsageQuery],
        description="JSON; CSV (a download) with `?format=csv` or `Accept: text/csv`.",
        responses={200: inline_serializer("Usage", {
            "since": serializers.DateTimeField(), "until": serializers.DateTimeField(),
            "group_by": serializers.ListField(child=serializers.CharField()),
            "rows": serializers.ListField(child=serializers.DictField())})},
        summary="GPU-hours and node-hours per tenant, user, vCluster, resource group and day")
    def get(self, request: Request) -> Response:
        query = UsageQuery(data=request.query_params, context={"user": request.user})
        query.is_valid(raise_exception=True)
        params = query.validated_data
        visible: list[int] | None = None if is_operator(request.user) else tenant_ids(request.user)
        tenant = params.get("tenant")
        if tenant is not None:
            if visible is not None and tenant.pk not in visible:
                raise PermissionDenied("you may read your own tenants' usage only")
            visible = [tenant.pk]
        rows = accounting.report(since=params["since"], until=params["until"], tenant_ids=visible,
                                 group_by=params["group_by"])
        body = {"since": params["since"], "until": params["until"], "group_by": params["group_by"], "rows": rows}
        headers = {}
        if getattr(request, "accepted_renderer", None) and request.accepted_renderer.format == "csv":
            headers["Content-Disposition"] = f'attachment; filename="{_window_name(params["since"], params["until"])}"'
        return Response(body, headers=headers)


class SeriesQuery(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["group", "vcluster", "tenant"])
    name = serializers.CharField(help_text="The group's, tenant's name, or the vCluster's name within `resource_group`.")
    resource_group = serializers.SlugField(required=False,
                                           help_text="Needed for a vCluster; for a tenant, only that group.")
    range = serializers.ChoiceField(choices=list(usage_series.RANGES), default="24h")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        user = self.context.get("user")
        if user is not None and not is_operator(user) and not (
                attrs["scope"] == "tenant"
                and Tenant.objects.filter(pk__in=tenant_ids(user), name=attrs["name"]).exists()):
            # Before any lookup: a tenant learns nothing of what exists beyond its own series.
            raise PermissionDenied("operators only, or a tenant's own series")
        group = None
        if attrs.get("resource_group"):
            group = ResourceGroup.objects.filter(name=attrs["resource_group"]).first()
            if group is None:
                raise serializers.ValidationError({"resource_group": ["no such resource group"]})
        if attrs["scope"] == "group":
            target: Any = ResourceGroup.objects.filter(name=attrs["name"]).first()
        elif attrs["scope"] == "tenant":
            target = Tenant.objects.filter(name=attrs["name"]).first()
        elif group is None:
            raise serializers.ValidationError({"resource_group": ["a vCluster is named within its resource group"]})
        else:
            target = VCluster.objects.filter(resource_group=group, name=attrs["name"]).first()
        if target is None:
            raise serializers.ValidationError({"name": [f"no such {attrs['scope']}"]})
        return {**attrs, "target": target, "group": group}


class UsageSeriesView(FormatChecked):
    @extend_schema(parameters=[SeriesQuery], responses={200: OpenApiTypes.OBJECT},
                   summary="A usage series for charts: GPUs used, held, borrowed, free, pending, preemptions")
    def get(self, request: Request) -> HttpResponse:
        """Operators read every scope; a tenant's members read their tenant's series."""
        query = SeriesQuery(data=request.query_params, context={"user": request.user})
        query.is_valid(raise_exception=True)
        params = query.validated_data
        target = params["target"]
        if not is_operator(request.user) and not (params["scope"] == "tenant" and target.pk in tenant_ids(request.user)):
            raise PermissionDenied("operators only, or a tenant's own series")
        group = params["group"]
        where = {"scope": usage_series.SCOPES[params["scope"]], "scope_id": target.pk, "range_name": params["range"],
                 "resource_group_id": group.pk if group is not None else None}
        renderer = request.accepted_renderer
        if not isinstance(renderer, JSONRenderer) or renderer.get_indent(request.accepted_media_type, {}) is not None:
            return Response(usage_series.series(**where))  # the browsable API, indented JSON
        # Only now, the reader checked: the answer encoded as the renderer would, cached per scope.
        body = usage_series.series_json(**where, encode=renderer.render)
        return HttpResponse(body, content_type=renderer.media_type)
