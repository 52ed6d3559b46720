"""The console's node page (/ops/nodes/NAME/): what the node is and runs, drain and undrain, and a
new agent token shown once. Operators only; every change with a reason, audited."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache

from nodes import actions, drain, health
from nodes.models import Node, NodeState
from scheduling.models import REASON_MAX_LENGTH, Placement, PlacementDevice
from scheduling.permissions import operator_required
from scheduling.selectors import audit_changes, audit_entries
from scheduling.web.confirm import confirmation

ACTIONS = ("drain", "undrain", "agent_token", "clear_xids")


class NodeChange(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, help_text="Why; kept in the audit log.")


@operator_required
@never_cache  # the page that shows a new token must not be kept by any cache
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("resource_group", "vcluster", "borrowed_by"), name=name)
    form = NodeChange(request.POST or None)
    token = None
    if request.method == "POST" and form.is_valid():
        what, reason = form.cleaned_data["action"], form.cleaned_data["reason"]
        if what == "agent_token":
            token = actions.agent_token_replace(node=node, actor=request.user, reason=reason)
            form = NodeChange()
        elif what == "clear_xids":
            health.node_clear_xids(node=node, actor=request.user, reason=reason)
            return redirect("ops-node", name=node.name)
        else:
            asked = confirmation(request, f"Drain {node.name}? No new work goes to it until an undrain.",
                                 f"/ops/nodes/{node.name}/") if what == "drain" else None
            if asked is not None:
                return asked
            (drain.node_drain if what == "drain" else drain.node_undrain)(
                node=node, actor=request.user, reason=reason)
            return redirect("ops-node", name=node.name)
    running = Placement.objects.filter(node=node).select_related("allocation__tenant").order_by("allocation_id")
    history = list(audit_entries({"target_type": Node._meta.label_lower, "target": str(node.pk)})[:20])
    holders = dict(PlacementDevice.objects.filter(node=node).values_list("index", "placement__allocation_id"))
    gpus = {g.get("index"): g for g in node.gpu_health if isinstance(g, dict)}
    node_devices = [(d, holders.get(d.index), gpus.get(d.index, {})) for d in node.devices.all()]
    return render(request, "ops/node.html", {
        "node": node, "form": form, "token": token, "placements": running, "node_devices": node_devices,
        "drainable": node.state not in (NodeState.DRAINING, NodeState.DRAINED),
        "xids": any(g.get("xid") for g in gpus.values()),
        "history": [(c, audit_changes(c.before, c.after)) for c in history],
    }, status=400 if form.errors else 200)
