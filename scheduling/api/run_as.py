"""Who work runs as on the nodes: each tenant's Unix user and group (and its leave to run as
root), and optionally each member's own, which wins for the work that member submits
(scheduling/actions/starts.py ``run_as_of``). Operators only; every edit with a ``reason``, audited."""

from __future__ import annotations

from rest_framework import serializers

from scheduling.api.filters import MembershipFilter
from scheduling.api.operators import AuditedViewSet, Checked
from scheduling.models import Membership, Tenant


class TenantRunAsOutput(Checked):  # a read-only field sent is a 400 (RefuseUnknown)
    tenant = serializers.CharField(source="name", read_only=True)

    class Meta:
        model = Tenant
        fields = ["tenant", "unix_user", "unix_group", "allow_root", "reason"]


class TenantRunAsViewSet(AuditedViewSet):
    """A tenant's Unix user and group on the nodes (blank: none; agents run such work only where
    their node allows unmapped work) and whether it may run as root (a mapping to root needs it)."""

    serializer_class = TenantRunAsOutput
    queryset = Tenant.objects.order_by("pk")
    lookup_field = "name"
    lookup_url_kwarg = "tenant"
    http_method_names = ["get", "patch", "head", "options"]


class MemberRunAsOutput(Checked):
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "unix_user", "unix_group", "reason"]


class MemberRunAsViewSet(AuditedViewSet):
    """A member's own Unix user and group in a tenant (blank: the tenant's); ``?tenant=`` filters."""

    serializer_class = MemberRunAsOutput
    http_method_names = ["get", "patch", "head", "options"]
    filterset_class = MembershipFilter  # an unknown tenant is a 400 naming the filter
    queryset = Membership.objects.select_related("tenant", "user").order_by("pk")
