"""Operator pages of policy evaluations: "evaluate on the last N days" from the policy editor, the
evaluation's page (live progress, cancel, the comparison) and the replay's full HTML report.
Operators only, like every page of /ops/ (tenants get 403)."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from scheduling.ascii_numbers import IntegerField
from scheduling.errors import Conflict
from scheduling.evaluations import effective, evaluation_cancel, evaluation_start
from scheduling.forms import PolicyForm
from scheduling.ids import row_id
from scheduling.models import EvaluationStatus, PolicyEvaluation, ResourceGroup
from scheduling.models.evaluations import MAX_DAYS, MIN_DAYS
from scheduling.permissions import operator_required
from scheduling.replay.html import comparison
from scheduling.replay.html import render as render_report
from scheduling.selectors import audit_changes

DEFAULT_DAYS = 7
RECENT = 10  # evaluations listed on the policy page


class EvaluationForm(PolicyForm):
    """The policy editor's fields (validated by the engine's parser) and how many days of the
    group's history to replay (the reason is ignored: nothing is saved)."""

    days = IntegerField(min_value=MIN_DAYS, max_value=MAX_DAYS, initial=DEFAULT_DAYS,
                        label="Evaluate on the last", help_text=f"days ({MIN_DAYS} to {MAX_DAYS})")


def editor_context(group: ResourceGroup, *, days: Any = DEFAULT_DAYS, days_errors: Any = None,
                   evaluation: PolicyEvaluation | None = None) -> dict[str, Any]:
    """What the policy page shows of evaluations: the days box, its errors, the evaluation the
    editor was opened from (kept with the audit entry if this policy is saved), recent ones."""
    return {"evaluate": {"days": days, "errors": days_errors or [], "min": MIN_DAYS, "max": MAX_DAYS,
                         "from": evaluation,
                         # Its baseline is no longer the group's policy: a save would not keep it.
                         "stale": evaluation is not None and evaluation.current_policy != group.policy,
                         "recent": PolicyEvaluation.objects.filter(resource_group=group)
                         .select_related("requested_by")[:RECENT]}}


def evaluation_of(request: HttpRequest, group: ResourceGroup) -> PolicyEvaluation | None:
    """The evaluation named by the editor's ``evaluation`` parameter, if it is one of this group's."""
    pk = row_id(request.POST.get("evaluation") or request.GET.get("evaluation") or "")
    return PolicyEvaluation.objects.filter(pk=pk, resource_group=group).first() if pk is not None else None


@operator_required
@require_POST
def evaluate(request: HttpRequest, name: str) -> HttpResponse:
    """Start an evaluation of the edited policy; bad input shows the editor again with its errors
    (400) and starts nothing."""
    group = get_object_or_404(ResourceGroup, name=name)
    form = EvaluationForm(request.POST, policy=group.policy)
    status = 400
    if form.is_valid() and "policy" in form.cleaned_data:
        try:
            evaluation = evaluation_start(group=group, candidate=form.cleaned_data["policy"],
                                          days=form.cleaned_data["days"], actor=request.user)
        except Conflict as exc:  # another evaluation is queued or running
            form.add_error(None, str(exc))
            status = 409
        else:
            return redirect("ops-evaluation", name=group.name, pk=evaluation.pk)
    context = editor_context(group, days=request.POST.get("days", ""), days_errors=form.errors.get("days"),
                             evaluation=evaluation_of(request, group))
    return render(request, "ops/policy.html", {"group": group, "form": form, "preview": None, **context},
                  status=status)


def _evaluation(name: str, pk: int) -> PolicyEvaluation:
    return get_object_or_404(PolicyEvaluation.objects.select_related("resource_group", "requested_by",
                                                                     "policy_change"),
                             pk=pk, resource_group__name=name)


@operator_required
@require_GET
def evaluation_detail(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    """The evaluation: while it runs its progress (the page polls its own status block), then the
    policies side by side with the differences, and the full report below."""
    evaluation = _evaluation(name, pk)
    report = evaluation.report if evaluation.status == EvaluationStatus.DONE else None
    return render(request, "ops/evaluation.html", {
        "e": evaluation, "group": evaluation.resource_group,
        "changes": audit_changes({"policy": effective(evaluation.current_policy)},
                                 {"policy": effective(evaluation.candidate_policy)}),
        "comparison": mark_safe(comparison(report)) if report else "",  # escaped by the replay's HTML
        "jobs": report["trace"]["jobs"] if report else None,
    })


@operator_required
@require_POST
def evaluation_stop(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    evaluation_cancel(evaluation=_evaluation(name, pk))
    return redirect("ops-evaluation", name=name, pk=pk)


@operator_required
@require_GET
@xframe_options_sameorigin  # shown in a frame of the evaluation's page
def evaluation_report(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    """The replay's own self-contained HTML report of this evaluation."""
    evaluation = _evaluation(name, pk)
    if evaluation.status != EvaluationStatus.DONE or not evaluation.report:
        raise Http404("no report yet")
    return HttpResponse(render_report(evaluation.report))
