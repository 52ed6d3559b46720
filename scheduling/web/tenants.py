"""Operator console: tenants and their policies (/ops/tenants/).

A tenant's priority policy (Backend.AI's project resource policy: default priority, whether its
users may change it, the range), each member's own (blank: the tenant's), its fair share and its
GPU-hours budget (the Lattice score's budget penalty): previewed on the current state, saved
with a reason, every changed row audited.
"""

from __future__ import annotations

import copy
from typing import Any

from django import forms
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from scheduling.actions.policies import config_save, snapshot
from scheduling.ascii_numbers import model_formfield
from scheduling.models import REASON_MAX_LENGTH, Membership, Quota, Tenant, priority_policy
from scheduling.permissions import operator_required
from scheduling.tenant_preview import tenant_preview, words

QUOTA_FIELDS = ["default_priority", "priority_changeable", "min_priority", "max_priority", "fair_share",
                "gpu_hours_budget"]
MEMBER_FIELDS = ["default_priority", "priority_changeable", "min_priority", "max_priority"]


class QuotaPolicyForm(forms.ModelForm):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=REASON_MAX_LENGTH,
                             help_text="Why this change (needed to save); kept in the audit log.")

    class Meta:
        formfield_callback = model_formfield  # numbers: ASCII digits only
        model = Quota
        fields = QUOTA_FIELDS
        help_texts = {
            "default_priority": "What a request that names no priority gets.",
            "priority_changeable": "May the tenant's users name a priority at all.",
            "min_priority": "The lowest priority its users may name.",
            "max_priority": "The highest priority its users may name.",
            "fair_share": "Its fair share of each resource group (0 to 1).",
            "gpu_hours_budget": "GPU-hours a calendar month (UTC); past 80 % its queue score falls. Blank: none.",
        }


class MemberPolicyForm(forms.ModelForm):
    class Meta:
        formfield_callback = model_formfield
        model = Membership
        fields = MEMBER_FIELDS


class MemberFormSetBase(forms.BaseModelFormSet):
    """The tenant's members as they are: a form for anyone else (another tenant's member, a new
    row) is refused, never previewed or saved."""

    def __init__(self, *args: Any, tenant: Tenant, quota: Quota, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.quota = quota  # the tenant's quota as this same post edits it

    def _construct_form(self, i: int, **kwargs: Any) -> Any:
        """Each member's default priority is checked against the range the tenant's policy will
        have once saved, not the one stored (both are edited in one post)."""
        form = super()._construct_form(i, **kwargs)
        form.instance.quota_in_effect = self.quota
        return form

    def clean(self) -> None:
        super().clean()
        members = {m.pk for m in self.get_queryset()}
        if any(f.instance.pk not in members for f in self.forms):
            raise forms.ValidationError(f"Only the members of {self.tenant.name} can be edited here; "
                                        "reload the page.")


MemberFormSet = forms.modelformset_factory(Membership, form=MemberPolicyForm, formset=MemberFormSetBase, extra=0)


@operator_required
def tenant_list(request: HttpRequest) -> HttpResponse:
    tenants = Tenant.objects.select_related("quota").prefetch_related("memberships__user").order_by("name")
    rows = [(t, getattr(t, "quota", None)) for t in tenants]
    return render(request, "ops/tenants.html", {"rows": [
        (t, q, words(priority_policy(q, None))) for t, q in rows]})


@operator_required
def tenant_editor(request: HttpRequest, name: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, name=name)
    stored = get_object_or_404(Quota, tenant=tenant)
    members = Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    form = QuotaPolicyForm(request.POST or None, instance=copy.copy(stored))
    formset = MemberFormSet(request.POST or None, queryset=members, prefix="m", tenant=tenant, quota=form.instance)
    preview = None
    if request.method == "POST" and form.is_valid() & formset.is_valid():
        reason = form.cleaned_data["reason"].strip()
        if request.POST.get("action") == "save" and not reason:
            form.add_error("reason", "A reason is needed to save.")
        elif request.POST.get("action") == "save":
            _save(request.user, reason, stored, form, formset)
            return redirect("ops-audit")
        else:
            before = {m.pk: m for m in members.all()}  # fresh rows: the forms changed theirs
            pairs = [(before[f.instance.pk], f.instance) for f in formset.forms]
            preview = tenant_preview(stored, form.instance, pairs, timezone.now())
    return render(request, "ops/tenant.html", {"tenant": tenant, "form": form, "formset": formset,
                                               "preview": preview})


def _save(actor: Any, reason: str, stored: Quota, form: QuotaPolicyForm, formset: Any) -> None:
    """The quota and every member whose form changed, each with its audit entry, all or nothing."""
    with transaction.atomic():
        if [name for name in form.changed_data if name != "reason"]:
            config_save(actor=actor, reason=reason, before=snapshot(stored), save=form.save)
        for member_form in formset.forms:
            if member_form.has_changed():
                before = snapshot(Membership.objects.get(pk=member_form.instance.pk))
                config_save(actor=actor, reason=reason, before=before, save=member_form.save)
