"""Django admin for every model. Every change to configuration writes a PolicyChange."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from scheduling.actions.policies import config_save, policy_change_record, snapshot
from scheduling.ascii_numbers import ADMIN_OVERRIDES
from scheduling.forms import POLICY_FIELD_NAMES, PREFIX, PolicyFieldsMixin
from scheduling.models import (
    REASON_MAX_LENGTH,
    Allocation,
    AllocationEvent,
    Membership,
    Placement,
    PolicyChange,
    PreemptionDecision,
    Quota,
    ResourceGroup,
    SessionType,
    Tenant,
    VCluster,
)


class AuditedModelForm(forms.ModelForm):
    # Required, as the API's and the console's reason is (at most as long as theirs).
    change_reason = forms.CharField(max_length=REASON_MAX_LENGTH, widget=forms.Textarea(attrs={"rows": 2}),
                                    help_text="Why this change; kept in the audit log.")


class AuditedAdmin(admin.ModelAdmin):
    """Writes a PolicyChange (who, when, before, after, why) for each add, edit, delete."""

    form = AuditedModelForm
    formfield_overrides = ADMIN_OVERRIDES  # numbers: ASCII digits only

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        names = [f for _, opts in fieldsets for f in opts["fields"]]
        if "change_reason" not in names:
            fieldsets = [*fieldsets, ("Audit", {"fields": ["change_reason"]})]
        return fieldsets

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = snapshot(type(obj).objects.filter(pk=obj.pk).first()) if change and obj.pk else None
        def save() -> Any:
            super(AuditedAdmin, self).save_model(request, obj, form, change)
            return obj

        config_save(actor=request.user, reason=form.cleaned_data.get("change_reason", ""), before=before, save=save)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        policy_change_record(actor=request.user, action="delete", target=obj, before=snapshot(obj),
                             after=None, reason="deleted in admin")
        super().delete_model(request, obj)


class ResourceGroupForm(PolicyFieldsMixin, AuditedModelForm):
    class Meta:
        model = ResourceGroup
        fields = ["name", "description", "paused", "shadow"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_policy_fields(self.instance.policy if self.instance.pk else {"kind": "class_cost"})

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        policy = self.build_policy()
        if policy is not None:
            self.instance.policy = policy
        return cleaned


@admin.register(ResourceGroup)
class ResourceGroupAdmin(AuditedAdmin):
    form = ResourceGroupForm
    list_display = ["name", "policy_kind", "paused", "shadow", "updated_at"]
    list_filter = ["paused", "shadow"]
    search_fields = ["name", "description"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        return [
            (None, {"fields": ["name", "description", "paused", "shadow"]}),
            ("Preemption policy", {"fields": [PREFIX + n for n in POLICY_FIELD_NAMES]}),
            ("Audit", {"fields": ["change_reason"]}),
        ]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        # The policy fields are added per instance in the form's __init__.
        kwargs["fields"] = ["name", "description", "paused", "shadow", "change_reason"]
        return super().get_form(request, obj, change=change, **kwargs)


class StaysInItsGroup(AuditedAdmin):
    """Chooses its resource group when added, never after: its nodes, allocations and decisions
    stay in their group, and moving it would split them (the API refuses it too)."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "resource_group"] if obj is not None else fields


@admin.register(VCluster)
class VClusterAdmin(StaysInItsGroup):
    list_display = ["name", "resource_group", "type", "allow_lending", "allow_borrowing", "max_borrow_pct"]
    list_filter = ["resource_group", "type", "allow_lending", "allow_borrowing"]
    search_fields = ["name"]


@admin.register(SessionType)
class SessionTypeAdmin(StaysInItsGroup):
    list_display = ["name", "resource_group", "priority", "rank", "preemptive", "preemptable", "scope"]
    list_filter = ["resource_group", "preemptive", "preemptable", "scope"]
    search_fields = ["name"]


class QuotaInline(admin.StackedInline):
    model = Quota
    can_delete = False
    formfield_overrides = ADMIN_OVERRIDES


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    formfield_overrides = ADMIN_OVERRIDES
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(AuditedAdmin):
    list_display = ["name", "display_name", "unix_user", "unix_group", "allow_root", "created_at"]
    search_fields = ["name", "display_name"]
    inlines = [QuotaInline, MembershipInline]

    def _create_formsets(self, request: HttpRequest, obj: Any, change: bool) -> Any:
        """The quota and the members are edited in one post: each member's default priority is
        checked against the tenant's range as this post saves it (as the console's tenant editor
        does), not the one stored. The quota's inline is validated first, which fills its instance."""
        formsets, inline_instances = super()._create_formsets(request, obj, change)
        quotas = [form.instance for formset in formsets if formset.model is Quota for form in formset.forms]
        if quotas:
            for formset in formsets:
                if formset.model is Membership:
                    for form in formset.forms:
                        form.instance.quota_in_effect = quotas[0]
        return formsets, inline_instances


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    list_display = ["tenant", "max_nodes", "max_gpus", "max_concurrent_allocations",
                    "max_preemption_class", "default_priority", "min_priority", "max_priority",
                    "priority_changeable", "fair_share"]
    search_fields = ["tenant__name"]


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ["user", "tenant", "role", "unix_user", "unix_group"]
    list_filter = ["tenant", "role"]
    search_fields = ["user__username", "tenant__name"]
    autocomplete_fields = ["user"]


class PlacementInline(admin.TabularInline):
    model = Placement
    extra = 0
    readonly_fields = ["node", "kind", "gpu", "cpu", "memory", "created_at"]
    can_delete = False


class EventInline(admin.TabularInline):
    model = AllocationEvent
    extra = 0
    fields = ["created_at", "from_state", "to_state", "reason", "actor", "decision"]
    readonly_fields = fields
    can_delete = False
    ordering = ["created_at"]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "resource_group", "state", "preemption_class", "priority",
                    "node_count", "per_node_gpu", "submitted_at"]
    list_filter = ["state", "resource_group", "tenant", "checkpoint", "preemption_class"]
    search_fields = ["id", "name", "tenant__name", "user__username"]
    date_hierarchy = "submitted_at"
    # State changes go through actions only (the state machine); the admin shows them.
    readonly_fields = ["state", "state_changed_at", "preempted_count", "requeue_count", "started_at",
                       "ended_at", "exit_code"]
    inlines = [PlacementInline, EventInline]
    list_select_related = ["tenant", "resource_group"]

    # Operators read tenants' work here; they change it only through audited overrides
    # (protect, force-preempt) in the console. Tenants submit through the API or portal.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AllocationEvent)
class AllocationEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "allocation", "from_state", "to_state", "reason", "actor"]
    list_filter = ["to_state"]
    search_fields = ["allocation__id", "reason"]

    # A job's history, written by the actions only: no one adds, edits or deletes a line of it
    # (its tenant reads it on the job page and in the API as what happened).
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PreemptionDecision)
class PreemptionDecisionAdmin(admin.ModelAdmin):
    list_display = ["created_at", "resource_group", "preemptor", "result", "code", "trigger", "outcome"]
    list_filter = ["resource_group", "result", "code", "trigger", "outcome"]
    search_fields = ["preemptor__id", "explanation"]
    date_hierarchy = "created_at"

    # The record of why work was preempted (tenants read it as the explanation): kept as written.
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PolicyChange)
class PolicyChangeAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "target_type", "target_repr", "reason"]
    list_filter = ["action", "target_type"]
    search_fields = ["target_repr", "reason", "actor__username"]
    date_hierarchy = "created_at"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
