"""Operator pages: a group's node map and queue, decisions, policy editor, overrides, audit (the console's
front page is scheduling/web/console.py)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from scheduling.actions.overrides import (
    allocation_force_preempt,
    allocation_protect,
    group_pause,
    protect_until_problem,
)
from scheduling.actions.policies import config_save, snapshot
from scheduling.ascii_numbers import FloatField, model_formfield
from scheduling.decisions import config_preview, policy_preview
from scheduling.errors import DomainError
from scheduling.evaluations import policy_save_evaluated
from scheduling.forms import PolicyForm
from scheduling.models import (
    REASON_MAX_LENGTH,
    Allocation,
    Placement,
    PolicyChange,
    PolicyEvaluation,
    PreemptionDecision,
    ResourceGroup,
    SessionType,
    VCluster,
)
from scheduling.passes.fairshare import standings
from scheduling.passes.snapshot import policy_of
from scheduling.permissions import operator_required
from scheduling.queue_view import GroupQueue
from scheduling.selectors import AUDIT_FILTERS, audit_changes, audit_entries
from scheduling.waiting import why_waiting
from scheduling.web.charts import RANGES, group_charts, members_charts
from scheduling.web.confirm import confirmation, refusal
from scheduling.web.console import LEGEND, tiles_by_group
from scheduling.web.decision_view import decision_title, readable_candidates
from scheduling.web.evaluations import editor_context, evaluation_of
from scheduling.web.paging import older_page
from scheduling.web.reasons import posted_reason

QUEUE_SHOWN = 100  # requests on the group page, by position, then those set aside


@operator_required
def group_detail(request: HttpRequest, name: str) -> HttpResponse:
    group = get_object_or_404(ResourceGroup, name=name)
    tiles = tiles_by_group(group.pk).get(group.pk, [])
    on: dict[int, list[int]] = {}
    for node_id, alloc_id in Placement.objects.filter(node__resource_group=group, kind="assigned").values_list(
            "node_id", "allocation_id"):
        on.setdefault(node_id, []).append(alloc_id)
    policy = policy_of(group)
    # The pass's own order (the Lattice score in a class_cost group), then the work it leaves out.
    queue = GroupQueue(group, request.user).page(0, QUEUE_SHOWN)
    latest: dict[int, PreemptionDecision] = {}
    for d in PreemptionDecision.objects.filter(preemptor_id__in=[r["id"] for r in queue]).order_by("id"):
        latest[d.preemptor_id] = d  # the last one wins
    reasons = why_waiting(group, [r["id"] for r in queue])
    rows = [{**r, "why": latest.get(r["id"]), "reason": reasons.get(r["id"])} for r in queue]
    shares = standings(group, timezone.now(), policy) if policy.kind == "fair_share" else []
    return render(request, "ops/group.html", {"group": group, "tiles": [(t, on.get(t.node.pk, [])) for t in tiles],
                                              "legend": LEGEND, "gpus_used": sum(t.used for t in tiles if t.kind != "down"),
                                              "gpus": sum(t.node.gpu for t in tiles if t.kind != "down"),
                                              "queue": rows, "shares": shares,
                                              "charts": group_charts(group) + members_charts(group),
                                              "chart_ranges": RANGES})


@operator_required
def decision_detail(request: HttpRequest, pk: int) -> HttpResponse:
    decision = get_object_or_404(PreemptionDecision.objects.select_related("preemptor__tenant", "resource_group"),
                                 pk=pk)
    return render(request, "ops/decision.html", {
        "d": decision, "title": decision_title(decision), **readable_candidates(decision),
        # As the policy editor and the API show it, not as Python writes a dict.
        "policy_json": json.dumps(decision.policy_snapshot, indent=2, sort_keys=True),
    })


@operator_required
def policy_editor(request: HttpRequest, name: str) -> HttpResponse:
    """The policy: previewed on the current state, evaluated on the group's history
    (scheduling/web/evaluations.py), saved with a reason. Opened from an evaluation, the editor
    holds its policy, and saving that policy keeps the evaluation with the audit entry."""
    group = get_object_or_404(ResourceGroup, name=name)
    preview = None
    evaluation = evaluation_of(request, group)
    if request.method == "POST":
        form = PolicyForm(request.POST, policy=group.policy)
        if form.is_valid():
            if request.POST.get("action") == "save" and not form.reason_missing():
                policy_save_evaluated(group=group, policy=form.cleaned_data["policy"], actor=request.user,
                                      reason=form.cleaned_data["reason"],
                                      evaluation_id=evaluation.pk if evaluation else None)
                return redirect("ops-audit")
            if form.is_valid():  # still valid: not a save refused for its reason
                preview = policy_preview(group, form.cleaned_data["policy"])
    else:
        form = PolicyForm(policy=evaluation.candidate_policy if evaluation else group.policy)
    return render(request, "ops/policy.html", {"group": group, "form": form, "preview": preview,
                                               **editor_context(group, evaluation=evaluation)})


class ReasonedForm(forms.ModelForm):
    """A configuration row's form with the reason its save needs (a preview needs none)."""

    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=REASON_MAX_LENGTH,
                             help_text="Why this change (needed to save); kept in the audit log.")


class VClusterForm(ReasonedForm):
    class Meta:
        formfield_callback = model_formfield  # numbers: ASCII digits only
        model = VCluster
        fields = ["type", "allow_lending", "allow_borrowing", "max_borrow_pct", "allow_aggressive_preemption",
                  "weights"]

    def clean_weights(self) -> Any:
        """A cleared box (or ``null``) is no weights of its own: the type's defaults, as ``{}``."""
        weights = self.cleaned_data.get("weights")
        return {} if weights is None else weights


class SessionTypeForm(ReasonedForm):
    class Meta:
        formfield_callback = model_formfield
        model = SessionType
        fields = ["priority", "preemptive", "preemptable", "preempts", "rank", "rank_min", "rank_max", "scope",
                  "criteria", "default_class", "mode", "max_preemptions_per_job", "non_preemptible", "exclusive", "forced", "backfill"]


CONFIG_FORMS: dict[str, tuple[type[VCluster] | type[SessionType], type[ReasonedForm]]] = {
    "vclusters": (VCluster, VClusterForm), "session-types": (SessionType, SessionTypeForm)}


@operator_required
def config_editor(request: HttpRequest, name: str, kind: str, pk: int) -> HttpResponse:
    """A vCluster's or session type's settings: previewed on the current state, saved with a reason."""
    group = get_object_or_404(ResourceGroup, name=name)
    if kind not in CONFIG_FORMS:
        raise Http404(kind)
    model, form_class = CONFIG_FORMS[kind]
    stored = get_object_or_404(model, pk=pk, resource_group=group)
    preview = None
    form = form_class(request.POST or None, instance=copy.copy(stored))
    if request.method == "POST" and form.is_valid():
        if request.POST.get("action") == "save" and not form.cleaned_data["reason"].strip():
            form.add_error("reason", "A reason is needed to save.")
        elif request.POST.get("action") == "save":
            config_save(actor=request.user, reason=form.cleaned_data["reason"], before=snapshot(stored),
                        save=form.save)
            return redirect("ops-audit")
        preview = config_preview(group, form.instance)
    return render(request, "ops/config.html", {"group": group, "target": stored, "form": form, "preview": preview})


class OverrideForm(forms.Form):
    action = forms.ChoiceField(choices=[("protect", "protect"), ("force_preempt", "force preempt")])
    until = forms.DateTimeField(required=False)
    hours = FloatField(required=False, min_value=0.01, max_value=24 * 90,
                       help_text="protect for this long from now (instead of until)")
    reason = forms.CharField(max_length=REASON_MAX_LENGTH)

    def clean_until(self) -> datetime | None:
        until = self.cleaned_data.get("until")
        problem = protect_until_problem(until) if until is not None else None
        if problem:
            raise forms.ValidationError(problem)
        return until

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("action") == "protect" and not cleaned.get("until"):
            if not cleaned.get("hours"):
                raise forms.ValidationError("protect needs 'until' or 'hours'")
            cleaned["until"] = timezone.now() + timedelta(hours=cleaned["hours"])
        return cleaned


@operator_required
@require_POST
def override(request: HttpRequest, pk: int) -> HttpResponse:
    alloc = get_object_or_404(Allocation, pk=pk)
    form = OverrideForm(request.POST)
    if not form.is_valid():
        return refusal(request, f"invalid override: {form.errors.as_text()}", f"/jobs/{alloc.pk}/", status=400)
    if form.cleaned_data["action"] == "force_preempt":
        asked = confirmation(request, f"Force job #{alloc.pk} out now, as a preemption would?", f"/jobs/{alloc.pk}/")
        if asked is not None:
            return asked
    try:
        if form.cleaned_data["action"] == "protect":
            allocation_protect(allocation=alloc, until=form.cleaned_data["until"], actor=request.user,
                               reason=form.cleaned_data["reason"])
        else:
            allocation_force_preempt(allocation=alloc, actor=request.user, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        return refusal(request, exc.message, f"/jobs/{alloc.pk}/", status=409)
    return redirect("job-detail", pk=alloc.pk)


@operator_required
@require_POST
def pause(request: HttpRequest, name: str) -> HttpResponse:
    group = get_object_or_404(ResourceGroup, name=name)
    reason, wrong = posted_reason(request)
    if wrong or not reason:
        return refusal(request, wrong or "a reason is required", f"/ops/groups/{group.name}/", status=400)
    pausing = request.POST.get("paused") == "1"
    asked = confirmation(request, f"{'Pause' if pausing else 'Resume'} preemption in {group.name}?",
                         f"/ops/groups/{group.name}/")
    if asked is not None:
        return asked
    group_pause(group=group, paused=request.POST.get("paused") == "1", actor=request.user, reason=reason)
    return redirect("ops-group", name=group.name)


@operator_required
def audit(request: HttpRequest) -> HttpResponse:
    """The audit log, filtered as the API filters it, 50 entries a page behind an id cursor, each
    with what it changed."""
    filters = {name: request.GET.get(name, "") for name in AUDIT_FILTERS}
    page, older = older_page(audit_entries(filters), request)
    choices = {"actions": PolicyChange.objects.values_list("action", flat=True).distinct().order_by("action"),
               "target_types": PolicyChange.objects.values_list("target_type", flat=True).distinct()
               .order_by("target_type")}
    # The evaluation's URL from its group's name now (the entry's target_repr is the name then).
    evaluated = {change: (pk, group) for change, pk, group in PolicyEvaluation.objects.filter(
        policy_change__in=[c.pk for c in page]).values_list("policy_change_id", "pk", "resource_group__name")}
    return render(request, "ops/audit.html", {
        "changes": [(c, audit_changes(c.before, c.after), evaluated.get(c.pk)) for c in page], "filters": filters,
        **choices,
        "query": urlencode({k: v for k, v in filters.items() if v}),
        "next": older})
