from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, Sum
from django.http import HttpRequest

from nodes.health import THRESHOLDS, node_health_judge
from nodes.models import AgentToken, Node
from scheduling.admin import AuditedModelForm, StaysInItsGroup
from scheduling.models import Placement
from scheduling.models.allocations import RESOURCES
from scheduling.states import HOLDING


class NodeForm(AuditedModelForm):
    """A node's registered capacity is not lowered below what its live placements hold (work
    running or leaving there, nodes held for a preemptor): the node would be over capacity, as
    ``check_invariants`` says. Drain it, and lower it once the work has left."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance.pk is None:
            return cleaned
        live = Placement.objects.filter(Q(kind="held") | Q(kind="assigned", allocation__state__in=HOLDING),
                                        node_id=self.instance.pk)
        held = live.aggregate(**{r: Sum(r) for r in RESOURCES})
        for resource in RESOURCES:
            value, used = cleaned.get(resource), held[resource] or 0
            if value is not None and value < used:
                self.add_error(resource, f"{used} are held on this node now (running, leaving or held "
                                         "work): drain it, and lower it once that work has left")
        return cleaned


@admin.register(Node)
class NodeAdmin(StaysInItsGroup):
    form = NodeForm
    list_display = ["name", "resource_group", "vcluster", "borrowed_by", "state", "gpu", "cpu",
                    "memory", "last_heartbeat_at", "health_reason"]
    # What the agent reports is not edited here; the GPU health thresholds are (audited). Nor is what
    # Lattice derives: the state changes by drain and undrain (audited, a drain lasting until its
    # undrain) and by liveness, lending by the scheduling pass.
    readonly_fields = ["state", "borrowed_by", "last_heartbeat_at", "last_seq", "agent_version", "gpu_healthy", "devices_reported_at",
                       "device_mismatch", "cgroups", "cgroups_note", "gpu_health", "health_reason"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Named when added, never after: the name is its agents' channel-layer group and how
        # allocations' ``ran_on`` and history name it. Renamed, its connected agent heard none of
        # its commands, and a node added under the old name had its commands sent to that agent.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "name"] if obj is not None else fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and set(form.changed_data) & set(THRESHOLDS):  # judged again under the new thresholds
            node_health_judge(node=obj, actor=request.user, why=form.cleaned_data.get("change_reason", ""))
    list_filter = ["resource_group", "state", "vcluster", "borrowed_by"]
    search_fields = ["name"]
    list_select_related = ["resource_group", "vcluster", "borrowed_by"]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "node", "created_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["node__name", "prefix"]
    readonly_fields = ["prefix", "digest", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tokens are issued by `manage.py agent_token` or the console, which show them once.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser
