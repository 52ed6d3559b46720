"""Tenant portal (/jobs/): my allocations with their risk, detail with explanations, submit with what-if."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Max, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from scheduling import decisions
from scheduling.actions.admission import allocation_cancel, allocation_submit, within_quota
from scheduling.actions.batch import allocation_hold, allocation_release_hold, allocation_requeue
from scheduling.api.serializers import AllocationInput
from scheduling.ascii_numbers import FloatField, IntegerField
from scheduling.engine import MAX_DURATION_MINUTES
from scheduling.errors import DomainError
from scheduling.exits import exit_explanation
from scheduling.ids import row_id
from scheduling.models import (
    Allocation,
    JobArray,
    Placement,
    PlacementDevice,
    ResourceGroup,
    SessionType,
    Tenant,
    VCluster,
)
from scheduling.permissions import CANCEL_MEMBERS_ONLY, OWN_WORK_ONLY, is_operator, manages
from scheduling.queue_view import in_words, position_of
from scheduling.selectors import (
    allocations_visible,
    array_counts,
    events_of,
    explanation,
    tenant_ids,
)
from scheduling.start_estimate import start_estimate
from scheduling.states import FINAL, State
from scheduling.waiting import why_waiting
from scheduling.web.charts import RANGES as CHART_RANGES
from scheduling.web.charts import tenant_charts
from scheduling.web.confirm import confirmation, refusal
from scheduling.web.job_use import job_use
from scheduling.web.paging import older_page
from scheduling.web.reasons import posted_reason


def _risks(allocs: list[Allocation]) -> list[dict[str, Any] | None]:
    """Each allocation's preemption risk: whether it may be preempted at all, protected until (a
    time still to come), on a borrowed node, classes above it; None once it has ended (one query
    for any number of allocations)."""
    on_borrowed = set(Placement.objects.filter(allocation__in=allocs, node__borrowed_by__isnull=False)
                      .values_list("allocation_id", flat=True))
    now = timezone.now()
    return [None if a.state in FINAL else {
        "preemptible": a.preemptible,
        "protected_until": a.protected_until if a.protected_until and a.protected_until > now else None,
        "borrowed": a.pk in on_borrowed, "classes_above": 10 - a.preemption_class} for a in allocs]


@login_required
def jobs(request: HttpRequest) -> HttpResponse:
    """The member's tenants' work, newest first, 50 a page behind an id cursor, optionally only
    the live ones (not yet ended), the ended ones, or one state."""
    qs = allocations_visible(request.user).filter(tenant_id__in=tenant_ids(request.user)).order_by("-id")
    state = request.GET.get("state", "")
    unknown = state if state and state not in ("live", "ended", *State.values) else ""
    if state == "live":
        qs = qs.exclude(state__in=FINAL)
    elif state == "ended":
        qs = qs.filter(state__in=FINAL)
    elif state in State.values:
        qs = qs.filter(state=state)
    else:
        state = ""
    array = request.GET.get("array", "")
    array_id = row_id(array)
    if array_id is not None:  # one array's tasks
        qs = qs.filter(array_id=array_id)
    else:
        array = ""
        qs = one_line_per_array(qs)
    mine, older = older_page(qs, request)
    arrays = {} if array else _arrays_of(mine)
    return render(request, "jobs/list.html", {
        "jobs": [(j, risk, arrays.get(j.pk)) for j, risk in zip(mine, _risks(mine), strict=True)],
        "state": state, "states": State.values, "unknown_state": unknown,
        "array": array, "query": urlencode({k: v for k, v in (("state", state), ("array", array)) if v}),
        "next": older, "charts": tenant_charts(list(Tenant.objects.filter(pk__in=tenant_ids(request.user))
                                                    .order_by("name"))),
        "chart_ranges": CHART_RANGES})


def one_line_per_array(qs: QuerySet[Allocation]) -> QuerySet[Allocation]:
    """An array's tasks as one row: its newest task among ``qs`` stands for it (so an array is on
    one page only, where that task falls)."""
    newest = qs.filter(array__isnull=False).values("array_id").annotate(newest=Max("id")).values("newest")
    return qs.filter(Q(array__isnull=True) | Q(pk__in=newest))


def _arrays_of(allocs: list[Allocation]) -> dict[int, dict[str, Any]]:
    """For each array on the page: the array, its tasks' counts by state, and its tasks (the row
    expands to them)."""
    ids = [a.array_id for a in allocs if a.array_id is not None]
    counts = array_counts(ids)
    tasks: dict[int, list[Allocation]] = {pk: [] for pk in ids}
    for task in Allocation.objects.filter(array_id__in=ids).order_by("array_index").only(
            "id", "array_id", "array_index", "state", "held"):
        tasks[task.array_id].append(task)
    arrays = {ja.pk: ja for ja in JobArray.objects.filter(pk__in=ids)}
    return {a.pk: {"array": arrays[a.array_id], "counts": counts[a.array_id], "tasks": tasks[a.array_id]}
            for a in allocs if a.array_id is not None}


@login_required
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    alloc = allocations_visible(request.user).filter(pk=pk).first()
    if alloc is None:
        raise Http404("no such allocation")
    latest, preemptions = explanation(alloc, request.user)
    for p in preemptions:
        p["own_preemptor"] = p["preemptor"]  # null when another tenant's (preemptor_description says what)
    pending = alloc.state == "pending"
    events = list(events_of(alloc))
    member = alloc.tenant_id in tenant_ids(request.user)
    return render(request, "jobs/detail.html", {
        "job": alloc, "risk": _risks([alloc])[0], "events": events, "preemptions": preemptions,
        "command": shlex.join(str(arg) for arg in alloc.command or []),  # quoted: argv, not one string
        "exit_why": exit_explanation(alloc, (e.reason for e in events)) if alloc.state == State.FAILED else "",
        "use": job_use(alloc, events, timezone.now()),
        "waiting": latest if pending else None, "ended": alloc.state in FINAL,
        "reason": why_waiting(alloc.resource_group, [alloc.pk]).get(alloc.pk) if pending else None,
        "place": in_words(position_of(alloc)) if pending else None,
        "estimate": start_estimate(alloc) if pending else None,
        "member": member, "operator": is_operator(request.user),
        "manages": member and manages(request.user, alloc.tenant_id, alloc.user_id),
        "devices": _devices_of(alloc)})


def _devices_of(alloc: Allocation) -> list[tuple[str, list[str]]]:
    """The GPUs the allocation holds now, per node (a resumed run may hold others)."""
    held: dict[str, list[str]] = {}
    for node, index, uuid in (PlacementDevice.objects.filter(placement__allocation=alloc)
                              .order_by("node__name", "index").values_list("node__name", "index", "uuid")):
        held.setdefault(node, []).append(f"{index} ({uuid})")
    return sorted(held.items())


@login_required
@require_POST
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """A member cancels its tenant's job (pending or suspended at once, running through its agent)."""
    alloc = allocations_visible(request.user).filter(pk=pk).first()
    if alloc is None:
        raise Http404("no such allocation")
    if alloc.tenant_id not in tenant_ids(request.user):  # an operator, who sees it: as the API says
        return refusal(request, CANCEL_MEMBERS_ONLY, f"/jobs/{alloc.pk}/", status=403)
    if not manages(request.user, alloc.tenant_id, alloc.user_id):  # a colleague's: as the API says
        return refusal(request, OWN_WORK_ONLY.format(verb="cancel"), f"/jobs/{alloc.pk}/", status=403)
    asked = confirmation(request, f"Cancel job #{alloc.pk}? Running work is stopped.", f"/jobs/{alloc.pk}/")
    if asked is not None:
        return asked
    try:
        allocation_cancel(allocation=alloc, actor=request.user)
    except DomainError as exc:
        return refusal(request, exc.message, f"/jobs/{alloc.pk}/", status=409)
    return redirect("job-detail", pk=alloc.pk)


VERBS = {"hold": allocation_hold, "release": allocation_release_hold}


@login_required
@require_POST
def verb(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    """Hold or release a job (its tenant's members, or an operator, with a reason), or requeue
    running work (operators)."""
    operator = is_operator(request.user)
    alloc = allocations_visible(request.user).filter(pk=pk).first()
    if alloc is None or (not operator and alloc.tenant_id not in tenant_ids(request.user)):
        raise Http404("no such allocation")
    reason, wrong = posted_reason(request)
    if wrong:
        return refusal(request, wrong, f"/jobs/{alloc.pk}/", status=400)
    if operator and not reason:
        return refusal(request, "a reason is required (kept in the audit log)", f"/jobs/{alloc.pk}/", status=400)
    if not operator and name in VERBS and not manages(request.user, alloc.tenant_id, alloc.user_id):
        return refusal(request, OWN_WORK_ONLY.format(verb=name), f"/jobs/{alloc.pk}/", status=403)
    try:
        if name == "requeue":
            if not operator:
                raise PermissionDenied("operators only")
            allocation_requeue(allocation=alloc, actor=request.user, reason=reason)
        elif name in VERBS:
            VERBS[name](allocation=alloc, actor=request.user, reason=reason or f"{name} by its tenant",
                        operator=operator)
        else:
            raise Http404("no such action")
    except DomainError as exc:
        return refusal(request, exc.message, f"/jobs/{alloc.pk}/", status=409)
    return redirect("job-detail", pk=alloc.pk)


class SubmitForm(forms.Form):
    """A job as a tenant member writes it; the API's own checks judge it (``AllocationInput``). A
    member of several tenants names the one the job is for (the API's ``tenant``)."""

    tenant = forms.ChoiceField(help_text="The tenant whose quota and policies the job runs under.")
    resource_group = forms.ModelChoiceField(queryset=ResourceGroup.objects.order_by("name"), to_field_name="name",
                                            required=False, empty_label="your tenant's default",
                                            help_text="Blank: your tenant's default resource group, as the API "
                                                      "and the CLI take it.")
    vcluster = forms.ChoiceField(required=False, label="vCluster")
    session_type = forms.ChoiceField(required=False)
    nodes = IntegerField(min_value=1, initial=1)
    gpus_per_node = IntegerField(min_value=0, initial=8, label="GPUs per node")
    preemption_class = IntegerField(min_value=0, max_value=10, initial=3)
    priority = IntegerField(min_value=0, max_value=100, required=False,
                            help_text="Blank: your tenant's default priority.")
    rank = IntegerField(min_value=1, max_value=10000, required=False,
                        help_text="Blank: the session type's rank.")
    checkpoint = forms.ChoiceField(choices=[("auto", "auto"), ("manual", "manual"), ("none", "none")],
                                   initial="none")
    walltime_minutes = FloatField(required=False, min_value=0.01, max_value=MAX_DURATION_MINUTES)
    command = forms.CharField(required=False, help_text="split into words as a shell would (quotes keep "
                                                        "words together); no shell runs it")

    def __init__(self, *args: Any, tenants: list[int], **kwargs: Any) -> None:
        """``tenants``: the member's; the choices are the vClusters open to them and the session
        types, each named with the resource groups that have it (names repeat across groups)."""
        super().__init__(*args, **kwargs)
        names = sorted(Tenant.objects.filter(pk__in=tenants).values_list("name", flat=True))
        if len(names) > 1:
            self.fields["tenant"].choices = [("", "choose one")] + [(name, name) for name in names]
        else:  # the only one: the API takes it without a name
            del self.fields["tenant"]
        groups = list(self.fields["resource_group"].queryset)  # type: ignore[attr-defined]
        if len(groups) == 1:
            self.fields["resource_group"].initial = groups[0].name
        open_to = VCluster.objects.filter(Q(tenants__isnull=True) | Q(tenants__in=tenants)).distinct()
        self.fields["vcluster"].choices = [("", "none")] + _by_name(
            open_to.values_list("name", "resource_group__name"))
        self.fields["session_type"].choices = [("", "none")] + _by_name(
            SessionType.objects.values_list("name", "resource_group__name"))

    def clean_command(self) -> list[str]:
        """The command's words: ``python -c "print(1)"`` is three, as the job page shows it back."""
        try:
            return shlex.split(self.cleaned_data["command"] or "")
        except ValueError as exc:  # an unclosed quote, or a backslash at the very end
            raise forms.ValidationError(f"cannot split the command into words: {exc}") from exc

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        out = {"nodes": d["nodes"],
               "per_node": {"gpu": d["gpus_per_node"]}, "preemption_class": d["preemption_class"],
               "checkpoint": d["checkpoint"],
               "walltime_minutes": d["walltime_minutes"], "command": d["command"]}
        if d["resource_group"] is not None:
            out["resource_group"] = d["resource_group"].name
        for key in ("tenant", "vcluster", "session_type", "priority", "rank"):
            if d.get(key) not in (None, ""):
                out[key] = d[key]
        return out


def _by_name(rows: Any) -> list[tuple[str, str]]:
    """(name, group) rows as choices: each name once, labelled with its groups."""
    groups: dict[str, set[str]] = {}
    for name, group in rows:
        groups.setdefault(name, set()).add(group)
    return [(name, f"{name} ({', '.join(sorted(groups[name]))})") for name in sorted(groups)]


@login_required
def submit(request: HttpRequest) -> HttpResponse:
    whatif = None
    errors: dict[str, Any] = {}
    form = SubmitForm(request.POST or None, tenants=tenant_ids(request.user))
    if request.method == "POST" and form.is_valid():
        data = AllocationInput(data=form.payload(), context={
            "request": request, "what_if": request.POST.get("action") == "whatif"})
        if not data.is_valid():
            errors = data.errors
        elif request.POST.get("action") == "whatif":
            try:  # refused as the submission would be, past the tenant's hard quota
                within_quota(tenant=data.validated_data["tenant_obj"], fields=data.model_fields())
            except DomainError as exc:
                errors = {"__all__": [exc.message]}
            else:
                whatif = decisions.what_if(data.validated_data["resource_group"], data.validated_data["tenant_obj"],
                                           data.model_fields(), request.user.get_username())
        else:
            try:
                alloc = allocation_submit(user=request.user, tenant=data.validated_data["tenant_obj"],
                                          group=data.validated_data["resource_group"], fields=data.model_fields())
            except DomainError as exc:
                errors = {"__all__": [exc.message]}
            else:
                return redirect("job-detail", pk=alloc.pk)
    return render(request, "jobs/submit.html", {"form": form, "whatif": whatif, "errors": errors})
