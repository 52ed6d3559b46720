"""The policy form: every field of contract section 6, validated by the engine's own parser."""

from __future__ import annotations

from typing import Any

from django import forms

from scheduling.ascii_numbers import FloatField, IntegerField
from scheduling.engine import InvalidDocument, parse_policy
from scheduling.engine.model import (
    JOB_TYPES,
    KINDS,
    MODES,
    PREEMPT_FOR,
    PREEMPTION_ORDERS,
    RECLAIM_RULES,
    VICTIM_SCOPES,
)
from scheduling.models import REASON_MAX_LENGTH


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


# (field name, form field, kinds it matters for or None for all)
POLICY_FIELDS: list[tuple[str, forms.Field, tuple[str, ...] | None]] = [
    ("kind", forms.ChoiceField(choices=_choices(KINDS)), None),
    ("enabled", forms.BooleanField(required=False, initial=True), None),
    ("mode", forms.ChoiceField(choices=_choices(MODES), initial="suspend"), None),
    ("max_victims", IntegerField(required=False, min_value=0, initial=3,
                                 help_text="Blank: no limit."), None),
    ("near_completion_minutes", FloatField(min_value=0, initial=5), None),
    ("min_runtime_minutes", FloatField(min_value=0, initial=0), None),
    ("max_preemptions_per_job", IntegerField(required=False, min_value=0,
                                             help_text="Blank: no limit."), None),
    ("reclaim_rule", forms.ChoiceField(choices=_choices(RECLAIM_RULES), initial="any"), None),
    ("checkpoint_timeout_minutes", FloatField(min_value=0, initial=10), ("class_cost",)),
    ("max_deferral_minutes", FloatField(min_value=0, max_value=1440, initial=5, help_text=(
        "Checkpoint deferrals an application may ask for, in total per checkpoint; then it is forced.")),
     None),
    ("borrowed_risk", FloatField(required=False, min_value=0, max_value=1, initial=0,
                                 help_text="Work on a borrowed node: its checkpoint cost is discounted by "
                                           "this share (0 to 1; blank or 0: none)."), ("class_cost",)),
    ("preemptible_priority", IntegerField(required=False, min_value=0, max_value=100), ("priority",)),
    ("victim_scope", forms.ChoiceField(choices=_choices(VICTIM_SCOPES), initial="resource_group"), ("priority",)),
    ("preemption_order", forms.ChoiceField(choices=_choices(PREEMPTION_ORDERS), initial="newest"), ("priority",)),
    ("preempt_jobtypes", forms.MultipleChoiceField(choices=_choices(JOB_TYPES), required=False,
                                                   widget=forms.CheckboxSelectMultiple), ("queue",)),
    ("preempt_for", forms.ChoiceField(choices=[("", "least loaded (default)")] + _choices(PREEMPT_FOR),
                                      required=False), ("queue",)),
    ("no_preempt_run_minutes", FloatField(required=False, min_value=0), ("queue",)),
    ("no_preempt_finish_minutes", FloatField(required=False, min_value=0), ("queue",)),
    ("no_preempt_interval_minutes", FloatField(
        required=False, min_value=0, help_text="Minimum uninterrupted run after a start or resume."), ("queue",)),
    ("tolerance", FloatField(min_value=0, initial=0.8), ("fair_share",)),
    ("starvation_timeout_s", FloatField(min_value=0, initial=30), ("fair_share",)),
    ("aggressive_starvation_timeout_s", FloatField(min_value=0, initial=120), ("fair_share",)),
    ("enable_aggressive", forms.BooleanField(required=False, initial=False), ("fair_share",)),
    ("preemption_threshold", FloatField(min_value=0, initial=1.0), ("fair_share",)),
    ("aggressive_threshold", FloatField(min_value=0, initial=0.2), ("fair_share",)),
    ("preemptive_scheduling_backoff_s", FloatField(
        min_value=0, initial=5, help_text="At most one start by preemption per group in this many seconds."),
     ("fair_share",)),
    ("non_preemptible_usage_threshold", FloatField(
        min_value=0, max_value=1, initial=0.0,
        help_text="A tenant whose dominant share is below this keeps all its work (0: off)."), ("fair_share",)),
]
POLICY_FIELD_NAMES = [name for name, _, _ in POLICY_FIELDS]
PREFIX = "policy_"


class PolicyFieldsMixin(forms.Form):
    """Adds one form field per policy field (prefixed ``policy_``) and builds ``policy``."""

    def add_policy_fields(self, initial: dict[str, Any] | None) -> None:
        initial = initial or {}
        for name, field, kinds in POLICY_FIELDS:
            f = field.__class__(**_field_kwargs(field))
            f.label = name.replace("_", " ").capitalize()  # the policy's own field, not the form's name
            # The editor shows a field only while its kind is selected (static/js/editor.js); without
            # JavaScript every field is shown, each saying which kinds use it.
            f.kinds = kinds  # type: ignore[attr-defined]
            if kinds:
                f.help_text = (f.help_text + " " if f.help_text else "") + f"Used by: {', '.join(kinds)}."
            self.fields[PREFIX + name] = f
            if name in initial:
                value = initial[name]
                self.initial[PREFIX + name] = "" if value is None else value

    def build_policy(self) -> dict[str, Any] | None:
        data = self.cleaned_data
        policy: dict[str, Any] = {}
        for name in POLICY_FIELD_NAMES:
            key = PREFIX + name
            if key not in data:
                return None
            value = data[key]
            if value == "" and name == "preempt_for":
                value = None
            if value is None and name == "borrowed_risk":
                value = 0.0
            if name == "preempt_jobtypes":
                value = list(value or [])
            policy[name] = value
        try:
            parse_policy(policy)
        except InvalidDocument as exc:
            for path, message in exc.errors:
                field = PREFIX + path.split(".")[0] if path.split(".")[0] in POLICY_FIELD_NAMES else None
                self.add_error(field, message)
            return None
        return policy


def _field_kwargs(field: forms.Field) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"required": field.required, "initial": field.initial,
                              "help_text": field.help_text}
    for attr in ("choices", "min_value", "max_value"):
        if hasattr(field, attr) and getattr(field, attr) is not None:
            kwargs[attr] = getattr(field, attr)
    if isinstance(field, forms.MultipleChoiceField):
        kwargs["widget"] = forms.CheckboxSelectMultiple
    return kwargs


class PolicyForm(PolicyFieldsMixin):
    """Standalone policy editor (the operator console uses it)."""

    # Not required by the form: a preview needs none (a browser would refuse to send the preview
    # without one); the editor's save asks for it (``reason_missing``).
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=REASON_MAX_LENGTH,
                             help_text="Why this change (needed to save); kept in the audit log.")

    def reason_missing(self) -> bool:
        """Called on a valid form before a save: an empty reason becomes the field's error."""
        if self.cleaned_data.get("reason", "").strip():
            return False
        self.add_error("reason", "A reason is needed to save.")
        return True

    def __init__(self, *args: Any, policy: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_policy_fields(policy)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        policy = self.build_policy()
        if policy is not None:
            cleaned["policy"] = policy
        return cleaned
