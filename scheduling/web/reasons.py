"""The reason a page's form gives for a change (kept in the audit log and a job's history), read
from the POST with the limits the API's ``ReasonInput`` has: a form field's own (Django's
``CharField`` refuses NUL, which PostgreSQL refuses in text) of at most ``REASON_MAX_LENGTH``
characters."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest

from scheduling.models import REASON_MAX_LENGTH


class _ReasonForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, required=False)


def posted_reason(request: HttpRequest) -> tuple[str, str | None]:
    """The POST's ``reason``, stripped, and what is wrong with it (None when nothing is)."""
    form = _ReasonForm(request.POST)
    if form.is_valid():
        return form.cleaned_data["reason"], None
    return "", "reason: " + " ".join(form.errors["reason"])
